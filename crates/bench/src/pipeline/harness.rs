//! What every scenario shares: a deployment of its own, creating timers, collecting and
//! reporting what the sink received.

use super::*;

/// The database of a deployment.
pub(super) enum BenchDb {
    Postgres(testkit::PgFixture),
    MySql(testkit::MySqlFixture),
}

impl BenchDb {
    fn url(&self) -> String {
        match self {
            Self::Postgres(f) => f.url(),
            Self::MySql(f) => f.url(),
        }
    }

    /// The PostgreSQL store, for scenarios that write to it directly.
    pub(super) fn pg(&self) -> anyhow::Result<&testkit::PgFixture> {
        match self {
            Self::Postgres(f) => Ok(f),
            Self::MySql(_) => anyhow::bail!("this scenario needs PostgreSQL"),
        }
    }
}

/// A deployment for one scenario, removed when dropped.
pub(super) struct Deployment {
    pub(super) cluster: Cluster,
    pub(super) sink: Arc<Sink>,
    pub(super) _db: BenchDb,
    pub(super) _redis: Option<testkit::RedisFixture>,
}

impl Deployment {
    pub(super) async fn start(
        args: &Args,
        name: &'static str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let db = match args.setup {
            Setup::MariadbRedis => BenchDb::MySql(testkit::mysql().await),
            // Migrated by the deployment's own `chime-migrator migrate`, as the migrate Job
            // does: a build compared with this one (`make bench-compare`) gets its own schema.
            _ => BenchDb::Postgres(testkit::pg_unmigrated().await),
        };
        let redis = match args.setup {
            Setup::Postgres => None,
            _ => Some(testkit::redis().await),
        };
        let sink = Arc::new(Sink::start_lean().await?);
        let mut all: Vec<(&'static str, String)> = vec![
            ("CHIME_LOG", "warn".into()),
            ("CHIME_BUCKETS", args.buckets.to_string()),
            // Throughput is measured here, not the per-app quotas: every timer is in one app.
            ("CHIME_QUOTAS__MAX_TIMERS_PER_APP", u64::MAX.to_string()),
            ("CHIME_QUOTAS__CREATES_PER_SECOND", u32::MAX.to_string()),
            ("CHIME_QUOTAS__CREATE_BURST", u32::MAX.to_string()),
        ];
        all.extend(env.iter().map(|(k, v)| (leak(k), (*v).to_owned())));
        all.extend(args.env.iter().map(|(k, v)| (leak(k), v.clone())));
        let cluster = Cluster::start(Spec {
            test: name,
            database_url: db.url(),
            redis_url: redis
                .as_ref()
                .map(|_| testkit::redis_url())
                .unwrap_or_default(),
            redis_prefix: redis
                .as_ref()
                .map(|r| r.backend.prefix().to_owned())
                .unwrap_or_default(),
            schedulers: args.schedulers,
            executors: args.executors,
            env: all,
        })
        .await;
        Ok(Self {
            cluster,
            sink,
            _db: db,
            _redis: redis,
        })
    }

    pub(super) fn processes(&self) -> Vec<(String, u32)> {
        let c = &self.cluster;
        [&c.gateway, &c.migrator]
            .into_iter()
            .chain(&c.schedulers)
            .chain(&c.executors)
            .map(|n| (n.service.name.clone(), n.service.pid()))
            .collect()
    }

    pub(super) async fn grpc(&self) -> anyhow::Result<chime_proto::AuthedTimerClient> {
        let channel = tonic::transport::Endpoint::from_shared(self.cluster.grpc.clone())?
            .connect()
            .await?;
        Ok(TimerServiceClient::with_interceptor(
            channel,
            chime_test_support::deploy::bearer(),
        ))
    }

    /// Where keys waited or went back on their way to a callback, summed over the replicas:
    /// what executors refused or held back, and what schedulers offered again.
    pub(super) async fn hand_off_counts(&self) -> Vec<(&'static str, f64)> {
        let c = &self.cluster;
        let mut counts = Vec::new();
        for (nodes, names) in [
            (
                &c.executors,
                &[
                    "chime_executor_rejected_full_total",
                    "chime_executor_host_waits_total",
                    "chime_executor_deferred_total",
                ][..],
            ),
            (
                &c.schedulers,
                &[
                    "chime_scheduler_handoff_refused_total",
                    "chime_scheduler_handoff_deferred_total",
                ][..],
            ),
        ] {
            // One scrape per replica, every counter read from it.
            let mut scraped = Vec::new();
            for n in nodes {
                scraped.push(n.metrics().await);
            }
            for name in names {
                let sum = scraped.iter().map(|t| materialize::counter(t, name)).sum();
                counts.push((name.trim_start_matches("chime_"), sum));
            }
        }
        counts
    }

    /// [`Self::hand_off_counts`] as one line of a report.
    pub(super) fn hand_off_line(counts: &[(&'static str, f64)]) -> String {
        counts
            .iter()
            .map(|(name, n)| format!("{name} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) async fn stop(mut self) {
        self.cluster.stop().await;
    }
}

/// Setting names come from flags once per run; `Spec` wants them `'static`.
pub(super) fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The misfire policy of recurring timers whose every fire time the receiver counts.
/// Under the default a run held past its next one is skipped by design, which the receiver
/// cannot tell from a lost one: the smoke run (debug builds on a loaded CI machine) judges
/// loss, not speed, so there they fire late instead. The full run keeps the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    Default,
    FireAll,
}

impl Counted {
    pub(super) fn of(args: &Args) -> Self {
        if args.smoke {
            Self::FireAll
        } else {
            Self::Default
        }
    }

    /// As the REST body's `misfire`, when not the default.
    pub(super) fn rest(self) -> Option<&'static str> {
        (self == Self::FireAll).then_some("fire_all")
    }

    pub(super) fn pb(self) -> i32 {
        match self {
            Self::Default => pb::MisfirePolicy::Unspecified as i32,
            Self::FireAll => pb::MisfirePolicy::FireAll as i32,
        }
    }
}

pub(super) fn spec(name: String, url: &str, schedule: pb::schedule::Kind) -> pb::TimerSpec {
    let callback = pb::Callback {
        url: url.to_owned(),
        ..Default::default()
    };
    spec_to(name, callback, schedule)
}

/// A timer of the `bench` app delivering to `callback`.
pub(super) fn spec_to(
    name: String,
    callback: pb::Callback,
    schedule: pb::schedule::Kind,
) -> pb::TimerSpec {
    pb::TimerSpec {
        app: "bench".into(),
        name,
        schedule: Some(pb::Schedule {
            kind: Some(schedule),
            anchor: None,
        }),
        callback: Some(callback),
        ..Default::default()
    }
}

/// Creates `specs` over gRPC in batches of 100, 8 batches at a time.
pub(super) async fn create_all(
    d: &Deployment,
    specs: Vec<pb::TimerSpec>,
) -> anyhow::Result<Duration> {
    create_streamed(d, specs.len(), |i| specs[i].clone(), |_| {}).await
}

/// Creates `count` timers, the `i`-th made by `make(i)`, over gRPC in batches of 100, 8
/// batches at a time; each batch is made only when it is sent (ten million specs at once
/// would take gigabytes). `progress` hears the count created after each batch.
pub(super) async fn create_streamed(
    d: &Deployment,
    count: usize,
    make: impl Fn(usize) -> pb::TimerSpec,
    mut progress: impl FnMut(usize),
) -> anyhow::Result<Duration> {
    const BATCH: usize = 100;
    let client = d.grpc().await?;
    let started = Instant::now();
    let make = &make;
    let mut sent = futures::stream::iter((0..count).step_by(BATCH))
        .map(|from| {
            let mut client = client.clone();
            let requests: Vec<pb::CreateTimerRequest> = (from..(from + BATCH).min(count))
                .map(|i| pb::CreateTimerRequest {
                    timer: Some(make(i)),
                    ..Default::default()
                })
                .collect();
            let n = requests.len();
            async move {
                client
                    .batch_create_timers(pb::BatchCreateTimersRequest { requests })
                    .await
                    .context("BatchCreateTimers")?;
                anyhow::Ok(n)
            }
        })
        .buffer_unordered(8);
    let mut created = 0;
    while let Some(n) = sent.try_next().await? {
        created += n;
        progress(created);
    }
    Ok(started.elapsed())
}

/// Waits until the sink holds `expected` callbacks or `deadline` passes, then `quiet` more
/// for late duplicates. The deadline bounds a run that lost something.
pub(super) async fn collect(
    d: &Deployment,
    expected: usize,
    deadline: Instant,
    quiet: Duration,
) -> Vec<Delivery> {
    while d.sink.count() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(quiet).await;
    deliveries(&d.sink.received())
}

pub(super) fn dump(args: &Args, scenario: &str, ds: &[Delivery]) -> anyhow::Result<()> {
    if !args.dump {
        return Ok(());
    }
    let path = args
        .out
        .with_file_name(format!("{scenario}-deliveries.csv"));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut csv = String::from("key,scheduled_ms,sent_ms,arrived_ms\n");
    for d in ds {
        let sent = d.sent_ms.map(|s| s.to_string()).unwrap_or_default();
        csv.push_str(&format!(
            "{},{},{sent},{}\n",
            d.key, d.scheduled_ms, d.at_ms
        ));
    }
    std::fs::write(&path, csv)?;
    eprintln!("  callbacks written to {}", path.display());
    Ok(())
}

/// Waits until the wall clock reaches `at_ms`.
pub(super) async fn until(at_ms: i64) {
    let left = at_ms - now_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

pub(super) fn lateness_row(o: &mut Outcome, label: &str, l: &Lateness, target: &str) {
    o.row(
        label,
        format!(
            "p50 {} / p90 {} / p99 {} / max {} ms",
            l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms
        ),
        target,
    );
}

/// What every firing scenario reports first: the timers created, and whether each of the
/// `expected` keys arrived once (what is lost fails the run; duplicates miss the target).
/// Returns (delivered, duplicates).
pub(super) fn report_delivery(
    o: &mut Outcome,
    timers: usize,
    created: Duration,
    expected: usize,
    ds: &[Delivery],
) -> (usize, usize) {
    let (delivered, duplicates) = distinct_and_duplicates(ds);
    if delivered < expected {
        o.failed.push(format!(
            "{} of {expected} not delivered",
            expected - delivered
        ));
    }
    o.target(
        duplicates == 0,
        format!("{duplicates} duplicates (target 0)"),
    );
    o.row(
        "timers created",
        format!("{timers} in {:.1} s", created.as_secs_f64()),
        "",
    );
    o.row("delivered", format!("{delivered} of {expected}"), "all");
    o.row("duplicates", duplicates.to_string(), "0");
    (delivered, duplicates)
}
