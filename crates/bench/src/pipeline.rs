//! `chime-bench pipeline`: the firing pipeline against a distributed deployment on this
//! machine. Each scenario gets its own PostgreSQL schema, Redis prefix and processes
//! (gateway, migrator, schedulers, executors), so one scenario's timers and CPU time never
//! show up in another's; callbacks go to a sink inside this process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use chime_domain::{
    AppName, BucketCount, CallbackInput, Clock, Horizon, NewTimer, ScheduleInput, SystemClock,
    TimerName, TimerSpec, Timestamp,
};
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_client::TimerServiceClient;
use chime_storage::postgres::PgStore;
use chime_storage::{CreateTimer, TimerStore, testkit};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use serde_json::{Value, json};

use chime_bench::deploy::cluster::{Cluster, Spec};
use chime_bench::deploy::{Service, free_port, log_dir};
use chime_bench::measure::{
    CpuSample, Delivery, Lateness, deliveries, distinct_and_duplicates, git_commit, windows,
};
use chime_bench::sink::Sink;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Burst,
    Steady,
    Sparse,
    Materialize,
    Api,
    Purge,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenarios to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "burst,steady,sparse,materialize,api,purge"
    )]
    pub scenarios: Vec<Scenario>,
    /// burst: one-shot timers due at the same instant.
    #[arg(long, default_value_t = 20_000)]
    pub burst: usize,
    /// steady: firings per second (timers firing every second, phases spread evenly).
    #[arg(long, default_value_t = 5_000)]
    pub rate: usize,
    /// steady: seconds of firing.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// sparse: firings per second.
    #[arg(long, default_value_t = 200)]
    pub sparse_rate: usize,
    /// sparse: seconds of firing.
    #[arg(long, default_value_t = 20)]
    pub sparse_duration: u64,
    /// materialize: occurrences one migrator step writes (100 per timer).
    #[arg(long, default_value_t = 1_000_000)]
    pub materialize: usize,
    /// api: timers created per measurement (REST and gRPC, single and batch).
    #[arg(long, default_value_t = 20_000)]
    pub api_requests: usize,
    /// purge: finished occurrences, eight days old, the janitor removes during the run.
    #[arg(long, default_value_t = 2_000_000)]
    pub purge_rows: usize,
    /// purge: firings per second (every-second timers) during the run, and its seconds.
    #[arg(long, default_value_t = 2_000)]
    pub purge_rate: usize,
    #[arg(long, default_value_t = 40)]
    pub purge_duration: u64,
    /// api: concurrent clients, one measurement per level (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 8, 32])]
    pub api_concurrency: Vec<usize>,
    #[arg(long, default_value_t = 2)]
    pub schedulers: usize,
    #[arg(long, default_value_t = 2)]
    pub executors: usize,
    /// `CHIME_BUCKETS` of every service.
    #[arg(long, default_value_t = 16)]
    pub buckets: u32,
    /// More settings for every service, as `CHIME_…=value`.
    #[arg(long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Check only that every scenario completes and delivers everything, not the targets
    /// (CI, with small sizes).
    #[arg(long)]
    pub smoke: bool,
    #[arg(long, default_value = "target/bench/pipeline.json")]
    pub out: PathBuf,
    /// Also write every callback received (key, scheduled ms, arrival ms) as CSV beside
    /// the report, one file per scenario, for a closer look at the late ones.
    #[arg(long)]
    pub dump: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if !k.starts_with("CHIME_") {
        return Err(format!("{k} is not a CHIME_ setting"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// A scenario's outcome: its figures, and the targets it missed (empty when met).
#[derive(Debug, Serialize)]
struct Outcome {
    scenario: &'static str,
    figures: Value,
    /// Rows for the printed table: (measure, value, target).
    #[serde(skip)]
    rows: Vec<(String, String, String)>,
    missed: Vec<String>,
    /// What keeps the scenario from counting even as a smoke run: lost callbacks, errors.
    failed: Vec<String>,
}

impl Outcome {
    fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            figures: Value::Null,
            rows: Vec::new(),
            missed: Vec::new(),
            failed: Vec::new(),
        }
    }

    fn row(&mut self, measure: &str, value: String, target: &str) {
        self.rows
            .push((measure.to_owned(), value, target.to_owned()));
    }

    /// Records `what` as missed unless `met`.
    fn target(&mut self, met: bool, what: String) {
        if !met {
            self.missed.push(what);
        }
    }
}

fn now_ms() -> i64 {
    SystemClock.now().as_millis()
}

fn pb_time(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A deployment for one scenario, removed when dropped.
struct Deployment {
    cluster: Cluster,
    sink: Sink,
    _db: testkit::PgFixture,
    _redis: testkit::RedisFixture,
}

impl Deployment {
    async fn start(args: &Args, name: &'static str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let db = testkit::pg().await;
        let redis = testkit::redis().await;
        let sink = Sink::start_lean().await?;
        let mut all: Vec<(&'static str, String)> = vec![
            ("CHIME_LOG", "warn".into()),
            ("CHIME_BUCKETS", args.buckets.to_string()),
        ];
        all.extend(env.iter().map(|(k, v)| (leak(k), (*v).to_owned())));
        all.extend(args.env.iter().map(|(k, v)| (leak(k), v.clone())));
        let cluster = Cluster::start(Spec {
            test: name,
            database_url: db.url(),
            redis_url: testkit::redis_url(),
            redis_prefix: redis.backend.prefix().to_owned(),
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

    fn processes(&self) -> Vec<(String, u32)> {
        let c = &self.cluster;
        [&c.gateway, &c.migrator]
            .into_iter()
            .chain(&c.schedulers)
            .chain(&c.executors)
            .map(|n| (n.service.name.clone(), n.service.pid()))
            .collect()
    }

    async fn grpc(&self) -> anyhow::Result<TimerServiceClient<tonic::transport::Channel>> {
        Ok(TimerServiceClient::connect(self.cluster.grpc.clone()).await?)
    }

    async fn stop(mut self) {
        self.cluster.stop().await;
    }
}

/// Setting names come from flags once per run; `Spec` wants them `'static`.
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

fn spec(name: String, url: &str, schedule: pb::schedule::Kind) -> pb::TimerSpec {
    pb::TimerSpec {
        app: "bench".into(),
        name,
        schedule: Some(pb::Schedule {
            kind: Some(schedule),
            anchor: None,
        }),
        callback: Some(pb::Callback {
            url: url.to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates `specs` over gRPC in batches of 100, 8 batches at a time.
async fn create_all(d: &Deployment, specs: Vec<pb::TimerSpec>) -> anyhow::Result<Duration> {
    let client = d.grpc().await?;
    let started = Instant::now();
    let batches: Vec<Vec<pb::TimerSpec>> = specs.chunks(100).map(<[_]>::to_vec).collect();
    futures::stream::iter(batches)
        .map(|batch| {
            let mut client = client.clone();
            async move {
                let requests = batch
                    .into_iter()
                    .map(|timer| pb::CreateTimerRequest {
                        timer: Some(timer),
                        ..Default::default()
                    })
                    .collect();
                client
                    .batch_create_timers(pb::BatchCreateTimersRequest { requests })
                    .await
                    .context("BatchCreateTimers")
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(started.elapsed())
}

/// Waits until the sink holds `expected` callbacks or `deadline` passes, then `quiet` more
/// for late duplicates. The deadline bounds a run that lost something.
async fn collect(
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

fn dump(args: &Args, scenario: &str, ds: &[Delivery]) -> anyhow::Result<()> {
    if !args.dump {
        return Ok(());
    }
    let path = args
        .out
        .with_file_name(format!("{scenario}-deliveries.csv"));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut csv = String::from("key,scheduled_ms,arrived_ms\n");
    for d in ds {
        csv.push_str(&format!("{},{},{}\n", d.key, d.scheduled_ms, d.at_ms));
    }
    std::fs::write(&path, csv)?;
    eprintln!("  callbacks written to {}", path.display());
    Ok(())
}

/// Waits until the wall clock reaches `at_ms`.
async fn until(at_ms: i64) {
    let left = at_ms - now_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

fn lateness_row(o: &mut Outcome, label: &str, l: &Lateness, target: &str) {
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
fn report_delivery(
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

async fn burst(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("burst");
    let n = args.burst;
    let d = Deployment::start(args, "bench-burst", &[]).await?;
    let url = d.sink.url("/burst");
    // Time to create them all, with room: about 2,500 creates/s on this machine.
    let lead_ms = 3_000 + (n as i64) * 1_000 / 2_500;
    let due = now_ms() + lead_ms;
    let specs = (0..n)
        .map(|i| {
            spec(
                format!("burst-{i}"),
                &url,
                pb::schedule::Kind::At(pb_time(due)),
            )
        })
        .collect();
    let created = create_all(&d, specs).await?;
    ensure!(
        now_ms() < due - 500,
        "creating {n} timers took {created:?}, past the due instant: fewer timers or a faster machine"
    );
    until(due - 200).await;
    let cpu0 = CpuSample::take(&d.processes());
    let ds = collect(
        &d,
        n,
        Instant::now() + Duration::from_secs(60 + n as u64 / 1_000),
        Duration::from_secs(3),
    )
    .await;
    let cpu1 = CpuSample::take(&d.processes());
    d.stop().await;
    dump(args, "burst", &ds)?;

    let (delivered, duplicates) = report_delivery(&mut o, n, created, n, &ds);
    let lateness = Lateness::of(&ds);
    let last = ds.iter().map(|x| x.at_ms).max().unwrap_or(due);
    let drain = delivered as f64 / ((last - due).max(1) as f64 / 1000.0);
    o.target(
        drain >= 10_000.0,
        format!("drain {drain:.0}/s (target ≥ 10,000/s)"),
    );
    o.target(
        lateness.p99_ms <= 2_000,
        format!("p99 {} ms (target ≤ 2,000 ms)", lateness.p99_ms),
    );
    o.row("drain", format!("{drain:.0} firings/s"), "≥ 10,000/s");
    lateness_row(&mut o, "lateness", &lateness, "p99 ≤ 2,000 ms");
    o.figures = json!({
        "timers": n,
        "create_seconds": created.as_secs_f64(),
        "delivered": delivered,
        "duplicates": duplicates,
        "drain_per_second": drain,
        "lateness": lateness,
        "cpu_seconds_per_1000": cpu0.per_thousand(&cpu1, delivered),
    });
    Ok(o)
}

/// The same firing and creating load twice, on a database holding `purge_rows` finished
/// occurrences eight days old: once with retention keeping them (3650 days), once with the
/// janitor removing them (the default 7 days, run every second). Retention must leave the
/// firing and create tails as they were.
async fn purge(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("purge");
    let creates = (args.purge_rate / 4).max(100);
    let mut runs = Vec::new();
    for (label, env) in [
        ("kept", vec![("CHIME_RETENTION__HISTORY", "3650d")]),
        ("purged", vec![("CHIME_RETENTION__INTERVAL", "1s")]),
    ] {
        let run = periodic(
            args,
            "purge",
            args.purge_rate,
            args.purge_duration,
            Extra {
                env,
                seed_rows: args.purge_rows,
                creates,
            },
        )
        .await?;
        o.failed
            .extend(run.o.failed.iter().map(|f| format!("{label}: {f}")));
        runs.push((label, run));
    }
    let worst = |r: &Periodic| {
        windows(&r.ds, r.start, 10_000)
            .iter()
            .map(|(_, l)| l.p99_ms)
            .max()
            .unwrap_or(0)
    };
    let create_p99 = |r: &Periodic| {
        r.api
            .iter()
            .filter(|a| a.name.ends_with("single"))
            .map(|a| a.p99_ms)
            .fold(0.0, f64::max)
    };
    let mut figures = serde_json::Map::new();
    for (label, r) in &runs {
        let l = Lateness::of(&r.ds);
        lateness_row(&mut o, &format!("{label}: lateness, all"), &l, "");
        o.row(
            &format!("{label}: worst 10 s window p99"),
            format!("{} ms", worst(r)),
            "within 20 ms or 1.5× of kept",
        );
        o.row(
            &format!("{label}: single create p99"),
            format!("{:.1} ms", create_p99(r)),
            "within 20 ms or 1.5× of kept",
        );
        o.row(
            &format!("{label}: occurrences purged"),
            format!("{:.0}", r.purged),
            "",
        );
        figures.insert(
            (*label).to_owned(),
            json!({
                "lateness": l,
                "worst_window_p99_ms": worst(r),
                "single_create_p99_ms": create_p99(r),
                "purged": r.purged,
                "creates": r.api,
            }),
        );
    }
    let (kept, purged) = (&runs[0].1, &runs[1].1);
    o.target(
        purged.purged >= args.purge_rows as f64,
        format!(
            "the janitor removed {:.0} of {} old rows during the run",
            purged.purged, args.purge_rows
        ),
    );
    // "Unchanged" on a noisy two-core machine: within 20 ms or 1.5× of the run without it.
    let same = |with: f64, without: f64| with <= (without * 1.5).max(without + 20.0);
    o.target(
        same(worst(purged) as f64, worst(kept) as f64),
        format!(
            "worst firing window p99 {} ms while purging, {} ms without",
            worst(purged),
            worst(kept)
        ),
    );
    o.target(
        same(create_p99(purged), create_p99(kept)),
        format!(
            "single create p99 {:.1} ms while purging, {:.1} ms without",
            create_p99(purged),
            create_p99(kept)
        ),
    );
    o.figures = serde_json::Value::Object(figures);
    Ok(o)
}

/// `rate` timers firing every second for `seconds`, their phases spread evenly over the
/// second, starting `lead_ms` from now. Returns the specs, the first instant and the count
/// of firings expected.
fn every_second(rate: usize, seconds: u64, url: &str, lead_ms: i64) -> (Vec<pb::TimerSpec>, i64) {
    let start = now_ms() + lead_ms;
    let end = start + seconds as i64 * 1000 - 1;
    let specs = (0..rate)
        .map(|i| {
            let phase = (i as i64) * 1000 / rate as i64;
            pb::TimerSpec {
                start_at: Some(pb_time(start + phase)),
                end_at: Some(pb_time(end)),
                ..spec(
                    format!("every-{i}"),
                    url,
                    pb::schedule::Kind::Every("1s".into()),
                )
            }
        })
        .collect();
    (specs, start)
}

/// What a periodic run does besides firing.
#[derive(Default)]
struct Extra {
    /// Settings for every service.
    env: Vec<(&'static str, &'static str)>,
    /// Finished occurrences, eight days old, written straight to PostgreSQL before the
    /// timers are created.
    seed_rows: usize,
    /// Creates (each of REST and gRPC, single and batch, 8 clients) during the firing.
    creates: usize,
}

/// What a periodic run measured.
struct Periodic {
    o: Outcome,
    ds: Vec<Delivery>,
    start: i64,
    cpu: BTreeMap<String, f64>,
    /// The creates made during the firing.
    api: Vec<crate::api::ApiReport>,
    /// Occurrences the janitor removed during the run.
    purged: f64,
}

/// steady, sparse and purge: the same shape at different rates.
async fn periodic(
    args: &Args,
    name: &'static str,
    rate: usize,
    seconds: u64,
    extra: Extra,
) -> anyhow::Result<Periodic> {
    let mut o = Outcome::new(name);
    let d = Deployment::start(args, leak(&format!("bench-{name}")), &extra.env).await?;
    if extra.seed_rows > 0 {
        let t = Instant::now();
        seed_finished(d._db.store.pool(), extra.seed_rows).await?;
        eprintln!(
            "  {} finished occurrences written in {:.1} s",
            extra.seed_rows,
            t.elapsed().as_secs_f64()
        );
    }
    let url = d.sink.url(&format!("/{name}"));
    let lead_ms = 3_000 + (rate as i64) * 1_000 / 2_500;
    let (specs, start) = every_second(rate, seconds, &url, lead_ms);
    let created = create_all(&d, specs).await?;
    ensure!(
        now_ms() < start - 500,
        "creating {rate} timers took {created:?}, past the first firing"
    );
    let expected = rate * seconds as usize;
    until(start - 200).await;
    let cpu0 = CpuSample::take(&d.processes());
    let creating = (extra.creates > 0).then(|| {
        let (rest, grpc) = (d.cluster.rest.clone(), d.cluster.grpc.clone());
        tokio::spawn(
            async move { crate::api::measure(&rest, &grpc, "during", extra.creates, 8).await },
        )
    });
    let end = start + seconds as i64 * 1000;
    until(end).await;
    let cpu1 = CpuSample::take(&d.processes());
    let api = match creating {
        Some(task) => task.await??,
        None => Vec::new(),
    };
    let purged = d
        .cluster
        .migrator
        .counter("chime_migrator_purged_occurrences_total")
        .await;
    let ds = collect(
        &d,
        expected,
        Instant::now() + Duration::from_secs(30),
        Duration::from_secs(2),
    )
    .await;
    d.stop().await;
    dump(args, name, &ds)?;
    let (delivered, duplicates) = report_delivery(&mut o, rate, created, expected, &ds);
    let cpu = cpu0.per_thousand(&cpu1, delivered);
    o.figures = json!({
        "rate_per_second": rate,
        "seconds": seconds,
        "expected": expected,
        "delivered": delivered,
        "duplicates": duplicates,
        "create_seconds": created.as_secs_f64(),
        "cpu_seconds_per_1000": cpu,
    });
    Ok(Periodic {
        o,
        ds,
        start,
        cpu,
        api,
        purged,
    })
}

/// `rows` succeeded occurrences of made-up timers, due eight days ago and before: what a
/// week of history leaves for the janitor.
async fn seed_finished(pool: &sqlx::PgPool, rows: usize) -> anyhow::Result<()> {
    let base = now_ms() - 8 * 86_400_000;
    for chunk_start in (0..rows).step_by(500_000) {
        let n = (rows - chunk_start).min(500_000) as i64;
        sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, status, attempt, \
               fired_at, lateness_ms, http_status) \
             SELECT 1000000000 + g % 100000, $1 - g, 1, 0, 'succeeded', 1, $1 - g, 1, 200 \
             FROM generate_series($2::bigint, $3::bigint) g",
        )
        .bind(base)
        .bind(chunk_start as i64 + 1)
        .bind(chunk_start as i64 + n)
        .execute(pool)
        .await?;
    }
    // As a week of history would be by then: vacuumed, its BRIN ranges summarized, and the
    // checkpoint its writes caused behind it, so neither run pays for the seeding.
    sqlx::query("VACUUM ANALYZE occurrences")
        .execute(pool)
        .await?;
    sqlx::query("CHECKPOINT").execute(pool).await?;
    Ok(())
}

async fn steady(args: &Args) -> anyhow::Result<Outcome> {
    let Periodic {
        mut o,
        ds,
        start,
        cpu,
        ..
    } = periodic(args, "steady", args.rate, args.duration, Extra::default()).await?;
    let overall = Lateness::of(&ds);
    let per_window = windows(&ds, start, 10_000);
    for (from_s, l) in &per_window {
        lateness_row(
            &mut o,
            &format!("lateness {from_s}–{} s", from_s + 10),
            l,
            "p99 ≤ 50 ms",
        );
        o.target(
            l.p99_ms <= 50,
            format!(
                "window from {from_s} s: p99 {} ms (target ≤ 50 ms)",
                l.p99_ms
            ),
        );
    }
    // Drift: the typical callback of the last window against the first.
    let drift = match (per_window.first(), per_window.last()) {
        (Some((_, a)), Some((_, b))) => b.p50_ms - a.p50_ms,
        _ => 0,
    };
    o.target(
        drift <= 10,
        format!("p50 drifted {drift} ms from the first window to the last (target ≤ 10 ms)"),
    );
    lateness_row(&mut o, "lateness, all", &overall, "");
    o.row(
        "drift of p50, first → last window",
        format!("{drift} ms"),
        "≤ 10 ms",
    );
    for (process, secs) in &cpu {
        o.row(
            &format!("cpu {process}"),
            format!("{secs:.3} s / 1,000 firings"),
            "",
        );
    }
    o.figures["lateness"] = json!(overall);
    o.figures["drift_p50_ms"] = json!(drift);
    o.figures["windows"] = per_window
        .iter()
        .map(|(from_s, l)| json!({"from_second": from_s, "lateness": l}))
        .collect();
    Ok(o)
}

async fn sparse(args: &Args) -> anyhow::Result<Outcome> {
    let Periodic { mut o, ds, .. } = periodic(
        args,
        "sparse",
        args.sparse_rate,
        args.sparse_duration,
        Extra::default(),
    )
    .await?;
    let l = Lateness::of(&ds);
    o.target(
        l.p99_ms <= 10,
        format!("p99 {} ms (target ≤ 10 ms)", l.p99_ms),
    );
    lateness_row(&mut o, "lateness", &l, "p99 ≤ 10 ms");
    o.figures["lateness"] = json!(l);
    Ok(o)
}

/// Timers written straight to PostgreSQL (no gateway, so nothing is materialized early),
/// then one migrator process's first step, timed from its start to the step's end as its
/// metrics report it.
async fn materialize(args: &Args) -> anyhow::Result<Outcome> {
    const PER_TIMER: usize = 100;
    let mut o = Outcome::new("materialize");
    let timers = args.materialize.div_ceil(PER_TIMER);
    let total = timers * PER_TIMER;
    let db = testkit::pg().await;
    let redis = testkit::redis().await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let buckets = BucketCount::new(args.buckets).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = PgStore::from_pool(db.store.pool().clone(), clock, buckets);
    // Each timer fires every second for exactly PER_TIMER seconds, inside the step's window.
    let now = Timestamp::from_millis(now_ms());
    let start = now.add_millis(60_000);
    let end = start.add_millis(PER_TIMER as i64 * 1000 - 1);
    let made = Instant::now();
    for chunk in (0..timers).collect::<Vec<_>>().chunks(1_000) {
        let batch = chunk
            .iter()
            .map(|i| -> anyhow::Result<CreateTimer> {
                let schedule = ScheduleInput {
                    every: Some("1s".into()),
                    ..Default::default()
                }
                .resolve(now, Some(start), Some(end))?;
                Ok(CreateTimer {
                    timer: NewTimer {
                        spec: TimerSpec {
                            app: AppName::parse("bench")?,
                            name: TimerName::parse(format!("m-{i}"))?,
                            schedule,
                            callback: CallbackInput {
                                url: "http://127.0.0.1:9/unused".into(),
                                ..Default::default()
                            }
                            .parse()?,
                            retry: Default::default(),
                            misfire: Default::default(),
                            delivery: Default::default(),
                        },
                        enabled: true,
                    },
                    idempotency: None,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        store.create_timers(batch, Horizon::DEFAULT).await?;
    }
    // Creates write each timer's first occurrence; take them back, so the migrator writes
    // the whole million, as it does for timers it has never materialized.
    sqlx::query("DELETE FROM occurrences")
        .execute(db.store.pool())
        .await?;
    sqlx::query("UPDATE timers SET materialized_until = 0")
        .execute(db.store.pool())
        .await?;
    eprintln!(
        "  {timers} timers written in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let dir = log_dir("bench-materialize");
    let admin = format!("127.0.0.1:{}", free_port());
    let mut env: Vec<(&str, String)> = vec![
        ("CHIME_DATABASE_URL", db.url()),
        ("CHIME_REDIS_URL", testkit::redis_url()),
        ("CHIME_REDIS_PREFIX", redis.backend.prefix().to_owned()),
        ("CHIME_ADMIN_ADDR", admin.clone()),
        ("CHIME_MIGRATOR_ADDR", format!("127.0.0.1:{}", free_port())),
        ("CHIME_BUCKETS", args.buckets.to_string()),
        ("CHIME_LOG", "info".into()),
        // A lead past the whole window above, and room for all of its rows.
        ("CHIME_MIGRATOR__LEAD", "300s".into()),
        ("CHIME_MIGRATOR__MAX_AHEAD", PER_TIMER.to_string()),
    ];
    env.extend(args.env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let metrics = chime_runtime::http_client().build()?;
    let started = Instant::now();
    let mut migrator = Service::start("migrator", "chime-migrator", &[], &env, &dir);
    let cpu0 = CpuSample::take(&[("migrator".into(), migrator.pid())]);
    let deadline = started + Duration::from_secs(120);
    let (_, indexed) = loop {
        let text = match metrics.get(format!("http://{admin}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let written = counter(&text, "chime_migrator_occurrences_written_total");
        if written >= total as f64 {
            break (
                written,
                counter(&text, "chime_migrator_occurrences_indexed_total"),
            );
        }
        if !migrator.running() || Instant::now() > deadline {
            bail!(
                "the migrator wrote {written} of {total} occurrences:\n{}",
                migrator.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wall = started.elapsed().as_secs_f64();
    let cpu1 = CpuSample::take(&[("migrator".into(), migrator.pid())]);
    migrator.stop().await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM occurrences")
        .fetch_one(db.store.pool())
        .await?;
    if rows != total as i64 || indexed < total as f64 {
        o.failed.push(format!(
            "{rows} rows and {indexed} hot-index members for {total} occurrences"
        ));
    }
    let rate = total as f64 / wall;
    o.target(
        wall <= 20.0,
        format!("{total} occurrences took {wall:.1} s (target ≤ 20 s)"),
    );
    o.row(
        "occurrences",
        format!("{total} ({timers} timers × {PER_TIMER})"),
        "",
    );
    o.row("wall time", format!("{wall:.2} s"), "1,000,000 in ≤ 20 s");
    o.row("rate", format!("{rate:.0} rows/s"), "");
    o.figures = json!({
        "occurrences": total,
        "timers": timers,
        "rows": rows,
        "indexed": indexed,
        "wall_seconds": wall,
        "rows_per_second": rate,
        "cpu_seconds_per_1000": cpu0.per_thousand(&cpu1, total),
    });
    Ok(o)
}

/// The sum of a Prometheus counter's samples in `text`.
fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// Single creates from 32 clients: timers/s and p99 per call (ms); batches: timers/s.
const API_SINGLE_RATE: f64 = 10_000.0;
const API_SINGLE_P99_MS: f64 = 20.0;
const API_BATCH_RATE: f64 = 50_000.0;
const API_TARGET_CLIENTS: usize = 32;

async fn api(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("api");
    // The whole deployment runs, migrator included: creates must not depend on it, and must
    // be fast beside it.
    let d = Deployment::start(args, "bench-api", &[]).await?;
    let mut all = Vec::new();
    for (round, clients) in args.api_concurrency.iter().copied().enumerate() {
        let reports = crate::api::measure(
            &d.cluster.rest,
            &d.cluster.grpc,
            &format!("c{round}"),
            args.api_requests,
            clients,
        )
        .await;
        let reports = match reports {
            Ok(r) => r,
            Err(e) => {
                d.stop().await;
                return Err(e);
            }
        };
        for r in &reports {
            let single = r.name.ends_with("single");
            let target = match (clients == API_TARGET_CLIENTS, single) {
                (false, _) => String::new(),
                (true, true) => {
                    format!("≥ {API_SINGLE_RATE:.0}/s, p99 ≤ {API_SINGLE_P99_MS:.0} ms")
                }
                (true, false) => format!("≥ {API_BATCH_RATE:.0}/s"),
            };
            o.row(
                &format!("{} × {clients} clients", r.name),
                format!(
                    "{:.0} timers/s; per call p50 {:.1} / p99 {:.1} ms",
                    r.timers_per_second, r.p50_ms, r.p99_ms
                ),
                &target,
            );
            if clients == API_TARGET_CLIENTS {
                if single {
                    o.target(
                        r.timers_per_second >= API_SINGLE_RATE && r.p99_ms <= API_SINGLE_P99_MS,
                        format!(
                            "{} at {clients} clients: {:.0}/s, p99 {:.1} ms",
                            r.name, r.timers_per_second, r.p99_ms
                        ),
                    );
                } else {
                    o.target(
                        r.timers_per_second >= API_BATCH_RATE,
                        format!(
                            "{} at {clients} clients: {:.0}/s",
                            r.name, r.timers_per_second
                        ),
                    );
                }
            }
        }
        all.push(json!({ "clients": clients, "measurements": reports }));
    }
    d.stop().await;
    o.figures = json!({ "rounds": all });
    Ok(o)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let began = Instant::now();
    let mut outcomes = Vec::new();
    for s in &args.scenarios {
        eprintln!("scenario {s:?} …");
        let t = Instant::now();
        let outcome = match s {
            Scenario::Burst => burst(&args).await,
            Scenario::Steady => steady(&args).await,
            Scenario::Sparse => sparse(&args).await,
            Scenario::Materialize => materialize(&args).await,
            Scenario::Api => api(&args).await,
            Scenario::Purge => purge(&args).await,
        }
        .with_context(|| format!("scenario {s:?}"))?;
        eprintln!("  done in {:.0} s", t.elapsed().as_secs_f64());
        outcomes.push(outcome);
    }

    println!(
        "{:<12} {:<36} {:<48} target",
        "scenario", "measure", "value"
    );
    for o in &outcomes {
        for (measure, value, target) in &o.rows {
            println!("{:<12} {measure:<36} {value:<48} {target}", o.scenario);
        }
    }
    let failed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.failed.iter().map(move |f| format!("{}: {f}", o.scenario)))
        .collect();
    let missed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.missed.iter().map(move |m| format!("{}: {m}", o.scenario)))
        .collect();
    let report = json!({
        "benchmark": "pipeline",
        "git_commit": git_commit(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "smoke": args.smoke,
        "deployment": {
            "schedulers": args.schedulers,
            "executors": args.executors,
            "buckets": args.buckets,
            "env": args.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        },
        "seconds": began.elapsed().as_secs_f64(),
        "scenarios": outcomes,
        "targets_met": missed.is_empty(),
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    eprintln!(
        "report written to {} ({:.0} s in all)",
        args.out.display(),
        began.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("not everything was delivered:\n  {}", failed.join("\n  "));
    }
    if !args.smoke && !missed.is_empty() {
        bail!("targets missed:\n  {}", missed.join("\n  "));
    }
    Ok(())
}
