use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chime_bench::measure::{git_commit, median};
use chime_domain::{
    Bucket, BucketCount, Claim, Clock, NewOccurrence, OccurrenceStatus, Outcome, SystemClock,
    TaskKey, TimerId, Timestamp,
};
use chime_storage::redis::{RedisBackend, RedisSettings};
use chime_storage::{HotEntry, HotIndex};
use futures::future::try_join_all;
use serde::Serialize;

mod db;
use db::{DbBench, Kind};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// PostgreSQL to measure; the bench works in a schema of its own and drops it after.
    #[arg(
        long,
        env = "CHIME_TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Redis to measure; the bench uses a key prefix of its own and deletes it after.
    #[arg(
        long,
        env = "CHIME_TEST_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// MySQL / MariaDB to measure (with `--databases mariadb`); the bench works in a
    /// database of its own and drops it after.
    #[arg(
        long,
        env = "CHIME_TEST_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    /// Databases to measure inserts and claims on, side by side; the hot index is measured
    /// on Redis and, with `postgres`, in PostgreSQL (its PostgreSQL-only mode).
    #[arg(long, value_delimiter = ',', default_value = "postgres")]
    databases: Vec<DatabaseArg>,
    /// Occurrences inserted into the database.
    #[arg(long, default_value_t = 1_000_000)]
    insert_rows: usize,
    /// Occurrences claimed and then given an outcome.
    #[arg(long, default_value_t = 100_000)]
    claim_rows: usize,
    /// Members added to the Redis hot index.
    #[arg(long, default_value_t = 1_000_000)]
    hot_members: usize,
    /// Rows per insert statement / members per hot-index call.
    #[arg(long, default_value_t = 10_000)]
    batch: usize,
    /// Keys per claim (and per outcome batch).
    #[arg(long, default_value_t = 1_000)]
    claim_batch: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Repetitions of each scenario; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where the JSON report goes.
    #[arg(long, default_value = "target/bench/storage.json")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DatabaseArg {
    Postgres,
    Mariadb,
}

#[derive(Debug, Serialize)]
struct ScenarioReport {
    scenario: &'static str,
    backend: &'static str,
    items: usize,
    runs_seconds: Vec<f64>,
    median_seconds: f64,
    median_per_second: f64,
    target_per_second: f64,
    ratio_to_target: f64,
    met: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    git_commit: Option<String>,
    cpus: usize,
    settings: serde_json::Value,
    scenarios: Vec<ScenarioReport>,
}

fn summarize(
    scenario: &'static str,
    backend: &'static str,
    items: usize,
    runs: Vec<Duration>,
    target: f64,
) -> ScenarioReport {
    let secs: Vec<f64> = runs.iter().map(Duration::as_secs_f64).collect();
    let med = median(&secs);
    let rate = items as f64 / med;
    ScenarioReport {
        scenario,
        backend,
        items,
        runs_seconds: secs,
        median_seconds: med,
        median_per_second: rate,
        target_per_second: target,
        ratio_to_target: rate / target,
        met: rate >= target,
    }
}

/// Occurrences of many timers, one per second each, spread over buckets.
fn occurrences(n: usize, offset: usize) -> Vec<NewOccurrence> {
    let base = 1_893_456_000_000i64;
    (offset..offset + n)
        .map(|i| {
            let timer = (i % 50_000) as i64 + 1;
            let id = TimerId::new(timer).unwrap_or_else(|_| unreachable!("positive id"));
            NewOccurrence {
                key: TaskKey::new(
                    id,
                    Timestamp::from_millis(base + (i / 50_000) as i64 * 1_000),
                ),
                timer_version: 1,
                bucket: Bucket::of(id, BucketCount::DEFAULT),
                due: None,
            }
        })
        .collect()
}

/// Splits `items` into `batch`-sized chunks worked by `concurrency` tasks.
async fn run_batched<T, F, Fut>(
    items: Vec<T>,
    batch: usize,
    concurrency: usize,
    work: F,
) -> anyhow::Result<Duration>
where
    T: Send + Sync + 'static,
    F: Fn(Arc<Vec<T>>, std::ops::Range<usize>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let items = Arc::new(items);
    let chunks: Vec<_> = (0..items.len())
        .step_by(batch)
        .map(|s| s..(s + batch).min(items.len()))
        .collect();
    let queue = Arc::new(std::sync::Mutex::new(chunks));
    let started = Instant::now();
    let workers = (0..concurrency.max(1)).map(|_| {
        let (items, queue, work) = (items.clone(), queue.clone(), work.clone());
        tokio::spawn(async move {
            loop {
                let next = queue
                    .lock()
                    .map_err(|_| anyhow::anyhow!("queue poisoned"))?
                    .pop();
                match next {
                    Some(range) => work(items.clone(), range).await?,
                    None => return anyhow::Ok(()),
                }
            }
        })
    });
    for r in try_join_all(workers).await? {
        r?;
    }
    Ok(started.elapsed())
}

async fn bench_insert(pg: &DbBench, args: &Args) -> anyhow::Result<Vec<Duration>> {
    let mut runs = Vec::new();
    for run in 0..args.runs {
        pg.truncate().await?;
        let store = pg.store.clone();
        let took = run_batched(
            occurrences(args.insert_rows, 0),
            args.batch,
            args.concurrency,
            move |items, range| {
                let store = store.clone();
                async move {
                    store.insert_occurrences(&items[range]).await?;
                    Ok(())
                }
            },
        )
        .await?;
        eprintln!("  insert run {}: {:.2}s", run + 1, took.as_secs_f64());
        runs.push(took);
    }
    Ok(runs)
}

async fn bench_claim(pg: &DbBench, args: &Args) -> anyhow::Result<Vec<Duration>> {
    let mut runs = Vec::new();
    for run in 0..args.runs {
        pg.truncate().await?;
        let occ = occurrences(args.claim_rows, 0);
        for chunk in occ.chunks(args.batch) {
            pg.store.insert_occurrences(chunk).await?;
        }
        let keys: Vec<TaskKey> = occ.iter().map(|o| o.key).collect();
        let store = pg.store.clone();
        let took = run_batched(
            keys,
            args.claim_batch,
            args.concurrency,
            move |keys, range| {
                let store = store.clone();
                async move {
                    let now = SystemClock.now();
                    let claim = Claim {
                        now,
                        lease_until: now.add_millis(30_000),
                    };
                    let claimed = store.claim(&keys[range], claim).await?;
                    let outcomes: Vec<Outcome> = claimed
                        .iter()
                        .map(|c| Outcome {
                            key: c.key,
                            attempt: c.attempt,
                            status: OccurrenceStatus::Succeeded,
                            fired_at: Some(now),
                            http_status: Some(200),
                            output: None,
                            error: None,
                            next_attempt_at: None,
                            unwritten: None,
                            leased: false,
                        })
                        .collect();
                    let recorded = store.record_outcomes(&outcomes).await?;
                    anyhow::ensure!(
                        recorded as usize == claimed.len(),
                        "recorded {recorded} of {} outcomes",
                        claimed.len()
                    );
                    Ok(())
                }
            },
        )
        .await?;
        let done = pg.succeeded().await?;
        anyhow::ensure!(
            done as usize == args.claim_rows,
            "only {done} occurrences completed"
        );
        eprintln!("  claim+record run {}: {:.2}s", run + 1, took.as_secs_f64());
        runs.push(took);
    }
    Ok(runs)
}

/// Adds to `index`, emptied before each run by `reset`.
async fn bench_hot_index<R, Fut>(
    index: Arc<dyn HotIndex>,
    reset: R,
    args: &Args,
) -> anyhow::Result<Vec<Duration>>
where
    R: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut runs = Vec::new();
    let now = SystemClock.now().as_millis();
    for run in 0..args.runs {
        reset().await?;
        // Due over the next 10 minutes: 10 minutes × 16 buckets = 160 shards, as the migrator
        // would write them.
        let entries: Vec<HotEntry> = occurrences(args.hot_members, 0)
            .into_iter()
            .enumerate()
            .map(|(i, o)| {
                let due =
                    Timestamp::from_millis(now + (i as i64 * 600_000) / args.hot_members as i64);
                HotEntry::new(o.key, due, o.bucket)
            })
            .collect();
        let index = index.clone();
        let took = run_batched(
            entries,
            args.batch,
            args.concurrency,
            move |entries, range| {
                let index = index.clone();
                async move {
                    index.add(&entries[range]).await?;
                    Ok(())
                }
            },
        )
        .await?;
        eprintln!(
            "  hot-index add run {}: {:.2}s",
            run + 1,
            took.as_secs_f64()
        );
        runs.push(took);
    }
    Ok(runs)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        args.batch >= 1 && args.claim_batch >= 1,
        "batch sizes must be at least 1"
    );
    let pool = args.concurrency as u32 + 1;
    let redis = RedisBackend::connect(
        &args.redis_url,
        RedisSettings {
            prefix: format!(
                "chime-bench-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ),
            pool_size: args.concurrency.max(1),
            ..Default::default()
        },
    )
    .await
    .with_context(|| format!("connecting to {}", args.redis_url))?;

    let mut scenarios = Vec::new();
    for database in &args.databases {
        let db = match database {
            DatabaseArg::Postgres => DbBench::postgres(&args.database_url, pool).await?,
            DatabaseArg::Mariadb => DbBench::mysql(&args.mysql_url, pool).await?,
        };
        eprintln!(
            "insert-if-absent of {} occurrences into {}",
            args.insert_rows, db.name
        );
        let insert = bench_insert(&db, &args).await;
        eprintln!(
            "claim + record outcome of {} occurrences on {}",
            args.claim_rows, db.name
        );
        let claim = bench_claim(&db, &args).await;
        // PostgreSQL-only mode keeps the hot index in the database.
        let hot = match &db.kind {
            Kind::Postgres { store, .. } => {
                eprintln!(
                    "hot-index add of {} members to PostgreSQL",
                    args.hot_members
                );
                let hot_path = Arc::new(store.hot_path(Duration::from_secs(600)));
                let pool = store.pool().clone();
                Some(
                    bench_hot_index(
                        hot_path,
                        || async {
                            sqlx::query("TRUNCATE hot_shards, hot_members")
                                .execute(&pool)
                                .await?;
                            Ok(())
                        },
                        &args,
                    )
                    .await,
                )
            }
            Kind::MySql { .. } => None,
        };
        let name = db.name;
        db.drop_all().await?;
        scenarios.push(summarize(
            "occurrence_insert",
            name,
            args.insert_rows,
            insert?,
            80_000.0,
        ));
        scenarios.push(summarize(
            "claim_and_record",
            name,
            args.claim_rows,
            claim?,
            50_000.0,
        ));
        if let Some(hot) = hot {
            scenarios.push(summarize(
                "hot_index_add",
                name,
                args.hot_members,
                hot?,
                200_000.0,
            ));
        }
    }
    eprintln!("hot-index add of {} members to Redis", args.hot_members);
    let hot = bench_hot_index(
        Arc::new(redis.hot_index()),
        || async {
            redis.delete_prefix().await?;
            Ok(())
        },
        &args,
    )
    .await;
    let _ = redis.delete_prefix().await;
    redis.quit().await;
    scenarios.push(summarize(
        "hot_index_add",
        "redis",
        args.hot_members,
        hot?,
        200_000.0,
    ));
    println!(
        "{:<20} {:<9} {:>10} {:>10} {:>12} {:>10} {:>7} {:>4}",
        "scenario", "backend", "items", "median s", "median /s", "target /s", "ratio", "met"
    );
    for s in &scenarios {
        println!(
            "{:<20} {:<9} {:>10} {:>10.3} {:>12.0} {:>10.0} {:>7.2} {:>4}",
            s.scenario,
            s.backend,
            s.items,
            s.median_seconds,
            s.median_per_second,
            s.target_per_second,
            s.ratio_to_target,
            if s.met { "yes" } else { "no" }
        );
    }
    let report = Report {
        benchmark: "storage",
        git_commit: git_commit(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        settings: serde_json::json!({
            "batch": args.batch,
            "claim_batch": args.claim_batch,
            "concurrency": args.concurrency,
            "runs": args.runs,
        }),
        scenarios,
    };
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("report written to {}", args.out.display());
    Ok(())
}
