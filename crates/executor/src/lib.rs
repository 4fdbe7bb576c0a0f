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

mod activity;
mod cancel;
mod catalog;
pub mod grpc;
mod hosts;
mod outcome;
mod record;
pub mod targets;
mod timers;
pub mod workers;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, Clock, OccurrenceStatus, Outcome, OverlapPolicy, TaskKey,
    Timer,
};
use chime_storage::{Activity, Exclusive, HotIndex, OccurrenceStore, StoreResult, TimerStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use catalog::METRICS;
pub use outcome::settle;
use outcome::{completes, skip_reason};
pub use targets::{
    AmqpTarget, Attempt, CallbackSettings, DeliveryTarget, HostLookup, HttpTarget, NatsTarget,
    Signer, SystemLookup, Targets, WorkerTarget,
};
pub use workers::Workers;

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
    /// How long keys handed off well ahead of their due time wait for more to join their
    /// claim. At a steady rate hand-offs come every millisecond or two with a few keys
    /// each, and a claim round's fixed cost (two statements) was most of the database's
    /// work per firing. Only keys due later than this plus [`CLAIM_MARGIN`] wait.
    pub claim_linger: Duration,
    /// How long a batch of outcomes waits for more before it is written (the same fixed
    /// cost per statement). Their keys' slots stay taken meanwhile.
    pub outcome_linger: Duration,
    /// Timers kept between claims ([`timers::TimerCache`]); 0 keeps none.
    pub timer_cache: usize,
}

/// What a claim must leave before the earliest key of its batch is due: its round trip and
/// the callback's start.
pub const CLAIM_MARGIN: Duration = Duration::from_millis(40);

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            batch: 512,
            lease_margin: Duration::from_secs(5),
            max_per_host: 256,
            claim_linger: Duration::from_millis(20),
            outcome_linger: Duration::from_millis(10),
            timer_cache: 16_384,
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
            claim_linger: config.executor.claim_linger.get(),
            outcome_linger: config.executor.outcome_linger.get(),
            timer_cache: config.executor.timer_cache,
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
    /// Whose attempt it was, for the activity tallies (`None`: nothing was attempted).
    app: Option<chime_domain::AppName>,
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
    /// Per app and minute tallies for the console's overview, when kept.
    activity: Option<Arc<activity::ActivityLog>>,
    /// Timers kept between claims.
    cache: timers::TimerCache,
}

pub struct Executor {
    inner: Arc<Inner>,
    permits: Arc<Semaphore>,
    queue: mpsc::UnboundedSender<Job>,
    stopping: AtomicBool,
    /// Stops the activity tallies' writer.
    stop_activity: CancellationToken,
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
        Self::start_with(timers, occurrences, index, None, clock, targets, settings)
    }

    /// [`Executor::start`], also keeping activity tallies in `activity` (services and
    /// `chime dev` do; component tests need not).
    pub fn start_with(
        timers: Arc<dyn TimerStore>,
        occurrences: Arc<dyn OccurrenceStore>,
        index: Option<Arc<dyn HotIndex>>,
        activity: Option<Arc<dyn Activity>>,
        clock: Arc<dyn Clock>,
        targets: Targets,
        settings: ExecutorSettings,
    ) -> Arc<Self> {
        let stop_activity = CancellationToken::new();
        let activity = activity.map(|store| {
            let log = activity::ActivityLog::new(store, clock.clone());
            tokio::spawn(log.clone().run(stop_activity.clone()));
            log
        });
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
        let settings_cache = settings.timer_cache;
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
            activity,
            cache: timers::TimerCache::new(settings_cache),
        });
        tokio::spawn(claim_loop(inner.clone(), jobs));
        tokio::spawn(record::outcome_loop(
            inner.clone(),
            outcomes,
            permits.clone(),
        ));
        Arc::new(Self {
            inner,
            permits,
            queue,
            stopping: AtomicBool::new(false),
            stop_activity,
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
        let left = match tokio::time::timeout(grace, self.permits.acquire_many(all)).await {
            Ok(_) => 0,
            Err(_) => self.in_flight(),
        };
        self.stop_activity.cancel();
        if let Some(log) = &self.inner.activity {
            log.flush().await;
        }
        left
    }
}

/// Claims queued keys a batch at a time: whatever queued up while the previous round trip
/// ran forms the next batch, so batching adds no wait of its own.
async fn claim_loop(inner: Arc<Inner>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut batch = Vec::with_capacity(inner.settings.batch);
    while jobs.recv_many(&mut batch, inner.settings.batch).await > 0 {
        gather(&inner, &mut jobs, &mut batch).await;
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

/// Lets `batch` wait for more keys while its earliest is due later than the linger plus
/// [`CLAIM_MARGIN`]; a key due sooner arriving meanwhile ends the wait. A burst, a retry or
/// a late hand-off is claimed at once.
async fn gather(inner: &Inner, jobs: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>) {
    let linger = inner.settings.claim_linger;
    let now = inner.clock.now();
    let Some(earliest) = batch.iter().map(|j| j.key.run_at).min() else {
        return;
    };
    if linger.is_zero() {
        return;
    }
    let wait = |earliest: chime_domain::Timestamp| {
        let ahead = earliest.as_millis() - now.as_millis();
        let spare = ahead - CLAIM_MARGIN.as_millis() as i64;
        Duration::from_millis(spare.clamp(0, linger.as_millis() as i64) as u64)
    };
    let start = tokio::time::Instant::now();
    let mut until = start + wait(earliest);
    while batch.len() < inner.settings.batch {
        match tokio::time::timeout_at(until, jobs.recv()).await {
            Ok(Some(job)) => {
                // A key due sooner shortens the wait to what it can spare.
                until = until.min(start + wait(job.key.run_at));
                batch.push(job);
            }
            Ok(None) | Err(_) => break,
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
        let (mut timers, missing) = self.cache.lookup(&ids);
        if !missing.is_empty() {
            let read: Vec<Arc<Timer>> = self
                .timers
                .get_timers(&missing)
                .await?
                .into_iter()
                .map(Arc::new)
                .collect();
            let now = self.clock.now();
            self.cache
                .keep(read.iter().filter(|t| timers::fires_soon(t, now)));
            timers.extend(read.into_iter().map(|t| (t.id, t)));
        }
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
        // The batch leaves backfilled occurrences under `skip` or `buffer_one` alone; one
        // statement tells which of the keys it did not claim are those. The rest were taken
        // or finished already: in a burst, the sweeper hands off keys still queued here, and
        // a transaction for each of those stalled this loop (measured: a third of the rate).
        let unclaimed: Vec<TaskKey> = keys
            .iter()
            .filter(|k| !claimed.contains_key(k))
            .copied()
            .collect();
        let held = if unclaimed.is_empty() {
            Vec::new()
        } else {
            self.occurrences.held_for_exclusive(&unclaimed, now).await?
        };
        let mut waiting = Vec::new();
        for key in exclusive.into_iter().chain(held) {
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
        let unreadable = self.refresh_changed(&mut timers, &claimed).await;
        for job in jobs.drain(..) {
            if unreadable.contains(&job.key.timer_id) {
                continue;
            }
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
                    app: None,
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
                    app: Some(timer.spec.app.clone()),
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

impl Inner {
    /// Reads again the timers whose version the claims say changed since they were cached
    /// (or that are gone), so no occurrence fires with an outdated timer. Returns those it
    /// could not read now (the database went away): their claimed runs are left to the
    /// sweeper once their lease runs out.
    async fn refresh_changed(
        &self,
        timers: &mut HashMap<chime_domain::TimerId, Arc<Timer>>,
        claimed: &HashMap<TaskKey, ClaimedOccurrence>,
    ) -> Vec<chime_domain::TimerId> {
        let mut changed: Vec<_> = claimed
            .values()
            .filter(|c| timers.get(&c.key.timer_id).map(|t| t.version) != c.timer_now)
            .map(|c| c.key.timer_id)
            .collect();
        if changed.is_empty() {
            return changed;
        }
        changed.sort_unstable();
        changed.dedup();
        self.cache.forget(&changed);
        for id in &changed {
            timers.remove(id);
        }
        match self.timers.get_timers(&changed).await {
            Ok(read) => {
                let read: Vec<Arc<Timer>> = read.into_iter().map(Arc::new).collect();
                let now = self.clock.now();
                self.cache
                    .keep(read.iter().filter(|t| timers::fires_soon(t, now)));
                timers.extend(read.into_iter().map(|t| (t.id, t)));
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, timers = changed.len(), "cannot read changed timers; their claimed runs wait for the sweeper");
                changed
            }
        }
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
