//! The firing side of the pipeline: a claimed occurrence's callback task, which waits for the
//! due instant, delivers through its target and hands the outcome to be recorded.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    ClaimedOccurrence, Clock, OccurrenceStatus, Outcome, OverlapPolicy, TaskKey, Timer,
};
use tracing::Instrument;

use crate::outcome::completes;
use crate::{Done, Inner, Job, hosts, settle};

impl Inner {
    /// Starts the callback of a claimed occurrence: it waits for the due instant, delivers,
    /// and sends its outcome to be recorded.
    pub(crate) fn fire(
        self: &Arc<Self>,
        job: Job,
        occurrence: ClaimedOccurrence,
        timer: Arc<Timer>,
        mut slot: Option<hosts::HostSlot>,
    ) {
        let inner = self.clone();
        let span = callback_span(
            &job.span,
            job.key,
            occurrence.attempt,
            chime_runtime::traces_exported(),
        );
        let watch = (timer.spec.overlap == OverlapPolicy::CancelOther)
            .then(|| self.cancels.watch(job.key, occurrence.attempt));
        let fire = async move {
            let deliver = async {
                wait_until(inner.clock.as_ref(), occurrence.due).await;
                if let Some(s) = slot.as_mut() {
                    s.begin();
                }
                inner
                    .targets
                    .deliver(&timer, occurrence, inner.clock.as_ref())
                    .await
            };
            let outcome = match &watch {
                None => settle(&timer, deliver.await, inner.clock.now(), rand::random()),
                Some(w) => tokio::select! {
                    attempt = deliver => settle(&timer, attempt, inner.clock.now(), rand::random()),
                    () = w.cancelled() => {
                        tracing::debug!("callback aborted: a newer occurrence cancelled it");
                        // Its row is skipped already: this outcome is not recorded.
                        Outcome::ended(
                            job.key,
                            occurrence.attempt,
                            OccurrenceStatus::Skipped,
                            None,
                            Some("overlap: cancelled by a newer occurrence".into()),
                        )
                    }
                },
            };
            let outcome = Outcome {
                unwritten: occurrence.unwritten,
                leased: occurrence.leased,
                ..outcome
            };
            drop(watch);
            // The host's next waiting key may go.
            drop(slot);
            tracing::debug!(status = outcome.status.as_str(), "callback done");
            let _ = inner.done.send(Done {
                completes: completes(Some(&timer), &outcome),
                timer: Some(timer.clone()),
                offset_ms: if occurrence.backfill {
                    occurrence.due.as_millis() - job.key.run_at.as_millis()
                } else {
                    timer
                        .due_of(job.key.run_at)
                        .map_or(0, |d| d.as_millis() - job.key.run_at.as_millis())
                },
                outcome,
                bucket: occurrence.bucket,
                permit: job.permit,
            });
        };
        self.tracker.spawn(fire.instrument(span));
    }
}

/// A callback's span, child of the hand-off that brought its key. It is an `info` span when
/// spans are exported (the callee's `traceparent` names it), a `debug` one otherwise, so at
/// the default level no span is made, formatted and kept per callback for nothing to read.
pub(crate) fn callback_span(
    parent: &tracing::Span,
    key: TaskKey,
    attempt: u32,
    exported: bool,
) -> tracing::Span {
    if !exported {
        return tracing::debug_span!(parent: parent, "callback", task = %key, attempt);
    }
    let span = tracing::info_span!(
        parent: parent,
        "callback",
        task = %key,
        attempt,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    chime_runtime::record_ids(&span);
    span
}

/// The most a claimed key waits for its due time. Schedulers hand keys off only a little
/// ahead; this bounds what a clock far off could hold a permit for.
const MAX_EARLY: Duration = Duration::from_secs(5);

/// Waits until `due` by `clock`: keys are handed off (and claimed) a little ahead, so the
/// claim's round trips are done by the due instant and the callback goes out on time.
async fn wait_until(clock: &dyn Clock, due: chime_domain::Timestamp) {
    let latest = clock.now().saturating_add(MAX_EARLY);
    clock.sleep_until(due.min(latest)).await;
}

#[cfg(test)]
mod tests {
    use chime_domain::{TaskKey, TimerId, Timestamp};
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::callback_span;

    /// Whether a callback's span is made, under a subscriber at `level`.
    fn made(level: LevelFilter, exported: bool) -> bool {
        let subscriber = tracing_subscriber::registry().with(level);
        tracing::subscriber::with_default(subscriber, || {
            let key = TaskKey::new(TimerId::new(7).unwrap(), Timestamp::from_millis(1_000));
            let hand_off = tracing::info_span!("hand_off");
            !callback_span(&hand_off, key, 1, exported).is_disabled()
        })
    }

    #[test]
    fn a_callback_span_is_made_when_spans_are_exported_or_debug_is_on() {
        assert!(!made(LevelFilter::INFO, false), "nothing reads it at info");
        assert!(
            made(LevelFilter::INFO, true),
            "the callee's traceparent names it"
        );
        assert!(made(LevelFilter::DEBUG, false), "debug events go under it");
    }
}
