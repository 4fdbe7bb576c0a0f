//! Chain steps: when a run ends, the timers its timer's `then` names for that ending get
//! one occurrence each, due at once. Started right after the outcomes are stored, in the
//! outcome loop, so a step is never started for an outcome that was not stored. The store
//! starts each step once per run, whichever executor asks and however often.

use std::sync::Arc;

use chime_domain::{ChainStep, Outcome, Timer};
use chime_storage::HotEntry;

use crate::{Backoff, Inner};

/// Tries after a failure not known to be transient, before the steps are given up.
const UNCLASSIFIED_TRIES: u32 = 3;

/// The steps the runs among `outcomes` that ended start.
pub(crate) fn steps(outcomes: &[Outcome], timers: &[Option<Arc<Timer>>]) -> Vec<ChainStep> {
    let mut steps = Vec::new();
    for (o, timer) in outcomes.iter().zip(timers) {
        let Some(timer) = timer else { continue };
        let (names, Some(on)) = timer.spec.then.after(o.status) else {
            continue;
        };
        steps.extend(names.iter().map(|name| ChainStep {
            parent: o.key,
            app: timer.spec.app.clone(),
            on,
            step: name.clone(),
        }));
    }
    steps
}

/// Starts `steps` and indexes the runs they start. A step the database cannot take after
/// its retries is lost, and logged: it is not started twice, never.
pub(crate) async fn start(inner: &Inner, steps: Vec<ChainStep>) {
    let Some(chains) = inner.chains.get() else {
        return;
    };
    if steps.is_empty() {
        return;
    }
    let mut backoff = Backoff::new();
    let mut unclassified = 0;
    let started = loop {
        match chains.start_steps(&steps, inner.clock.now()).await {
            Ok(started) => break started,
            Err(e) if e.is_retryable() => backoff.pause("starting chain steps", &e).await,
            Err(e) if unclassified < UNCLASSIFIED_TRIES => {
                unclassified += 1;
                backoff.pause("starting chain steps", &e).await;
            }
            Err(e) => {
                tracing::error!(error = %e, steps = steps.len(), "cannot start chain steps; dropping them");
                metrics::counter!("chime_executor_chain_steps_total", "result" => "dropped")
                    .increment(steps.len() as u64);
                return;
            }
        }
    };
    metrics::counter!("chime_executor_chain_steps_total", "result" => "started")
        .increment(started.len() as u64);
    // Their rows are durable: a lost index write costs lateness (the sweeper finds them).
    if let Some(index) = &inner.index {
        let entries: Vec<HotEntry> = started
            .iter()
            .map(|o| HotEntry::new(o.key, o.due_at(), o.bucket))
            .collect();
        if let Err(e) = index.chained(&entries).await {
            tracing::warn!(error = %e, runs = entries.len(), "cannot index chain steps' runs; the sweeper will find them");
        }
    }
}
