//! `chime-scheduler`: the scheduler-trigger service.

// mimalloc, not glibc malloc: the many small allocations per callback cost less CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chime_domain::{Clock, SystemClock};
use chime_runtime::CommonArgs;
use chime_scheduler::{Endpoints, GrpcExecutors, Scheduler, SchedulerSettings};
use clap::Parser;

/// Chime scheduler-trigger: leases hot-index shards in CHIME_REDIS_URL and hands each due
/// occurrence to the executors at its due millisecond: those announced in the membership
/// roster, or those of CHIME_EXECUTOR_ENDPOINTS if set (comma-separated URLs, or one DNS
/// name such as chime-executor:50061, re-resolved every few seconds).
/// Shards Redis lost are read from CHIME_DATABASE_URL. On SIGTERM it stops leasing and
/// releases its leases.
#[derive(Parser)]
#[command(name = "chime-scheduler", version = chime_runtime::build_info!().register())]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    Cli::parse()
        .common
        .run(chime_runtime::RuntimeThreads::One, serve)
}

async fn serve(config: chime_runtime::Config) -> anyhow::Result<()> {
    // Without configured endpoints, the executors are those announced in the roster.
    let endpoints = Endpoints::configured(&config.scheduler.executor_endpoints)?;
    let follow_roster = endpoints.is_none();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let stores = chime_storage::Stores::for_service(
        &config.store_settings(),
        config.database_url()?,
        clock.clone(),
    )
    .await?;
    let (index, leases) = stores.hot_path()?;
    let membership = stores.membership()?;
    let db = stores.database.clone();
    let shutdown = chime_runtime::shutdown_token();
    let tls = chime_runtime::Tls::load(&config.tls)?;
    let endpoints = endpoints.unwrap_or(Endpoints::Static(Vec::new()));
    let executors = GrpcExecutors::with_tls(endpoints, tls.map(|t| t.grpc_client())).await;
    // A static list never changes; a DNS name is re-resolved, the roster read again.
    executors.keep_resolving(Duration::from_secs(5), shutdown.clone());
    if follow_roster {
        let every = config.roster().heartbeat;
        executors.follow_roster(membership.clone(), every, shutdown.clone());
    }
    let scheduler = Scheduler::new(
        db.timers.clone(),
        index,
        leases,
        db.occurrences.clone(),
        executors,
        clock,
        SchedulerSettings::from_config(&config),
    );
    scheduler.join(chime_runtime::Roster::new(
        membership,
        chime_scheduler::GROUP,
        scheduler.token().clone(),
        config.buckets,
        config.roster(),
        Arc::new(SystemClock),
    ));
    let view = scheduler.clone();
    let ownership = axum::Router::new().route(
        "/ownership",
        axum::routing::get(move || {
            let view = view.clone();
            async move { axum::Json(view.ownership_report()) }
        }),
    );
    let admin = chime_runtime::admin::bind_admin(Some(
        config
            .admin_addr
            .unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 9081))),
    ))
    .await
    .context("binding the admin address")?;
    chime_runtime::describe_metrics(chime_scheduler::METRICS);
    tracing::info!("starting");
    let (admin, ()) = tokio::join!(
        chime_runtime::admin::serve_admin_with(
            admin,
            Arc::new(chime_runtime::DatabaseReadiness(db.clone())),
            ownership,
            shutdown.clone(),
        ),
        scheduler.run(shutdown.clone(), config.shutdown_grace.get()),
    );
    stores.close().await;
    chime_runtime::flush_traces();
    admin?;
    Ok(())
}
