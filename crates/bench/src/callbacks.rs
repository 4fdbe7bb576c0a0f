//! One client of the bench's callback-floor scenario (`chime-bench-callbacks`): an
//! executor's share of a burst of callbacks, sent with the executor's own client and
//! request (`HttpTarget::deliver`) and nothing around them (no claim, outcome or database).

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
}

/// Sends the callbacks, prints `done {failed}`, then waits for stdin to close, so the
/// scenario reads this process's CPU time before it exits.
pub async fn run(a: ClientArgs) -> anyhow::Result<()> {
    let mut config = chime_runtime::Config::default();
    config.callbacks.allow_networks = vec!["127.0.0.0/8".into()];
    let target = Arc::new(HttpTarget::new(CallbackSettings::from_config(&config))?);
    let timer = Arc::new(floor_timer(&a.url)?);
    let wait = a.start_ms - SystemClock.now().as_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let start = Timestamp::from_millis(a.start_ms);
    // A task per callback, as an executor runs them, spread over the runtime's workers.
    let failed = futures::stream::iter(0..a.count)
        .map(|i| {
            let id = a.client * 1_000_000_000 + i as i64 + 1;
            let occurrence = ClaimedOccurrence {
                key: TaskKey::new(TimerId::new(id).unwrap_or(timer.id), start),
                timer_version: timer.version,
                bucket: timer.bucket,
                attempt: 1,
                due: start,
                backfill: false,
                parent: None,
                timer_now: Some(timer.version),
            };
            let (target, timer) = (target.clone(), timer.clone());
            tokio::spawn(async move {
                let attempt = target.deliver(&timer, occurrence, &SystemClock).await;
                attempt.outcome.status == OccurrenceStatus::Succeeded
            })
        })
        .buffer_unordered(a.concurrency.max(1))
        .filter(|succeeded| std::future::ready(!matches!(succeeded, Ok(true))))
        .count()
        .await;
    println!("done {failed}");
    let mut rest = String::new();
    let _ = BufReader::new(tokio::io::stdin())
        .read_line(&mut rest)
        .await;
    Ok(())
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
