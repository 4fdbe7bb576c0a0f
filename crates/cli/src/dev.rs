//! `chime dev`: the gateway, migrator, scheduler and executor in one process, on SQLite (or
//! any configured database) with the in-memory hot index and leases. The scheduler hands
//! task keys to the executor through the same [`Handoff`] trait the gRPC client implements.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use chime_api_gateway::{AuthSettings, Gateway, TimerService};
use chime_domain::TargetKind;
use chime_domain::{Clock, SystemClock, TaskKey, Timestamp};
use chime_executor::notify::Notifier;
use chime_executor::workers::stream::WorkerGrpc;
use chime_executor::{
    AmqpTarget, CallbackSettings, Executor, ExecutorSettings, HttpTarget, NatsTarget, Signer,
    Targets, WorkerTarget, Workers,
};
use chime_migrator::{Janitor, Materializer, Migrator, MigratorSettings, RetentionSettings};
use chime_proto::v1::worker_service_server::WorkerServiceServer;
use chime_runtime::Config;
use chime_scheduler::{Handoff, Scheduler, SchedulerSettings};
use chime_storage::{Database, HotIndex, HotPath, Leases, Stores};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// SQLite file keeping timers and their history across restarts.
    #[arg(long, value_name = "PATH", default_value = "chime-dev.db")]
    pub db: PathBuf,
    /// Keep everything in memory: nothing survives a restart.
    #[arg(long, conflicts_with = "db")]
    pub memory: bool,
}

impl DevArgs {
    /// `--memory`, else CHIME_DATABASE_URL when set, else `--db`.
    fn database_url(&self, config: &Config) -> String {
        if self.memory {
            "sqlite::memory:".into()
        } else if let Some(url) = &config.database.url {
            url.clone()
        } else {
            format!("sqlite://{}", self.db.display())
        }
    }
}

/// The executor, in-process.
struct LocalExecutor(Arc<Executor>);

#[async_trait]
impl Handoff for LocalExecutor {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        self.0.offer(keys).map(|o| o.accepted).unwrap_or(0)
    }

    async fn hand_off_ordered(&self, keys: &[TaskKey], on_time: usize) -> usize {
        self.0
            .offer_ordered(keys, on_time)
            .map(|o| o.accepted)
            .unwrap_or(0)
    }
}

/// `/v1/echo`: a callback target for trying Chime out. Logs what arrived and how late.
async fn echo(headers: HeaderMap) -> (StatusCode, &'static str) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    let scheduled = header("x-chime-scheduled-at");
    let lateness_ms = Timestamp::parse_rfc3339(&scheduled)
        .map(|t| SystemClock.now().as_millis() - t.as_millis())
        .ok();
    tracing::info!(
        timer = %header("x-chime-timer-id"),
        scheduled_at = %scheduled,
        attempt = %header("x-chime-attempt"),
        lateness_ms,
        "echo: callback received"
    );
    (StatusCode::OK, "ok")
}

pub async fn run(config: Config, args: DevArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let url = args.database_url(&config);
    let stores = Stores::open(
        &config.store_settings(),
        &url,
        clock.clone(),
        HotPath::InMemory,
        true,
    )
    .await?;
    let (index, leases) = stores.hot_path()?;
    let db = stores.database.clone();

    let (migrator, janitor) = migrator_and_janitor(&config, &db, &index, &leases, &clock);
    // Registered workers connect to the gRPC port (`chime worker`, default --server).
    let workers = Workers::new();
    let (targets, http) = targets(&config, &db, &clock, &workers)?;
    let executor = Executor::start_with(
        db.timers.clone(),
        db.occurrences.clone(),
        Some(index.clone()),
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
    let scheduler = Scheduler::new(
        db.timers.clone(),
        index.clone(),
        leases,
        db.occurrences.clone(),
        Arc::new(LocalExecutor(executor.clone())),
        clock.clone(),
        SchedulerSettings::from_config(&config),
    );
    let api = timer_api(&config, &db, index, &clock)?;
    let (gateway, stop_workers) = gateway(&config, api, &db, clock, workers)?;
    let http = chime_runtime::bind(config.gateway.http_addr, "REST").await?;
    let grpc = chime_runtime::bind(config.gateway.grpc_addr, "gRPC").await?;
    let admin = chime_runtime::admin::bind_admin(config.admin_addr).await?;

    let shutdown = chime_runtime::shutdown_token();
    // One process, every service's metrics (the gateway describes its own when it serves).
    for metrics in [
        chime_executor::METRICS,
        chime_scheduler::METRICS,
        chime_migrator::METRICS,
    ] {
        chime_runtime::describe_metrics(metrics);
    }
    let servers_stop = CancellationToken::new();
    let grace = config.shutdown_grace.get();
    let extra = Router::new().route("/v1/echo", any(echo));
    let gateway = gateway.serve_with(http, grpc, admin, extra, servers_stop.clone());
    tracing::info!(
        database = %mask(&url),
        rest = %config.gateway.http_addr,
        grpc = %config.gateway.grpc_addr,
        echo = %format!("http://127.0.0.1:{}/v1/echo", config.gateway.http_addr.port()),
        startup_ms = started.elapsed().as_millis() as u64,
        "chime dev ready"
    );
    // Stop taking work (scheduler, migrator), drain the executor, then stop the servers
    // (last, since callbacks to the echo endpoint need them).
    let work = async {
        tokio::join!(
            scheduler.run(shutdown.clone(), grace),
            migrator.run(shutdown.clone()),
            janitor.run(shutdown.clone())
        );
        let left = executor.drain(grace).await;
        if left > 0 {
            tracing::warn!(left, "grace period over with callbacks unfinished");
        }
        // Worker streams stay open until ended: the gRPC server waits for them.
        stop_workers.cancel();
        servers_stop.cancel();
    };
    let (served, ()) = tokio::join!(gateway, work);
    db.close().await;
    tracing::info!("chime dev stopped");
    served.map_err(|e| e.context("serving the API"))?;
    Ok(())
}

/// The timer API on the one process's stores; loopback callbacks allowed.
fn timer_api(
    config: &Config,
    db: &Database,
    index: Arc<dyn HotIndex>,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<Arc<TimerService>> {
    Ok(Arc::new(
        TimerService::new(
            db.timers.clone(),
            db.occurrences.clone(),
            Some(index),
            config.horizon(),
            clock.clone(),
        )
        .with_networks(config.network_policy()?.with_loopback())
        .with_brokers(config.brokers()?)
        .with_calendars(db.calendars.clone())
        .with_activity(db.activity.clone())
        .with_notifications(db.notifications.clone())
        .with_chains(db.chains.clone())
        .with_shards(db.shards.clone())
        .with_unwritten_runs(config.migrator.unwritten_runs),
    ))
}

/// The gateway, serving the executor's `WorkerService` on its gRPC port beside the timer
/// API; with the token that ends the workers' streams.
fn gateway(
    config: &Config,
    api: Arc<TimerService>,
    db: &Database,
    clock: Arc<dyn Clock>,
    workers: Arc<Workers>,
) -> anyhow::Result<(Gateway, CancellationToken)> {
    let gateway = Gateway::new(
        api,
        db.credentials.clone(),
        clock,
        &AuthSettings {
            bootstrap_token: config.bootstrap_token()?.map(str::to_owned),
            cache_ttl: config.auth.cache_ttl.get(),
            signing_grace: config.auth.signing_grace.get(),
        },
    );
    let worker_service = WorkerGrpc::new(workers, gateway.auth.clone());
    let stop_workers = worker_service.stop_token();
    let worker_service = Arc::new(worker_service);
    let gateway = gateway.with_grpc_routes(Arc::new(move |routes| {
        routes.add_service(WorkerServiceServer::from_arc(worker_service.clone()))
    }));
    Ok((gateway, stop_workers))
}

/// The migrator and the retention janitor, on the one process's stores.
fn migrator_and_janitor(
    config: &Config,
    db: &Database,
    index: &Arc<dyn HotIndex>,
    leases: &Arc<dyn Leases>,
    clock: &Arc<dyn Clock>,
) -> (Arc<Migrator>, Janitor) {
    let settings = MigratorSettings::from_config(config);
    let migrator = Arc::new(Migrator::new(
        Materializer::new(
            db.timers.clone(),
            db.occurrences.clone(),
            index.clone(),
            clock.clone(),
            settings.horizon,
        ),
        leases.clone(),
        settings,
    ));
    let janitor = Janitor::new(
        db.retention.clone(),
        leases.clone(),
        clock.clone(),
        RetentionSettings::from_config(config),
    );
    (migrator, janitor)
}

/// Every delivery target, each signing with the apps' secrets. Loopback is open in
/// `chime dev`, so its echo endpoint can be called back.
fn targets(
    config: &Config,
    db: &Database,
    clock: &Arc<dyn Clock>,
    workers: &Arc<Workers>,
) -> anyhow::Result<(Targets, HttpTarget)> {
    let signer = Arc::new(Signer::new(
        db.credentials.clone(),
        clock.clone(),
        config.auth.cache_ttl.get(),
    ));
    let brokers = Arc::new(config.brokers()?);
    let http = HttpTarget::new(CallbackSettings {
        networks: config.network_policy()?.with_loopback(),
        ..CallbackSettings::from_config(config)
    })?
    .with_signer(signer.clone());
    let targets = Targets::new(http.clone())
        .with(
            TargetKind::Worker,
            Arc::new(
                WorkerTarget::new(workers.clone())
                    .with_signer(signer.clone())
                    .with_shards(db.shards.clone()),
            ),
        )
        .with(
            TargetKind::Nats,
            Arc::new(NatsTarget::new(brokers.clone()).with_signer(signer.clone())),
        )
        .with(
            TargetKind::Amqp,
            Arc::new(AmqpTarget::new(brokers).with_signer(signer)),
        );
    Ok((targets, http))
}

fn mask(url: &str) -> String {
    match url.split_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => url.to_owned(),
    }
}
