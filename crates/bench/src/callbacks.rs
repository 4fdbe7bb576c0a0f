//! One client of the bench's callback-floor and paced-floor scenarios
//! (`chime-bench-callbacks`): an executor's share of a burst of callbacks, or of a steady
//! rate of them each sent at its own due instant, with the executor's own client and request
//! (`HttpTarget::deliver`) and nothing around them (no claim, outcome or database); or, for
//! durable-floor, with each delivered callback then recorded by one row update in
//! PostgreSQL, a batch at a time, as the least a durable timer service writes per firing.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    CallbackInput, ClaimedOccurrence, Clock, OccurrenceStatus, SystemClock, TaskKey, Timer,
    TimerId, Timestamp,
};
use chime_executor::{CallbackSettings, DeliveryTarget, HttpTarget};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "chime-bench-callbacks",
    about = "One client of chime-bench's callback-floor scenario"
)]
pub struct ClientArgs {
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub count: usize,
    /// Callbacks in flight at once.
    #[arg(long)]
    pub concurrency: usize,
    /// Unix ms to start at, so every client starts together.
    #[arg(long)]
    pub start_ms: i64,
    /// This client's number: its keys differ from the others'.
    #[arg(long)]
    pub client: i64,
    /// Callbacks per second, each due at its own instant from `--start-ms` on and sent then,
    /// as an executor wakes for a claimed key at its due time; without it every callback is
    /// due at `--start-ms` (a burst).
    #[arg(long)]
    pub rate: Option<f64>,
    /// A PostgreSQL URL whose `durable_floor` table holds a pending row per callback of this
    /// client: each delivered callback's row is then updated, a batch at a time.
    #[arg(long)]
    pub record: Option<String>,
}

/// The most rows one update of `durable_floor` records, as an executor's outcome batch.
const RECORD_BATCH: usize = 1_000;

/// How far ahead of its due instant a paced callback's task starts, as a scheduler hands a
/// key off ahead (`scheduler.dispatch_ahead`) and the executor then waits for the due time.
const PACED_AHEAD: Duration = Duration::from_millis(100);

/// Sends the callbacks, prints `done {failed}`, then waits for stdin to close, so the
/// scenario reads this process's CPU time before it exits.
pub async fn run(a: ClientArgs) -> anyhow::Result<()> {
    let mut config = chime_runtime::Config::default();
    config.callbacks.allow_networks = vec!["127.0.0.0/8".into()];
    let target = Arc::new(HttpTarget::new(CallbackSettings::from_config(&config))?);
    let timer = Arc::new(floor_timer(&a.url)?);
    // Connected before the start, so that the records cost their writes, not a connection.
    // The pool is kept open until this process exits: its backend's CPU is read after `done`.
    let (record_tx, recorder, _pool) = match &a.record {
        Some(url) => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let recorder = tokio::spawn(record(pool.clone(), rx));
            (Some(tx), Some(recorder), Some(pool))
        }
        None => (None, None, None),
    };
    let wait = a.start_ms - SystemClock.now().as_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let start = Timestamp::from_millis(a.start_ms);
    let rate = a.rate.filter(|r| *r > 0.0);
    let due = |i: usize| match rate {
        Some(r) => start.saturating_add(Duration::from_secs_f64(i as f64 / r)),
        None => start,
    };
    // A task per callback, as an executor runs them, spread over the runtime's workers.
    let failed = futures::stream::iter(0..a.count)
        .then(|i| async move {
            // Paced: the task starts a little ahead of its due instant, as a claimed key does.
            if rate.is_some() {
                wait_until(due(i), PACED_AHEAD).await;
            }
            i
        })
        .map(|i| {
            let id = callback_id(a.client, i);
            let at = due(i);
            let occurrence = ClaimedOccurrence {
                key: TaskKey::new(TimerId::new(id).unwrap_or(timer.id), at),
                timer_version: timer.version,
                bucket: timer.bucket,
                attempt: 1,
                due: at,
                backfill: false,
                parent: None,
                timer_now: Some(timer.version),
                unwritten: None,
                leased: false,
            };
            let (target, timer) = (target.clone(), timer.clone());
            tokio::spawn(async move {
                if rate.is_some() {
                    wait_until(at, Duration::ZERO).await;
                }
                let attempt = target.deliver(&timer, occurrence, &SystemClock).await;
                (id, attempt.outcome.status == OccurrenceStatus::Succeeded)
            })
        })
        .buffer_unordered(a.concurrency.max(1))
        // Delivered: recorded if asked; the rest are counted as failed.
        .inspect(|sent| {
            if let (Ok((id, true)), Some(tx)) = (sent, &record_tx) {
                let _ = tx.send(*id);
            }
        })
        .filter(|sent| std::future::ready(!matches!(sent, Ok((_, true)))))
        .count()
        .await;
    drop(record_tx);
    // A delivered callback whose row was not recorded counts as failed.
    let unrecorded = match recorder {
        Some(r) => (a.count - failed).saturating_sub(r.await?? as usize),
        None => 0,
    };
    println!("done {}", failed + unrecorded);
    let mut rest = String::new();
    let _ = BufReader::new(tokio::io::stdin())
        .read_line(&mut rest)
        .await;
    Ok(())
}

/// The id of client `client`'s `i`-th callback: clients' ids never meet.
pub fn callback_id(client: i64, i: usize) -> i64 {
    client * 1_000_000_000 + i as i64 + 1
}

/// Records each delivered callback's row as an executor records outcomes: whatever has
/// arrived, up to a batch, in one update by primary key. Returns the rows updated.
async fn record(
    pool: sqlx::PgPool,
    mut delivered: tokio::sync::mpsc::UnboundedReceiver<i64>,
) -> anyhow::Result<u64> {
    let mut ids = Vec::with_capacity(RECORD_BATCH);
    let mut written = 0;
    while delivered.recv_many(&mut ids, RECORD_BATCH).await > 0 {
        written += sqlx::query(
            "UPDATE durable_floor f SET status = 'succeeded', attempt = 1, finished_at = $2 \
             FROM UNNEST($1::bigint[]) AS k(id) WHERE f.id = k.id AND f.status = 'pending'",
        )
        .bind(&ids)
        .bind(SystemClock.now().as_millis())
        .execute(&pool)
        .await?
        .rows_affected();
        ids.clear();
    }
    Ok(written)
}

/// Sleeps until `ahead` before `at` by the system clock.
async fn wait_until(at: Timestamp, ahead: Duration) {
    let wait = at.as_millis() - ahead.as_millis() as i64 - SystemClock.now().as_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// A timer calling back `url` as the pipeline scenarios' timers do (POST, no body).
fn floor_timer(url: &str) -> anyhow::Result<Timer> {
    let now = SystemClock.now();
    let mut spec = chime_storage::contract::spec_every("bench", "floor", "1h", now);
    spec.callback = CallbackInput {
        url: Some(url.to_owned()),
        ..Default::default()
    }
    .parse()?;
    Ok(chime_storage::contract::unstored_timer(1, spec, now))
}
