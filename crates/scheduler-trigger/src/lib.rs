//! chime-scheduler (scheduler-trigger): fires each occurrence at its due millisecond.
//!
//! Replicas split the buckets among the live members of their group (`ownership.rs`).
//! Every `tick` (1 s), and whenever the members change, a replica leases the shards
//! (minute × bucket) of its own buckets for the previous, the current and, close to a
//! minute's end, the next minute, and lets go of shards whose bucket went to a peer. The
//! holder of a shard renews its short lease while it works, reads the members due within the
//! look-ahead, sleeps until each one's due instant, hands the due keys to executors in
//! batches and removes what they accepted. A replica that dies stops heartbeating; its peers
//! take its buckets and its leases as soon as its membership lapses. A shard missing from
//! Redis (lost data) is read from the database instead.

mod catalog;
mod dispatch;
pub mod handoff;
mod lag;
mod ownership;
mod shard;
mod stale;
mod sweeper;
mod unwritten;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chime_domain::{BucketCount, Clock, ShardKey, Ticker, Timestamp};
use chime_runtime::Roster;
use chime_storage::{HotIndex, HotWrites, LeaseToken, Leases, OccurrenceStore, TimerStore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use catalog::METRICS;
pub use handoff::{Endpoints, EndpointsError, GrpcExecutors, Handoff};
pub use ownership::GROUP;
use shard::ShardReader;
pub use sweeper::Swept;

#[derive(Debug, Clone, Copy)]
pub struct SchedulerSettings {
    pub buckets: BucketCount,
    /// A shard lease's life without renewal: how soon a dead holder's shard moves on.
    pub lease_ttl: Duration,
    /// How far ahead of due members are read, at most (a round reads `poll +
    /// dispatch_ahead`), and how far ahead of the next minute its shards are leased.
    pub lookahead: Duration,
    /// How far ahead of due members are handed off. Executors claim at once and call back
    /// at the due instant, so claim round trips add no lateness.
    pub dispatch_ahead: Duration,
    /// The least time between two hand-offs of one shard (at most half `dispatch_ahead`):
    /// keys due close together travel in one hand-off, handed off between
    /// `dispatch_ahead - handoff_every` and `dispatch_ahead` before due. Without it, keys
    /// spread over the second went one hand-off (one gRPC call, one Redis removal, one claim
    /// statement) per due millisecond.
    pub handoff_every: Duration,
    /// How often a held shard is re-read for members added meanwhile.
    pub poll: Duration,
    /// How soon keys executors refused are offered again, doubled per hand-off in a row
    /// refused outright, up to `poll`. Executors free room as fast as they record outcomes:
    /// a whole `poll` of waiting left them idle mid-burst.
    pub refused_retry: Duration,
    /// How often free shards are looked for.
    pub tick: Duration,
    /// Members read per poll.
    pub read_limit: usize,
    /// Keys per hand-off.
    pub batch: usize,
    /// How often the sweeper looks for occurrences the hot path missed.
    pub sweep_interval: Duration,
    /// How overdue a pending occurrence must be before the sweeper takes it.
    pub sweep_after: Duration,
    /// Occurrences overdue by more than this (after an outage) fall under their timer's
    /// misfire policy instead of firing as usual.
    pub misfire_threshold: Duration,
}

impl SchedulerSettings {
    /// The `[scheduler]` section and `buckets` of the config.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        let c = &config.scheduler;
        Self {
            sweep_interval: c.sweep_interval.get(),
            sweep_after: c.sweep_after.get(),
            misfire_threshold: c.misfire_threshold.get(),
            dispatch_ahead: c.dispatch_ahead.get().min(c.lookahead.get()),
            ..Self::new(config.buckets, c.lease_ttl.get(), c.lookahead.get())
        }
    }

    pub fn new(buckets: BucketCount, lease_ttl: Duration, lookahead: Duration) -> Self {
        Self {
            buckets,
            lease_ttl,
            lookahead,
            dispatch_ahead: Duration::from_millis(100),
            handoff_every: Duration::from_millis(25),
            poll: Duration::from_millis(200),
            refused_retry: Duration::from_millis(20),
            tick: Duration::from_secs(1),
            read_limit: 2_000,
            batch: 500,
            sweep_interval: Duration::from_secs(1),
            sweep_after: Duration::from_secs(2),
            misfire_threshold: Duration::from_secs(10),
        }
    }
}

pub struct Scheduler {
    timers: Arc<dyn TimerStore>,
    index: HotWrites,
    leases: Arc<dyn Leases>,
    occurrences: Arc<dyn OccurrenceStore>,
    handoff: Arc<dyn Handoff>,
    clock: Arc<dyn Clock>,
    settings: SchedulerSettings,
    token: LeaseToken,
    /// The replica's group; without one it works every bucket (one replica, `chime dev`).
    roster: OnceLock<Arc<Roster>>,
    /// The shards held at the last tick, for the ownership view.
    held_now: Mutex<Vec<ShardKey>>,
    lag: lag::Lag,
    /// Timers read to skip lagging shards' stale runs.
    stale: stale::TimerCache,
}

/// A shard worker and how to stop it when its bucket goes to a peer.
struct Held {
    /// Tells this worker's end from a later one's on the same shard.
    id: u64,
    worker: JoinHandle<bool>,
    stop: CancellationToken,
}

/// The shard workers a replica runs, and the shards whose minute it finished.
struct Workers {
    held: HashMap<ShardKey, Held>,
    finished: HashSet<ShardKey>,
    /// Numbers each worker started, so a late word of an older one is told apart.
    generation: u64,
    /// Where each worker says it ended: its number, its shard, and whether it finished.
    ended: tokio::sync::mpsc::UnboundedSender<(u64, ShardKey, bool)>,
    stop: CancellationToken,
}

impl Workers {
    fn new(
        ended: tokio::sync::mpsc::UnboundedSender<(u64, ShardKey, bool)>,
        stop: CancellationToken,
    ) -> Self {
        Self {
            held: HashMap::new(),
            finished: HashSet::new(),
            generation: 0,
            ended,
            stop,
        }
    }

    /// A worker said it ended: forgotten if it is still the one held for its shard.
    fn ended(&mut self, id: u64, shard: ShardKey, done: bool) {
        if self.held.get(&shard).is_some_and(|h| h.id == id) {
            self.held.remove(&shard);
            if done {
                self.finished.insert(shard);
            }
        }
    }

    /// Forgets workers that ended, and finished shards a minute past their own.
    async fn reap(&mut self, now: Timestamp) {
        let ended: Vec<ShardKey> = self
            .held
            .iter()
            .filter(|(_, h)| h.worker.is_finished())
            .map(|(s, _)| *s)
            .collect();
        for shard in ended {
            if let Some(h) = self.held.remove(&shard)
                && h.worker.await.unwrap_or(false)
            {
                self.finished.insert(shard);
            }
        }
        self.finished
            .retain(|s| s.minute_end().add_millis(60_000) > now);
    }

    /// Stops the workers of buckets this replica no longer owns: each releases its lease,
    /// and the new owner takes it then.
    fn release_unowned(&self, view: &chime_domain::Ownership) {
        for (shard, h) in &self.held {
            if !view.owns(shard.bucket) {
                h.stop.cancel();
            }
        }
    }

    /// Starts a worker on a leased shard.
    fn start(&mut self, scheduler: Arc<Scheduler>, shard: ShardKey) {
        let stop = self.stop.child_token();
        let worker_stop = stop.clone();
        let ended = self.ended.clone();
        self.generation += 1;
        let id = self.generation;
        let worker = tokio::spawn(async move {
            let finished = scheduler.work(shard, worker_stop).await;
            let _ = ended.send((id, shard, finished));
            finished
        });
        self.held.insert(shard, Held { id, worker, stop });
    }
}

/// Whether a shard lease is still this replica's.
enum LeaseState {
    Held,
    /// Another replica holds it now.
    Lost,
    /// It could not be renewed (Redis unreachable); stop working the shard.
    Unknown,
}

fn lease_name(shard: ShardKey) -> String {
    format!("shard:{shard}")
}

impl Scheduler {
    pub fn new(
        timers: Arc<dyn TimerStore>,
        index: Arc<dyn HotIndex>,
        leases: Arc<dyn Leases>,
        occurrences: Arc<dyn OccurrenceStore>,
        handoff: Arc<dyn Handoff>,
        clock: Arc<dyn Clock>,
        settings: SchedulerSettings,
    ) -> Arc<Self> {
        // Twice a shard's batch: the shards of one tick share a call, a burst's full
        // batches still go two at a time.
        let handoff = Arc::new(handoff::Merged::new(handoff, settings.batch * 2));
        Arc::new(Self {
            timers,
            index: HotWrites::new(index),
            leases,
            occurrences,
            handoff,
            clock,
            settings,
            token: LeaseToken::random(),
            roster: OnceLock::new(),
            held_now: Mutex::new(Vec::new()),
            lag: lag::Lag::default(),
            stale: stale::TimerCache::default(),
        })
    }

    /// How late the oldest due key of this replica's shards that it has not handed off yet
    /// is, as of their last reads (`chime_scheduler_lag_seconds`).
    pub fn lag(&self) -> Duration {
        self.lag.at(self.clock.now())
    }

    /// This replica's lease token, which is also its member id.
    pub fn token(&self) -> &LeaseToken {
        &self.token
    }

    /// The shards worth holding at `now`.
    fn shards_at(&self, now: Timestamp) -> Vec<ShardKey> {
        let mut minutes = vec![now.add_millis(-60_000), now];
        let minute_end = (now.as_millis().div_euclid(60_000) + 1) * 60_000;
        let ahead = now.saturating_add(self.settings.lookahead + self.settings.tick);
        if ahead.as_millis() >= minute_end {
            minutes.push(ahead);
        }
        minutes
            .into_iter()
            .flat_map(|m| {
                self.settings
                    .buckets
                    .all()
                    .map(move |b| ShardKey::new(m, b))
            })
            .collect()
    }

    /// Leases and works shards until `shutdown`; then stops its workers (each releases its
    /// lease) within `grace`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, grace: Duration) {
        let workers_stop = shutdown.child_token();
        // The group is left at shutdown, before the workers release their leases, so peers
        // own the buckets by the time the leases are free.
        if let Some(r) = self.roster() {
            // The first leases are taken knowing the group.
            r.beat().await;
        }
        let heartbeats = self.roster().map(|r| tokio::spawn(r.run(shutdown.clone())));
        let mut changes = self.roster().map(|r| r.subscribe());
        let sweeper = tokio::spawn(self.clone().sweep_loop(workers_stop.clone()));
        let mut tick = Ticker::new(self.clock.clone(), self.settings.tick);
        // A worker that ended (its lease lost to a peer with a stale view of the group, or
        // its minute done) wakes the loop at once: waiting for the tick left a lost shard
        // unworked for up to a second, and its keys that late. Each says which it was.
        let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut workers = Workers::new(ended_tx, workers_stop.clone());
        // Shards of this replica's buckets it could not lease yet (a peer handing them over
        // still holds them): tried again after a poll rather than a whole tick.
        let mut waiting = false;
        loop {
            let retry = self.settings.poll;
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                () = ownership::changed(&mut changes) => {}
                () = self.clock.sleep(retry), if waiting => {}
                Some((id, shard, done)) = ended_rx.recv() => workers.ended(id, shard, done),
            }
            let now = self.clock.now();
            workers.reap(now).await;
            let view = self.ownership_now();
            workers.release_unowned(&view);
            waiting = self.lease_shards(&mut workers, now, &view).await;
            self.publish(&view, &workers.held);
        }
        workers_stop.cancel();
        let _ = sweeper.await;
        if let Some(h) = heartbeats {
            let _ = h.await;
        }
        let all = futures::future::join_all(workers.held.into_values().map(|h| h.worker));
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("shard workers did not stop within the grace period");
        }
        tracing::info!("scheduler stopped");
    }

    /// Leases the shards due now in this replica's buckets that no worker holds and starts a
    /// worker for each. `true` when one is still held by a peer (try again after a poll).
    async fn lease_shards(
        self: &Arc<Self>,
        workers: &mut Workers,
        now: Timestamp,
        view: &chime_domain::Ownership,
    ) -> bool {
        let mut waiting = false;
        for shard in self.shards_at(now) {
            if workers.held.contains_key(&shard)
                || workers.finished.contains(&shard)
                || !view.owns(shard.bucket)
            {
                continue;
            }
            match self.take_lease(&lease_name(shard), view).await {
                Ok(true) => workers.start(self.clone(), shard),
                Ok(false) => waiting = true,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot lease shards");
                    break;
                }
            }
        }
        waiting
    }

    /// Works one leased shard: keep the lease, read what is due soon, hand it off at its
    /// instant, poll again. Returns `true` when the shard is finished (its minute is over
    /// and nothing is left), `false` when it stopped for another reason.
    async fn work(self: Arc<Self>, shard: ShardKey, stop: CancellationToken) -> bool {
        let name = lease_name(shard);
        let s = self.settings;
        let renew_every = s.lease_ttl / 3;
        let mut renew_at = self.clock.now().saturating_add(renew_every);
        let mut reader = ShardReader::new(
            shard,
            self.index.clone(),
            self.occurrences.clone(),
            self.timers.clone(),
            self.clock.clone(),
            s.read_limit,
            s.dispatch_ahead,
        );
        let mut offers = dispatch::Offers::new(s.batch);
        let mut stale = stale::Stale::default();
        tracing::debug!(%shard, "working shard");
        let finished = loop {
            if stop.is_cancelled() {
                break false;
            }
            let now = self.clock.now();
            match self
                .keep_lease(shard, &name, &mut renew_at, renew_every, now)
                .await
            {
                LeaseState::Held => {}
                LeaseState::Lost => {
                    self.lag.forget(shard);
                    return false;
                }
                LeaseState::Unknown => break false,
            }
            if now > shard.minute_end().add_millis(120_000) {
                // Out of every replica's window: what is left is the sweeper's.
                break true;
            }
            // Only what this round can hand off: read further ahead, each member would be
            // read again at every poll until its turn.
            let window = (s.poll + s.dispatch_ahead).min(s.lookahead);
            let (due, full_read) = match reader.read(now.saturating_add(window)).await {
                Ok(mut due) => {
                    self.lag.note(shard, due.first().map(|(_, at)| *at));
                    // A full read stays one though stale runs left it, unless some are
                    // held for a look still under way: then the shard waits for a poll.
                    let full = due.len() >= s.read_limit;
                    let held = self
                        .hold_stale(shard, &mut due, &mut reader, &mut stale)
                        .await;
                    (due, full && held == 0)
                }
                Err(e) => {
                    tracing::warn!(%shard, error = %e, "cannot read shard");
                    self.pause_until(now.saturating_add(s.poll), &stop).await;
                    continue;
                }
            };
            if due.is_empty() && stale.idle() && now >= shard.minute_end() {
                break true;
            }
            let poll_until = now.saturating_add(s.poll);
            let round = self
                .dispatch(shard, &due, poll_until, &mut reader, &mut offers, &stop)
                .await;
            // After a refusal the shard is read again at once: the refused went back into it.
            // After a full read that was all handed off, too: more may be waiting.
            if !round.refused && (!full_read || !round.drained) {
                self.pause_until(poll_until, &stop).await;
            }
        };
        self.lag.forget(shard);
        if let Err(e) = self.leases.release(&name, &self.token).await {
            tracing::debug!(%shard, error = %e, "cannot release shard lease; it will lapse");
        }
        finished
    }

    /// Renews the shard lease when a third of its time has passed.
    async fn keep_lease(
        &self,
        shard: ShardKey,
        name: &str,
        renew_at: &mut Timestamp,
        every: Duration,
        now: Timestamp,
    ) -> LeaseState {
        if now < *renew_at {
            return LeaseState::Held;
        }
        match self
            .leases
            .renew(name, &self.token, self.settings.lease_ttl)
            .await
        {
            Ok(true) => {
                *renew_at = now.saturating_add(every);
                LeaseState::Held
            }
            Ok(false) => {
                tracing::warn!(%shard, "shard lease lost");
                LeaseState::Lost
            }
            Err(e) => {
                tracing::warn!(%shard, error = %e, "cannot renew shard lease");
                LeaseState::Unknown
            }
        }
    }

    /// Sleeps until `at` by the injected clock, to the millisecond. `false` if stopped first.
    async fn pause_until(&self, at: Timestamp, stop: &CancellationToken) -> bool {
        if at <= self.clock.now() {
            return !stop.is_cancelled();
        }
        tokio::select! {
            () = stop.cancelled() => false,
            () = self.clock.sleep_until(at) => true,
        }
    }
}
