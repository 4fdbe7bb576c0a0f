//! The outcome side of the pipeline: outcomes written a batch at a time, retries put back in
//! the hot index, finished timers removed, metrics and activity tallies counted; each key's
//! permit freed once its outcome is stored.

use std::sync::Arc;

use chime_domain::{Bucket, OccurrenceStatus, Outcome, TimerId};
use chime_storage::HotEntry;
use tokio::sync::mpsc;

use crate::notify::Ended;
use crate::{Backoff, Done, Inner};

/// Tries after a failure not known to be transient, before the batch's outcomes are dropped.
const UNCLASSIFIED_TRIES: u32 = 3;

/// The runs among `outcomes` that ended, with their timers, for the notifier.
fn ended(outcomes: &[Outcome], timers: &[Option<Arc<chime_domain::Timer>>]) -> Vec<Ended> {
    outcomes
        .iter()
        .zip(timers)
        .filter_map(|(o, timer)| {
            let timer = timer.as_ref()?;
            let succeeded = chime_domain::run_ending(o.status)?;
            Some(Ended {
                app: timer.spec.app.clone(),
                timer_id: o.key.timer_id,
                name: timer.spec.name.clone(),
                run_at: o.key.run_at,
                attempt: o.attempt,
                succeeded,
                dead: o.status == OccurrenceStatus::Dead,
                error: o.error.clone(),
            })
        })
        .collect()
}

/// Frees the run leases of the unwritten runs and leased first attempts among `outcomes`,
/// now that their rows are written. One that cannot be freed lapses by itself; meanwhile a
/// second offer of the run finds it held, and then finds its row.
async fn free_written(inner: &Inner, outcomes: &[Outcome]) {
    let Some(leases) = &inner.run_leases else {
        return;
    };
    let runs: Vec<chime_domain::TaskKey> = outcomes
        .iter()
        .filter(|o| o.unwritten.is_some() || o.leased)
        .map(|o| o.key)
        .collect();
    if let Err(e) = leases.free_runs(&runs).await {
        tracing::warn!(error = %e, runs = runs.len(), "cannot free run leases; they lapse");
    }
}

/// Writes outcomes a batch at a time; each key's permit is freed once its outcome is stored.
pub(crate) async fn outcome_loop(
    inner: Arc<Inner>,
    mut done: mpsc::UnboundedReceiver<Done>,
    permits: Arc<crate::lanes::Permits>,
) {
    let cap = inner.settings.batch;
    // A batch this large is written at once: waiting longer saves little per outcome, and
    // holds the permits of a burst's finished callbacks.
    let enough = (cap / 8).max(1);
    let mut batch = Vec::with_capacity(cap);
    while done.recv_many(&mut batch, cap).await > 0 {
        // More outcomes join this batch for a moment: one statement per batch is the cost.
        if batch.len() < enough && !inner.settings.outcome_linger.is_zero() {
            let until = tokio::time::Instant::now() + inner.settings.outcome_linger;
            while batch.len() < enough {
                match tokio::time::timeout_at(until, done.recv()).await {
                    Ok(Some(d)) => batch.push(d),
                    Ok(None) | Err(_) => break,
                }
            }
            while batch.len() < cap {
                match done.try_recv() {
                    Ok(d) => batch.push(d),
                    Err(_) => break,
                }
            }
        }
        // The permits are dropped at the end of this iteration, once the outcomes are stored.
        let finished: Vec<TimerId> = batch
            .iter()
            .filter(|d| d.completes)
            .map(|d| d.outcome.key.timer_id)
            .collect();
        let offsets: Vec<i64> = batch.iter().map(|d| d.offset_ms).collect();
        let timers: Vec<Option<Arc<chime_domain::Timer>>> =
            batch.iter_mut().map(|d| d.timer.take()).collect();
        let (outcomes, held): (Vec<Outcome>, Vec<(Bucket, crate::lanes::Permit)>) = batch
            .drain(..)
            .map(|d| (d.outcome, (d.bucket, d.permit)))
            .unzip();
        let mut backoff = Backoff::new();
        let mut unclassified = 0;
        let recorded = loop {
            match inner.occurrences.record_outcomes(&outcomes).await {
                Err(e) if e.is_retryable() => backoff.pause("recording outcomes", &e).await,
                // Not known to be transient, but often is (MariaDB failing on a temporary
                // file, say): a dropped outcome is fired again by the sweeper, a duplicate
                // callback, so it is worth a few more tries before giving up.
                Err(e) if unclassified < UNCLASSIFIED_TRIES => {
                    unclassified += 1;
                    backoff.pause("recording outcomes", &e).await;
                }
                done => break done,
            }
        };
        match recorded {
            Err(e) => {
                tracing::error!(error = %e, outcomes = outcomes.len(), "cannot record outcomes; dropping them");
            }
            // Told only of what is stored: a dropped outcome's run is fired again.
            Ok(_) => {
                free_written(&inner, &outcomes).await;
                if let Some(notifier) = inner.notifier.get() {
                    notifier.observe(ended(&outcomes, &timers));
                }
                crate::chain::start(&inner, crate::chain::steps(&outcomes, &timers)).await;
            }
        }
        // Retries go back to the hot index, due at their next attempt. If that fails the
        // sweeper finds them in the database once due.
        if let Some(index) = &inner.index {
            let retries: Vec<HotEntry> = outcomes
                .iter()
                .zip(&held)
                .filter(|(o, _)| o.status == OccurrenceStatus::Retrying)
                .filter_map(|(o, (bucket, _))| {
                    Some(HotEntry::new(o.key, o.next_attempt_at?, *bucket))
                })
                .collect();
            if let Err(e) = index.retrying(&retries).await {
                tracing::warn!(error = %e, retries = retries.len(), "cannot index retries; the sweeper will find them");
            }
        }
        // Timers done with `on_complete: delete` go once their last outcome is stored. If
        // this fails the timer stays, in state `done` (docs/api.md).
        if !finished.is_empty() {
            match inner
                .timers
                .remove_finished(&finished, inner.clock.now())
                .await
            {
                Ok(removed) if !removed.is_empty() => {
                    tracing::info!(timers = ?removed, "removed timers done with on_complete delete");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot remove finished timers"),
            }
        }
        let lateness: Vec<Option<i64>> = outcomes
            .iter()
            .zip(offsets)
            .map(|(o, offset)| o.lateness_ms().map(|l| l - offset))
            .collect();
        for (o, late) in outcomes.iter().zip(&lateness) {
            metrics::counter!("chime_executor_outcomes_total", "status" => o.status.as_str())
                .increment(1);
            if let Some(late) = late {
                metrics::histogram!("chime_executor_lateness_seconds")
                    .record(*late as f64 / 1000.0);
            }
        }
        if let Some(log) = &inner.activity {
            log.add(outcomes.iter().zip(&lateness).zip(&timers).filter_map(
                |((o, late), timer)| Some((&timer.as_ref()?.spec.app, o.status, *late)),
            ));
        }
        drop(held);
        let in_flight = permits.in_flight();
        metrics::gauge!("chime_executor_in_flight").set(in_flight as f64);
    }
}
