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
//! waiting for every permit to come back. A backlog may hold a quarter of them, and so may
//! the keys due at any one instant (a burst); the rest are kept for keys on time (`lanes`).
//! Keys on time and a backlog's are claimed by a loop each, so neither waits for the
//! other's round trips.

mod activity;
mod cancel;
mod catalog;
mod chain;
mod claim;
mod fire;
pub mod grpc;
mod hosts;
mod lanes;
mod leased;
pub mod notify;
mod outcome;
mod record;
pub mod targets;
mod timers;
mod unwritten;
pub mod workers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chime_domain::{Bucket, Clock, Outcome, TaskKey};
use chime_storage::{Activity, HotIndex, HotWrites, OccurrenceStore, RunLeases, TimerStore};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use catalog::METRICS;
pub use lanes::BACKLOG_SHARE;
pub use outcome::settle;
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
    /// Written runs' first attempts taken under run leases ([`leased`]) where leases live
    /// apart from the database.
    pub leased_first_attempts: bool,
}

/// What a claim must leave before the earliest key of its batch is due: its round trip and
/// the callback's start.
pub const CLAIM_MARGIN: Duration = Duration::from_millis(40);

/// Keys claimed, and outcomes written, per statement at most.
const BATCH: usize = 512;

/// The config's defaults: one place states them, so `chime dev`, the tests and the services
/// cannot drift apart.
impl Default for ExecutorSettings {
    fn default() -> Self {
        Self::from_config(&chime_runtime::Config::default())
    }
}

impl ExecutorSettings {
    /// The `[executor]` section of the config.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        Self {
            max_in_flight: config.executor.max_in_flight,
            batch: BATCH,
            lease_margin: config.executor.claim_lease_margin.get(),
            max_per_host: config.executor.max_per_host,
            claim_linger: config.executor.claim_linger.get(),
            outcome_linger: config.executor.outcome_linger.get(),
            timer_cache: config.executor.timer_cache,
            leased_first_attempts: config.executor.leased_first_attempts,
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
    permit: lanes::Permit,
    /// The hand-off that brought it: its callback's span is a child of it.
    span: tracing::Span,
    /// Not part of a backlog: claimed, and waiting for its host, ahead of those that are.
    on_time: bool,
    /// Its timer, when a claim read it before the key waited for its host.
    timer: Option<Arc<chime_domain::Timer>>,
}

struct Done {
    outcome: Outcome,
    /// The timer's last occurrence ended and the timer deletes itself when done.
    completes: bool,
    /// The timer whose attempt it was, for the activity tallies (its app) and failure
    /// notifications (`None`: nothing was attempted).
    timer: Option<Arc<chime_domain::Timer>>,
    /// How far its due instant lies after its run time by design (the timer's flexible
    /// window, a backfill's pace): not lateness.
    offset_ms: i64,
    /// Where a retry is indexed.
    bucket: Bucket,
    permit: lanes::Permit,
}

struct Inner {
    timers: Arc<dyn TimerStore>,
    occurrences: Arc<dyn OccurrenceStore>,
    /// Where retries are scheduled; without one, the sweeper finds them when due.
    index: Option<HotWrites>,
    /// The leases unwritten runs are taken under, beside the hot index; without them such
    /// runs are claimed as rows, which they do not have, and left to the sweeper.
    run_leases: Option<Arc<dyn RunLeases>>,
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
    /// Told of the runs that ended, when failure notifications are sent from here.
    notifier: std::sync::OnceLock<Arc<notify::Notifier>>,
    /// Where chain steps are started, when this executor starts them.
    chains: std::sync::OnceLock<Arc<dyn chime_storage::Chains>>,
}

pub struct Executor {
    inner: Arc<Inner>,
    permits: Arc<lanes::Permits>,
    lanes: lanes::Lanes,
    stopping: AtomicBool,
    /// Stops the activity tallies' writer.
    stop_activity: CancellationToken,
    /// The activity tallies' writer, whose last write the drain waits for.
    activity_writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
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
        let index = index.map(HotWrites::new);
        let stop_activity = CancellationToken::new();
        let mut activity_writer = None;
        let activity = activity.map(|store| {
            let log = activity::ActivityLog::new(store, clock.clone());
            activity_writer = Some(tokio::spawn(log.clone().run(stop_activity.clone())));
            log
        });
        let (backlog, jobs) = mpsc::unbounded_channel();
        let (on_time, on_time_jobs) = mpsc::unbounded_channel();
        let lanes = lanes::Lanes { on_time, backlog };
        let (done, outcomes) = mpsc::unbounded_channel();
        let permits = lanes::Permits::new(settings.max_in_flight);
        let hosts = hosts::Hosts::new(
            settings.max_per_host.max(1),
            // Waiting keys hold no permit; this bounds their memory.
            settings.max_in_flight.saturating_mul(4),
            permits.clone(),
            lanes.clone(),
            index.clone(),
            clock.clone(),
        );
        let cancels = cancel::Cancels::start(occurrences.clone());
        let settings_cache = settings.timer_cache;
        let inner = Arc::new(Inner {
            timers,
            occurrences,
            run_leases: index.as_ref().and_then(|i| i.reads().run_leases()),
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
            notifier: std::sync::OnceLock::new(),
            chains: std::sync::OnceLock::new(),
        });
        tokio::spawn(claim::claim_loop(inner.clone(), on_time_jobs));
        tokio::spawn(claim::claim_loop(inner.clone(), jobs));
        tokio::spawn(record::outcome_loop(
            inner.clone(),
            outcomes,
            permits.clone(),
        ));
        Arc::new(Self {
            inner,
            permits,
            lanes,
            stopping: AtomicBool::new(false),
            stop_activity,
            activity_writer: std::sync::Mutex::new(activity_writer),
        })
    }

    /// Tells `notifier` of every run that ends from now on (failure notifications).
    pub fn notify_with(&self, notifier: Arc<notify::Notifier>) {
        let _ = self.inner.notifier.set(notifier);
    }

    /// Starts the chain steps (`then`) of every run that ends from now on, in `store`.
    pub fn chain_with(&self, store: Arc<dyn chime_storage::Chains>) {
        let _ = self.inner.chains.set(store);
    }

    /// Takes as many of `keys` as there is room for, from the front.
    pub fn offer(&self, keys: &[TaskKey]) -> Result<Offered, Stopping> {
        self.offer_in(keys, None, tracing::Span::current())
    }

    /// [`Executor::offer`] of keys whose first `on_time` are on time and the rest a backlog,
    /// as a scheduler tells them apart ([`chime_domain::Backlog`]).
    pub fn offer_ordered(&self, keys: &[TaskKey], on_time: usize) -> Result<Offered, Stopping> {
        self.offer_in(keys, Some(on_time), tracing::Span::current())
    }

    /// [`Executor::offer`] for keys a traced hand-off brought: their claim and callbacks
    /// are spans under `span`. `on_time`: how many from the front are on time, when the
    /// hand-off says; otherwise each key's run time tells.
    pub fn offer_in(
        &self,
        keys: &[TaskKey],
        on_time: Option<usize>,
        span: tracing::Span,
    ) -> Result<Offered, Stopping> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(Stopping);
        }
        let mut accepted = 0;
        let now = self.inner.clock.now();
        for (i, key) in keys.iter().enumerate() {
            // A retry or a backfill is due later than its run time, so counts as backlog
            // here; it is claimed behind keys on time, as a backlog's keys are.
            let on_time = match on_time {
                Some(n) => i < n,
                None => !chime_domain::in_backlog(key.run_at, now),
            };
            let Some(permit) = self.permits.try_take(on_time, key.run_at, now) else {
                break;
            };
            let job = Job {
                key: *key,
                permit,
                span: span.clone(),
                on_time,
                timer: None,
            };
            if self.lanes.send(job, on_time).is_err() {
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
            available: self.permits.available(),
        })
    }

    /// Keys accepted and not finished yet.
    pub fn in_flight(&self) -> usize {
        self.permits.in_flight()
    }

    /// Stops taking work and waits up to `grace` for every accepted key to be fired and its
    /// outcome written. Returns how many were still unfinished when the grace ran out (those
    /// stay claimed or pending in the database, for the sweeper).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.stopping.store(true, Ordering::Release);
        let left = if self.permits.all_back(grace).await {
            0
        } else {
            self.in_flight()
        };
        // The writer writes once more when stopped. Waited for rather than written beside:
        // two writes at once each hold a transaction on the same rows, and the one left
        // unfinished when the caller's runtime stopped kept its lock (a test's cleanup then
        // waited on it for ever).
        self.stop_activity.cancel();
        let writer = self
            .activity_writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(writer) = writer
            && tokio::time::timeout(grace.max(Duration::from_secs(1)), writer)
                .await
                .is_err()
        {
            tracing::warn!("activity tallies not written within the grace period");
        }
        left
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
