//! `chime-gateway`: the timer API (REST and gRPC) over the configured database.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chime_api_gateway::migrator::{GrpcMigrator, MigrateNotifier, NoMigrator};
use chime_api_gateway::{TimerApi, TimerService};
use chime_domain::{Clock, SystemClock};
use chime_runtime::CommonArgs;
use clap::Parser;

/// Chime API gateway: serves the timer API over REST (CHIME_HTTP_ADDR, default :8080) and
/// gRPC (CHIME_GRPC_ADDR, default :50051) against CHIME_DATABASE_URL. Run
/// `chime-migrator migrate` first: the gateway refuses a database whose schema is behind.
#[derive(Parser)]
#[command(name = "chime-gateway", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Some(config) = cli.common.start()? else {
        return Ok(());
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let db = chime_runtime::open_database(&config, clock.clone()).await?;
    let migrator: Arc<dyn MigrateNotifier> = match &config.gateway.migrator_endpoint {
        Some(endpoint) => Arc::new(
            GrpcMigrator::new(endpoint, Duration::from_secs(1)).map_err(anyhow::Error::msg)?,
        ),
        None => {
            tracing::info!(
                "no CHIME_MIGRATOR_ENDPOINT: new timers wait for the migrator's periodic step"
            );
            Arc::new(NoMigrator)
        }
    };
    let api: Arc<dyn TimerApi> = Arc::new(TimerService::new(
        db.timers,
        db.occurrences,
        migrator,
        clock,
    ));
    let http = chime_runtime::bind(config.gateway.http_addr, "REST").await?;
    let grpc = chime_runtime::bind(config.gateway.grpc_addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(config.admin_addr)
        .await
        .context("binding the admin address")?;
    tracing::info!(rest = %config.gateway.http_addr, grpc = %config.gateway.grpc_addr, "starting");
    chime_api_gateway::serve(api, http, grpc, admin, chime_runtime::shutdown_token()).await
}
