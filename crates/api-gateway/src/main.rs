//! `chime-gateway`: the timer API (REST and gRPC) over the configured database.

use std::sync::Arc;

use anyhow::Context;
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
    // Without Redis the occurrences a request writes are found by the schedulers' database
    // reads; with it, they are indexed after the commit.
    let stores = chime_storage::Stores::for_service(
        &config.store_settings(),
        config.database_url()?,
        clock.clone(),
    )
    .await?;
    if config.gateway.migrator_endpoint.is_some() {
        tracing::info!(
            "CHIME_MIGRATOR_ENDPOINT is not needed any more: the gateway writes a timer's \
             first occurrences itself; ignored"
        );
    }
    let api: Arc<dyn TimerApi> = Arc::new(
        TimerService::new(
            stores.database.timers.clone(),
            stores.database.occurrences.clone(),
            stores.hot_index.clone(),
            config.horizon(),
            clock,
        )
        .with_networks(config.network_policy()?),
    );
    let http = chime_runtime::bind(config.gateway.http_addr, "REST").await?;
    let grpc = chime_runtime::bind(config.gateway.grpc_addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(config.admin_addr)
        .await
        .context("binding the admin address")?;
    tracing::info!(rest = %config.gateway.http_addr, grpc = %config.gateway.grpc_addr, "starting");
    let served =
        chime_api_gateway::serve(api, http, grpc, admin, chime_runtime::shutdown_token()).await;
    stores.close().await;
    chime_runtime::flush_traces();
    served
}
