//! `chime-executor`: fires the occurrences schedulers hand it.

// mimalloc, not glibc malloc: the many small allocations per callback cost less CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use anyhow::Context;
use chime_domain::{Clock, SystemClock, TargetKind};
use chime_executor::notify::Notifier;
use chime_executor::workers::peers::Peers;
use chime_executor::workers::stream::WorkerGrpc;
use chime_executor::{
    AmqpTarget, CallbackSettings, Executor, ExecutorSettings, HttpTarget, NatsTarget, Signer,
    Targets, WorkerTarget, Workers,
};
use chime_runtime::auth::Authenticator;
use chime_runtime::fleet::{EXECUTORS_GROUP, Endpoints, Fleet, advertised_url};
use chime_runtime::{AuthMode, CommonArgs};
use clap::Parser;
use std::time::Duration;

/// The longest a forwarded worker delivery may take: the longest callback timeout, and some.
const MAX_FORWARD_WAIT: Duration = Duration::from_secs(310);

/// Chime executor: accepts due occurrences over gRPC (CHIME_EXECUTOR_ADDR, default :50061),
/// claims each in CHIME_DATABASE_URL, performs its HTTP callback and records the outcome. At
/// most CHIME_EXECUTOR__MAX_IN_FLIGHT (default 2048) at once; beyond that it answers "full"
/// and schedulers try another replica. On SIGTERM it stops taking work and finishes what it
/// accepted within CHIME_SHUTDOWN_GRACE.
#[derive(Parser)]
#[command(name = "chime-executor", version = chime_runtime::build_info!().register())]
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
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let stores = chime_storage::Stores::for_service(
        &config.store_settings(),
        config.database_url()?,
        clock.clone(),
    )
    .await?;
    let db = stores.database.clone();
    // Every callback is signed with its app's secret (Standard Webhooks).
    let signer = Arc::new(Signer::new(
        db.credentials.clone(),
        clock.clone(),
        config.auth.cache_ttl.get(),
    ));
    // Registered workers connect here (WorkerService) with their app's token; a group with
    // no worker here is asked of the other executors: CHIME_EXECUTOR_ENDPOINTS if set, else
    // those in the `executors` roster (beside the hot index), where this one announces itself.
    let workers = Workers::new();
    // NATS and AMQP publishes go only to the brokers listed in CHIME_BROKERS.
    let brokers = Arc::new(config.brokers()?);
    let tls = chime_runtime::Tls::load(&config.tls)?;
    let mut worker_target = WorkerTarget::new(workers.clone())
        .with_signer(signer.clone())
        .with_shards(db.shards.clone());
    let shutdown = chime_runtime::shutdown_token();
    // Peers: the configured endpoints, else the roster; neither without a hot path.
    let configured = Endpoints::configured(&config.scheduler.executor_endpoints)?;
    let roster = stores.membership.clone().filter(|_| configured.is_none());
    if configured.is_some() || roster.is_some() {
        let endpoints = configured.unwrap_or(Endpoints::Static(Vec::new()));
        let grpc_tls = tls.as_ref().map(|t| t.grpc_client());
        let fleet = Fleet::new(endpoints, grpc_tls, MAX_FORWARD_WAIT).await;
        match roster {
            Some(membership) => {
                let me = advertised_url(
                    config.executor.advertise_url.as_deref(),
                    config.executor.addr,
                    tls.is_some(),
                );
                let roster = config.roster();
                fleet.join_roster(membership, EXECUTORS_GROUP, me, roster, shutdown.clone());
            }
            None => fleet.keep_resolving(Duration::from_secs(5), shutdown.clone()),
        }
        worker_target = worker_target.with_peers(Peers::new(fleet));
    }
    let http = HttpTarget::new(CallbackSettings::from_config(&config))?.with_signer(signer.clone());
    let targets = Targets::new(http.clone())
        .with(TargetKind::Worker, Arc::new(worker_target))
        .with(
            TargetKind::Nats,
            Arc::new(NatsTarget::new(brokers.clone()).with_signer(signer.clone())),
        )
        .with(
            TargetKind::Amqp,
            Arc::new(AmqpTarget::new(brokers).with_signer(signer.clone())),
        );
    let auth = (config.auth.mode == AuthMode::Required).then(|| {
        // Without the bootstrap token here, only app tokens are accepted.
        let bootstrap = config.auth.bootstrap_token.clone().unwrap_or_else(|| {
            let random: [u8; 32] = rand::random();
            random.iter().map(|b| format!("{b:02x}")).collect()
        });
        Arc::new(Authenticator::new(
            &bootstrap,
            db.credentials.clone(),
            clock.clone(),
            config.auth.cache_ttl.get(),
        ))
    });
    // Retries are scheduled in the hot index; without Redis the sweeper finds them when due.
    if stores.hot_index.is_none() {
        tracing::warn!("no CHIME_REDIS_URL: retries wait for the scheduler's sweeper");
    }
    let index = stores.hot_index.clone();
    let executor = Executor::start_with(
        db.timers.clone(),
        db.occurrences.clone(),
        index,
        Some(db.activity.clone()),
        clock.clone(),
        targets,
        ExecutorSettings::from_config(&config),
    );
    executor.chain_with(db.chains.clone());
    executor.notify_with(Notifier::start(
        db.notifications.clone(),
        http,
        clock.clone(),
    ));
    let grpc = chime_runtime::bind(config.executor.addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(Some(
        config
            .admin_addr
            .unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 9061))),
    ))
    .await
    .context("binding the admin address")?;
    tracing::info!(grpc = %config.executor.addr, max_in_flight = config.executor.max_in_flight, "starting");
    let served = chime_executor::grpc::serve_with_workers(
        executor,
        Some(WorkerGrpc::new(workers, auth).with_signer(signer)),
        grpc,
        admin,
        Arc::new(chime_runtime::DatabaseReadiness(db.clone())),
        shutdown,
        config.shutdown_grace.get(),
        tls,
    )
    .await;
    stores.close().await;
    chime_runtime::flush_traces();
    served
}
