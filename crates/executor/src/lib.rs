//! chime-executor: takes due task keys (over gRPC from schedulers, or in-process in
//! `chime dev`), claims each occurrence in the database so only one executor fires it, checks
//! the timer is still enabled at that version, performs the HTTP callback and records the
//! outcome.
//!
//! ```text
//! offer ──▶ claim queue ──▶ [get_timers + claim, batched] ──▶ callback tasks ──▶
//!          (bounded by          one batch per round trip         (concurrent)
//!           in-flight permits)                                         │
//!                                    [record_outcomes, batched] ◀──────┘ ── permit freed
//! ```
//! Every accepted key holds one permit from acceptance until its outcome is written, so
//! `max_in_flight` bounds memory and work, "full" is exact, and draining on shutdown is
//! waiting for every permit to come back.

mod cancel;
mod catalog;
pub mod grpc;
mod hosts;
mod outcome;
pub mod targets;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, Clock, OccurrenceStatus, Outcome, OverlapPolicy, TaskKey,
    Timer, TimerId,
};
use chime_storage::{Exclusive, HotEntry, HotIndex, OccurrenceStore, StoreResult, TimerStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use catalog::METRICS;
pub use outcome::settle;
use outcome::{completes, skip_reason};
pub use targets::{
    Attempt, CallbackSettings, DeliveryTarget, HostLookup, HttpTarget, Signer, SystemLookup,
    Targets,
};

#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// Keys accepted and not yet finished before the executor answers "full".
    pub max_in_flight: usize,
    /// Keys claimed (and outcomes written) per database round trip, at most.
    pub batch: usize,
    /// Added to the longest callback timeout of a batch to form its claim lease: past it,
    /// another executor may take the occurrence over.
    pub lease_margin: Duration,
    /// Callbacks to one host (`host:port`) running at once; more wait their turn unclaimed.
    pub max_per_host: usize,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            batch: 512,
            lease_margin: Duration::from_secs(5),
            max_per_host: 256,
        }
    }
}

impl ExecutorSettings {
    /// The `[executor]` section of the config.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        Self {
            max_in_flight: config.executor.max_in_flight,
            lease_margin: config.executor.claim_lease_margin.get(),
            max_per_host: config.executor.max_per_host,
            ..Self::default()
        }
    }
}

/// The executor refuses work: it is shutting down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the executor is shutting down")]
pub struct Stopping;

/// The answer to an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    /// Keys taken, from the front of the offer.
    pub accepted: usize,
    /// Room left afterwards.
    pub available: usize,
}

struct Job {
    key: TaskKey,
    permit: OwnedSemaphorePermit,
    /// The hand-off that brought it: its callback's span is a child of it.
    span: tracing::Span,
}

struct Done {
    outcome: Outcome,
    /// The timer's last occurrence ended and the timer deletes itself when done.
    completes: bool,
    /// How far its due instant lies after its run time by design (the timer's flexible
    /// window, a backfill's pace): not lateness.
    offset_ms: i64,
    /// Where a retry is indexed.
    bucket: Bucket,
    permit: OwnedSemaphorePermit,
}

struct Inner {
    timers: Arc<dyn TimerStore>,
    occurrences: Arc<dyn OccurrenceStore>,
    /// Where retries are scheduled; without one, the sweeper finds them when due.
    index: Option<Arc<dyn HotIndex>>,
    clock: Arc<dyn Clock>,
    targets: Targets,
    settings: ExecutorSettings,
    done: mpsc::UnboundedSender<Done>,
    tracker: TaskTracker,
    /// Each callback host's share of the in-flight callbacks.
    hosts: Arc<hosts::Hosts>,
    /// In-flight `cancel_other` callbacks, aborted when a newer occurrence cancels them.
    cancels: Arc<cancel::Cancels>,
}

pub struct Executor {
    inner: Arc<Inner>,
    permits: Arc<Semaphore>,
    queue: mpsc::UnboundedSender<Job>,
    stopping: AtomicBool,
}

impl Executor {
    /// Starts the claim and outcome pipelines on the current runtime.
    pub fn start(
        timers: Arc<dyn TimerStore>,
        occurrences: Arc<dyn OccurrenceStore>,
        index: Option<Arc<dyn HotIndex>>,
        clock: Arc<dyn Clock>,
        targets: Targets,
        settings: ExecutorSettings,
    ) -> Arc<Self> {
        let (queue, jobs) = mpsc::unbounded_channel();
        let (done, outcomes) = mpsc::unbounded_channel();
        let permits = Arc::new(Semaphore::new(settings.max_in_flight));
        let hosts = hosts::Hosts::new(
            settings.max_per_host.max(1),
            // Waiting keys hold no permit; this bounds their memory.
            settings.max_in_flight.saturating_mul(4),
            permits.clone(),
            queue.clone(),
            index.clone(),
            clock.clone(),
        );
        let cancels = cancel::Cancels::start(occurrences.clone());
        let inner = Arc::new(Inner {
            timers,
            occurrences,
            index,
            clock,
            targets,
            settings,
            done,
            tracker: TaskTracker::new(),
            hosts,
            cancels,
        });
        tokio::spawn(claim_loop(inner.clone(), jobs));
        tokio::spawn(outcome_loop(inner.clone(), outcomes, permits.clone()));
        Arc::new(Self {
            inner,
            permits,
            queue,
            stopping: AtomicBool::new(false),
        })
    }

    /// Takes as many of `keys` as there is room for, from the front.
    pub fn offer(&self, keys: &[TaskKey]) -> Result<Offered, Stopping> {
        self.offer_in(keys, tracing::Span::current())
    }

    /// [`Executor::offer`] for keys a traced hand-off brought: their claim and callbacks
    /// are spans under `span`.
    pub fn offer_in(&self, keys: &[TaskKey], span: tracing::Span) -> Result<Offered, Stopping> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(Stopping);
        }
        let mut accepted = 0;
        for key in keys {
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                break;
            };
            let job = Job {
                key: *key,
                permit,
                span: span.clone(),
            };
            if self.queue.send(job).is_err() {
                break;
            }
            accepted += 1;
        }
        metrics::counter!("chime_executor_accepted_total").increment(accepted as u64);
        metrics::gauge!("chime_executor_in_flight").set(self.in_flight() as f64);
        if accepted < keys.len() {
            metrics::counter!("chime_executor_rejected_full_total")
                .increment((keys.len() - accepted) as u64);
        }
        Ok(Offered {
            accepted,
            available: self.permits.available_permits(),
        })
    }

    /// Keys accepted and not finished yet.
    pub fn in_flight(&self) -> usize {
        self.inner.settings.max_in_flight - self.permits.available_permits()
    }

    /// Stops taking work and waits up to `grace` for every accepted key to be fired and its
    /// outcome written. Returns how many were still unfinished when the grace ran out (those
    /// stay claimed or pending in the database, for the sweeper).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.stopping.store(true, Ordering::Release);
        let all = u32::try_from(self.inner.settings.max_in_flight).unwrap_or(u32::MAX);
        match tokio::time::timeout(grace, self.permits.acquire_many(all)).await {
            Ok(_) => 0,
            Err(_) => self.in_flight(),
        }
    }
}

/// Claims queued keys a batch at a time: whatever queued up while the previous round trip
/// ran forms the next batch, so batching adds no wait of its own.
async fn claim_loop(inner: Arc<Inner>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut batch = Vec::with_capacity(inner.settings.batch);
    while jobs.recv_many(&mut batch, inner.settings.batch).await > 0 {
        let mut pending = std::mem::take(&mut batch);
        let mut backoff = Backoff::new();
        let claimed = loop {
            match inner.clone().claim_and_fire(&mut pending).await {
                Err(e) if e.is_retryable() => backoff.pause("claim", &e).await,
                done => break done,
            }
        };
        if let Err(e) = claimed {
            // Left pending in the database: the sweeper hands them out again.
            tracing::error!(error = %e, keys = pending.len(), "claim failed; dropping batch");
        }
    }
}

/// The wait between retries while the database is away: 50 ms, doubling up to 2 s. The
/// permits held meanwhile keep this executor "full", so schedulers take their work
/// elsewhere and nothing is lost.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(Duration::from_millis(50))
    }

    async fn pause(&mut self, what: &str, error: &chime_storage::StoreError) {
        tracing::warn!(%error, "{what} failed; retrying");
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
    }
}

impl Inner {
    /// Claims `jobs` and starts their callbacks. On error `jobs` is left untouched.
    async fn claim_and_fire(self: Arc<Self>, jobs: &mut Vec<Job>) -> StoreResult<()> {
        let mut ids: Vec<_> = jobs.iter().map(|j| j.key.timer_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let timers: HashMap<_, Arc<Timer>> = self
            .timers
            .get_timers(&ids)
            .await?
            .into_iter()
            .map(|t| (t.id, Arc::new(t)))
            .collect();
        let longest = timers
            .values()
            .map(|t| t.spec.callback.timeout.get())
            .max()
            .unwrap_or_default();
        let now = self.clock.now();
        let claim = Claim {
            now,
            lease_until: now.saturating_add(longest + self.settings.lease_margin),
        };
        // A key over its host's cap is not claimed now: it waits for the host, or is
        // handed back for later.
        let mut slots: HashMap<TaskKey, hosts::HostSlot> = HashMap::new();
        let mut deferred = Vec::new();
        jobs.retain(|job| {
            let Some(timer) = timers.get(&job.key.timer_id) else {
                return true;
            };
            match self
                .hosts
                .admit(&hosts::host_of(timer), job.key, timer.bucket, &job.span)
            {
                hosts::Admission::Run(slot) => {
                    slots.insert(job.key, slot);
                    true
                }
                hosts::Admission::Queued => false,
                hosts::Admission::Defer => {
                    deferred.push((job.key, timer.bucket));
                    false
                }
            }
        });
        self.hosts.defer(deferred);
        // Timers with an overlap policy (`skip`, `buffer_one`) are claimed one at a time,
        // each beside no other of its occurrences in flight; the rest in one statement.
        let (exclusive, keys): (Vec<TaskKey>, Vec<TaskKey>) =
            jobs.iter().map(|j| j.key).partition(|k| {
                timers
                    .get(&k.timer_id)
                    .is_some_and(|t| !t.spec.overlap.is_allow_all())
            });
        let claiming = match jobs.first() {
            Some(j) => tracing::info_span!(parent: &j.span, "claim", keys = keys.len()),
            None => tracing::Span::none(),
        };
        let claimed = self
            .occurrences
            .claim(&keys, claim)
            .instrument(claiming)
            .await?;
        let mut claimed: HashMap<TaskKey, ClaimedOccurrence> =
            claimed.into_iter().map(|c| (c.key, c)).collect();
        // The batch leaves backfilled occurrences under `skip` or `buffer_one` alone; a key
        // it did not claim may be one (else it is taken or finished: rare, and cheap to ask).
        let unclaimed: Vec<TaskKey> = keys
            .iter()
            .filter(|k| !claimed.contains_key(k))
            .copied()
            .collect();
        let mut waiting = Vec::new();
        for key in exclusive.into_iter().chain(unclaimed) {
            let Some(timer) = timers.get(&key.timer_id) else {
                continue;
            };
            match self
                .occurrences
                .claim_exclusive(key, claim, timer.spec.overlap)
                .await?
            {
                Exclusive::Claimed(c) => {
                    claimed.insert(key, c);
                }
                Exclusive::Skipped { beside } => {
                    tracing::debug!(task = %key, beside = %beside, "skipped: overlap");
                    metrics::counter!("chime_executor_overlap_skipped_total").increment(1);
                }
                // `buffer_one`: offered again shortly, until the one in flight has ended.
                Exclusive::Waiting { beside } => {
                    tracing::debug!(task = %key, beside = %beside, "waiting: overlap");
                    metrics::counter!("chime_executor_overlap_waiting_total").increment(1);
                    waiting.push((key, timer.bucket));
                }
                Exclusive::NotClaimable => {}
            }
        }
        self.hosts.offer_later(waiting);
        for job in jobs.drain(..) {
            // `remove`: a key offered twice (two hand-offs of it in one batch) fires once.
            let Some(occurrence) = claimed.remove(&job.key) else {
                // Taken by another executor, finished already, or gone: nothing to do.
                metrics::counter!("chime_executor_not_claimed_total").increment(1);
                continue;
            };
            let timer = timers.get(&job.key.timer_id);
            if let Some(reason) = skip_reason(timer.map(Arc::as_ref), &occurrence, now) {
                metrics::counter!("chime_executor_skipped_total").increment(1);
                let outcome = Outcome::ended(
                    job.key,
                    occurrence.attempt,
                    OccurrenceStatus::Skipped,
                    None,
                    Some(reason),
                );
                let _ = self.done.send(Done {
                    completes: completes(timer.map(Arc::as_ref), &outcome),
                    offset_ms: 0,
                    outcome,
                    bucket: occurrence.bucket,
                    permit: job.permit,
                });
                continue;
            }
            let Some(timer) = timer.cloned() else {
                continue;
            };
            let mut slot = slots.remove(&job.key);
            let inner = self.clone();
            let span = tracing::info_span!(
                parent: &job.span,
                "callback",
                task = %job.key,
                attempt = occurrence.attempt,
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty,
            );
            chime_runtime::record_ids(&span);
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
                drop(watch);
                // The host's next waiting key may go.
                drop(slot);
                tracing::debug!(status = outcome.status.as_str(), "callback done");
                let _ = inner.done.send(Done {
                    completes: completes(Some(&timer), &outcome),
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
        Ok(())
    }
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

/// Writes outcomes a batch at a time; each key's permit is freed once its outcome is stored.
async fn outcome_loop(
    inner: Arc<Inner>,
    mut done: mpsc::UnboundedReceiver<Done>,
    permits: Arc<Semaphore>,
) {
    let mut batch = Vec::with_capacity(inner.settings.batch);
    while done.recv_many(&mut batch, inner.settings.batch).await > 0 {
        // The permits are dropped at the end of this iteration, once the outcomes are stored.
        let finished: Vec<TimerId> = batch
            .iter()
            .filter(|d| d.completes)
            .map(|d| d.outcome.key.timer_id)
            .collect();
        let offsets: Vec<i64> = batch.iter().map(|d| d.offset_ms).collect();
        let (outcomes, held): (Vec<Outcome>, Vec<(Bucket, OwnedSemaphorePermit)>) = batch
            .drain(..)
            .map(|d| (d.outcome, (d.bucket, d.permit)))
            .unzip();
        let mut backoff = Backoff::new();
        let recorded = loop {
            match inner.occurrences.record_outcomes(&outcomes).await {
                Err(e) if e.is_retryable() => backoff.pause("recording outcomes", &e).await,
                done => break done,
            }
        };
        if let Err(e) = recorded {
            tracing::error!(error = %e, outcomes = outcomes.len(), "cannot record outcomes; dropping them");
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
            if let Err(e) = index.add(&retries).await {
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
        for (o, offset) in outcomes.iter().zip(offsets) {
            metrics::counter!("chime_executor_outcomes_total", "status" => o.status.as_str())
                .increment(1);
            if let Some(late) = o.lateness_ms().map(|l| l - offset) {
                metrics::histogram!("chime_executor_lateness_seconds").record(late as f64 / 1000.0);
            }
        }
        drop(held);
        let in_flight = inner.settings.max_in_flight - permits.available_permits();
        metrics::gauge!("chime_executor_in_flight").set(in_flight as f64);
    }
}
