//! `chime-migrator`: `migrate` applies the schema migrations and exits (a Kubernetes Job);
//! without a subcommand it runs the migrator service.

// mimalloc, not glibc malloc: the many small allocations per callback cost less CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use anyhow::Context;
use chime_domain::{Clock, SystemClock};
use chime_migrator::{Janitor, Materializer, Migrator, MigratorSettings, RetentionSettings};
use chime_runtime::CommonArgs;
use clap::{Parser, Subcommand};

/// Chime migrator. Without a subcommand: keeps every enabled timer's occurrences written
/// CHIME_MIGRATOR__LEAD (default 1m) ahead in CHIME_DATABASE_URL and the Redis hot index
/// (CHIME_REDIS_URL); /healthz, /readyz and /metrics on CHIME_ADMIN_ADDR (default :9071).
/// `chime-migrator migrate` applies the database migrations and exits.
#[derive(Parser)]
#[command(name = "chime-migrator", version = chime_runtime::build_info!().register())]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending schema migrations and exit (safe to run concurrently and repeatedly).
    Migrate,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let command = cli.command;
    cli.common
        .run(chime_runtime::RuntimeThreads::PerCpu, |config| {
            serve(config, command)
        })
}

async fn serve(config: chime_runtime::Config, command: Option<Command>) -> anyhow::Result<()> {
    match command {
        Some(Command::Migrate) => {
            chime_migrator::migrate(config.database_url()?, config.buckets).await?;
            tracing::info!("schema is current");
            Ok(())
        }
        None => {
            let ran = run(config).await;
            chime_runtime::flush_traces();
            ran
        }
    }
}

async fn run(config: chime_runtime::Config) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let stores = chime_storage::Stores::for_service(
        &config.store_settings(),
        config.database_url()?,
        clock.clone(),
    )
    .await?;
    let (index, leases) = stores.hot_path()?;
    let db = stores.database.clone();
    let settings = MigratorSettings::from_config(&config);
    let materializer = Materializer::new(
        db.timers.clone(),
        db.occurrences.clone(),
        index,
        clock.clone(),
        settings.horizon,
    );
    let migrator = Arc::new(Migrator::new(materializer, leases.clone(), settings));
    migrator.join(chime_runtime::Roster::new(
        stores.membership()?,
        chime_migrator::GROUP,
        migrator.token().clone(),
        config.buckets,
        config.roster(),
        clock.clone(),
    ));
    let janitor = Janitor::new(
        db.retention.clone(),
        leases,
        Arc::new(SystemClock),
        RetentionSettings::from_config(&config),
    );
    if let Some(addr) = config.migrator.addr {
        tracing::warn!(
            %addr,
            "CHIME_MIGRATOR_ADDR is not used any more: the migrator serves no gRPC, only its \
             admin endpoints (CHIME_ADMIN_ADDR); ignored"
        );
    }
    let admin = chime_runtime::admin::bind_admin(Some(
        config
            .admin_addr
            .unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 9071))),
    ))
    .await
    .context("binding the admin address")?;
    tracing::info!(
        lead = ?settings.horizon.lead,
        max_ahead = settings.horizon.max_rows,
        "starting"
    );
    let readiness = Arc::new(chime_runtime::DatabaseReadiness(db.clone()));
    let shutdown = chime_runtime::shutdown_token();
    let (served, ()) = tokio::join!(
        chime_migrator::serve(migrator, admin, readiness, shutdown.clone()),
        janitor.run(shutdown.clone())
    );
    stores.close().await;
    served
}
