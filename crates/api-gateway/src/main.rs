//! `chime-gateway`: the timer API (REST and gRPC) over the configured database.

// mimalloc, not glibc malloc: the many small allocations per callback cost less CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use anyhow::Context;
use chime_api_gateway::{AuthSettings, Gateway, TimerApi, TimerService};
use chime_domain::{Clock, SystemClock};
use chime_runtime::CommonArgs;
use clap::Parser;

/// Chime API gateway: serves the timer API over REST (CHIME_HTTP_ADDR, default :8080) and
/// gRPC (CHIME_GRPC_ADDR, default :50051) against CHIME_DATABASE_URL. Run
/// `chime-migrator migrate` first: the gateway refuses a database whose schema is behind.
#[derive(Parser)]
#[command(name = "chime-gateway", version = chime_runtime::build_info!().register())]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    Cli::parse()
        .common
        .run(chime_runtime::RuntimeThreads::PerCpu, serve)
}

async fn serve(config: chime_runtime::Config) -> anyhow::Result<()> {
    // Refuse to serve an open API by accident: auth is required unless switched off.
    let bootstrap_token = config.bootstrap_token()?.map(str::to_owned);
    if bootstrap_token.is_none() {
        tracing::warn!("CHIME_AUTH=off: every caller may read and change every app's timers");
    }
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
            clock.clone(),
        )
        .with_networks(config.network_policy()?)
        .with_brokers(config.brokers()?)
        .with_quotas(quotas(&config))
        .with_calendars(stores.database.calendars.clone())
        .with_activity(stores.database.activity.clone())
        .with_notifications(stores.database.notifications.clone())
        .with_chains(stores.database.chains.clone())
        .with_shards(stores.database.shards.clone())
        .with_unwritten_runs(config.migrator.unwritten_runs),
    );
    let gateway = Gateway::new(
        api,
        stores.database.credentials.clone(),
        clock,
        &AuthSettings {
            bootstrap_token,
            cache_ttl: config.auth.cache_ttl.get(),
            signing_grace: config.auth.signing_grace.get(),
        },
    )
    .with_tls(chime_runtime::Tls::load(&config.tls)?);
    let http = chime_runtime::bind(config.gateway.http_addr, "REST").await?;
    let grpc = chime_runtime::bind(config.gateway.grpc_addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(config.admin_addr)
        .await
        .context("binding the admin address")?;
    tracing::info!(rest = %config.gateway.http_addr, grpc = %config.gateway.grpc_addr, "starting");
    let served = gateway
        .serve(http, grpc, admin, chime_runtime::shutdown_token())
        .await;
    stores.close().await;
    chime_runtime::flush_traces();
    served
}

/// `[quotas]` as the service takes them.
fn quotas(config: &chime_runtime::Config) -> chime_api_gateway::QuotaSettings {
    let (max_timers, creates_per_second, create_burst) = config.quota_limits();
    chime_api_gateway::QuotaSettings {
        max_timers,
        creates_per_second,
        create_burst,
    }
}
