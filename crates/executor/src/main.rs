//! `chime-executor`: fires the occurrences schedulers hand it.

use std::sync::Arc;

use anyhow::Context;
use chime_domain::{Clock, SystemClock};
use chime_executor::{CallbackSettings, Executor, ExecutorSettings, HttpTarget, Signer, Targets};
use chime_runtime::CommonArgs;
use clap::Parser;

/// Chime executor: accepts due occurrences over gRPC (CHIME_EXECUTOR_ADDR, default :50061),
/// claims each in CHIME_DATABASE_URL, performs its HTTP callback and records the outcome. At
/// most CHIME_EXECUTOR__MAX_IN_FLIGHT (default 1024) at once; beyond that it answers "full"
/// and schedulers try another replica. On SIGTERM it stops taking work and finishes what it
/// accepted within CHIME_SHUTDOWN_GRACE.
#[derive(Parser)]
#[command(name = "chime-executor", version)]
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
    let stores = chime_storage::Stores::for_service(
        &config.store_settings(),
        config.database_url()?,
        clock.clone(),
    )
    .await?;
    let db = stores.database.clone();
    // Every callback is signed with its app's secret (Standard Webhooks).
    let signer = Signer::new(
        db.credentials.clone(),
        clock.clone(),
        config.auth.cache_ttl.get(),
    );
    let targets = Targets::new(
        HttpTarget::new(CallbackSettings::from_config(&config))?.with_signer(Arc::new(signer)),
    );
    // Retries are scheduled in the hot index; without Redis the sweeper finds them when due.
    if stores.hot_index.is_none() {
        tracing::warn!("no CHIME_REDIS_URL: retries wait for the scheduler's sweeper");
    }
    let index = stores.hot_index.clone();
    let executor = Executor::start(
        db.timers.clone(),
        db.occurrences.clone(),
        index,
        clock,
        targets,
        ExecutorSettings::from_config(&config),
    );
    let grpc = chime_runtime::bind(config.executor.addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(Some(
        config
            .admin_addr
            .unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 9061))),
    ))
    .await
    .context("binding the admin address")?;
    tracing::info!(grpc = %config.executor.addr, max_in_flight = config.executor.max_in_flight, "starting");
    let served = chime_executor::grpc::serve(
        executor,
        grpc,
        admin,
        Arc::new(chime_runtime::DatabaseReadiness(db.clone())),
        chime_runtime::shutdown_token(),
        config.shutdown_grace.get(),
        chime_runtime::Tls::load(&config.tls)?,
    )
    .await;
    stores.close().await;
    chime_runtime::flush_traces();
    served
}
