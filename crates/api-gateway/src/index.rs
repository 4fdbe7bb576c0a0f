//! Adding what a request wrote to the hot index, after its transaction committed. Best
//! effort by design: the rows are durable already, and a member the index lacks is fired by
//! the schedulers' database fallback (shard missing) or the sweeper (shard present), a
//! little late but never lost. So a slow or absent Redis must not slow the API down.
//!
//! Concurrent requests share one write: a single task takes every addition queued while the
//! previous write was in flight and sends them as one pipeline, so Redis sees one command
//! per shard per round instead of three per request. Only requests with occurrences due
//! soon wait for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chime_domain::{Clock, NewOccurrence, Timestamp};
use chime_storage::{HotEntry, HotIndex, HotWrites, StoreError};
use tokio::sync::{mpsc, oneshot};

/// Longest a request waits for the index.
const WRITE_TIMEOUT: Duration = Duration::from_millis(250);
/// After a failed write, requests skip the index this long instead of each waiting for it.
const BACK_OFF: Duration = Duration::from_secs(1);
/// Additions waiting for the writer; beyond this a request skips the index (bounded memory
/// when Redis is slow: its rows still fire through the database).
const QUEUE: usize = 4_096;
/// Most requests one write carries.
const GROUP: usize = 256;
/// A request whose occurrences are all due later than this does not wait for the write:
/// the writer gets to it within milliseconds, long before any scheduler reads that far
/// ahead (`scheduler.lookahead`, 2 s by default), and a lost write fires through the
/// database anyway. Sooner ones wait, so that they are indexed before their shard is read.
const NO_WAIT_BEYOND: Duration = Duration::from_secs(10);

struct Addition {
    entries: Vec<HotEntry>,
    reply: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// What requests and the writer share: the clock and the back-off after a failure.
struct Health {
    clock: Arc<dyn Clock>,
    /// Unix ms until which writes are skipped.
    skip_until: AtomicI64,
}

impl Health {
    fn skipping(&self, now: Timestamp) -> bool {
        now.as_millis() < self.skip_until.load(Ordering::Relaxed)
    }

    /// Counts one failed write (or a wait that timed out) and backs off.
    fn failed(&self, error: &str, occurrences: usize) {
        let until = self.clock.now().saturating_add(BACK_OFF).as_millis();
        self.skip_until.store(until, Ordering::Relaxed);
        metrics::counter!("chime_gateway_index_write_failures_total").increment(1);
        tracing::warn!(
            %error,
            occurrences,
            "hot index unavailable; the occurrences are stored and will fire through the \
             database fallback or the sweeper"
        );
    }
}

pub struct IndexWriter {
    index: Option<HotWrites>,
    health: Arc<Health>,
    /// Started on first use, inside the runtime the requests run on.
    queue: OnceLock<mpsc::Sender<Addition>>,
}

impl IndexWriter {
    /// `None`: no hot index configured; the schedulers read the database.
    pub fn new(index: Option<Arc<dyn HotIndex>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            index: index.map(HotWrites::new),
            health: Arc::new(Health {
                clock,
                skip_until: AtomicI64::new(0),
            }),
            queue: OnceLock::new(),
        }
    }

    /// Whether the index keeps the run leases unwritten runs are taken under.
    pub fn keeps_run_leases(&self) -> bool {
        self.index
            .as_ref()
            .is_some_and(|i| i.reads().run_leases().is_some())
    }

    /// Indexes `written`; never fails the request.
    pub async fn add(&self, written: &[NewOccurrence]) {
        let Some(index) = &self.index else { return };
        if written.is_empty() {
            return;
        }
        let now = self.health.clock.now();
        if self.health.skipping(now) {
            metrics::counter!("chime_gateway_index_writes_skipped_total").increment(1);
            return;
        }
        let soonest = written.iter().map(NewOccurrence::due_at).min();
        let wait = soonest.is_some_and(|due| due <= now.saturating_add(NO_WAIT_BEYOND));
        let entries: Vec<HotEntry> = written
            .iter()
            .map(|o| HotEntry::new(o.key, o.due_at(), o.bucket))
            .collect();
        let count = entries.len();
        let queue = self
            .queue
            .get_or_init(|| start(index.clone(), self.health.clone()));
        let (reply, answer) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if queue.try_send(Addition { entries, reply }).is_err() {
            // The writer is this far behind: Redis is slow, and waiting would only add to it.
            metrics::counter!("chime_gateway_index_writes_skipped_total").increment(1);
            return;
        }
        let Some(answer) = answer else { return };
        // A slow write is not a failed one: it stays queued and completes, so later requests
        // keep queueing theirs (skipping them would leave their members out of shards that
        // exist, to be fired late by the sweeper). A failed write is counted, and backed off
        // from, by the writer; the bounded queue caps what waits behind a slow one.
        if tokio::time::timeout(WRITE_TIMEOUT, answer).await.is_err() {
            tracing::debug!(
                occurrences = count,
                "hot index write slower than {WRITE_TIMEOUT:?}; the request goes on without it"
            );
        }
    }
}

impl IndexWriter {
    /// Takes `entries` out of the index (a disabled or deleted timer's runs, removed from
    /// the database); never fails the request. One left behind is handed off and finds no
    /// row to claim.
    pub async fn remove(&self, entries: &[HotEntry]) {
        let Some(index) = &self.index else { return };
        if entries.is_empty() || self.health.skipping(self.health.clock.now()) {
            return;
        }
        let mut by_shard: std::collections::BTreeMap<chime_domain::ShardKey, Vec<_>> =
            Default::default();
        for e in entries {
            by_shard.entry(e.shard).or_default().push(e.key);
        }
        // Side by side: one round trip in all, not one per shard.
        let removing = futures::future::join_all(
            by_shard
                .iter()
                .map(|(shard, keys)| index.unscheduled(*shard, keys)),
        );
        match tokio::time::timeout(WRITE_TIMEOUT, removing).await {
            Ok(done) => {
                if let Some(Err(e)) = done.into_iter().find(Result::is_err) {
                    self.health.failed(&e.to_string(), entries.len());
                }
            }
            Err(_) => tracing::debug!(
                occurrences = entries.len(),
                "hot index removal slower than {WRITE_TIMEOUT:?}; the request goes on without it"
            ),
        }
    }
}

fn start(index: HotWrites, health: Arc<Health>) -> mpsc::Sender<Addition> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(write_groups(index, health, rx));
    tx
}

/// Writes everything queued in one call per round; stops when the service is dropped.
async fn write_groups(index: HotWrites, health: Arc<Health>, mut rx: mpsc::Receiver<Addition>) {
    let mut group = Vec::with_capacity(GROUP);
    while rx.recv_many(&mut group, GROUP).await > 0 {
        let entries: Vec<HotEntry> = group
            .iter()
            .flat_map(|a| a.entries.iter().copied())
            .collect();
        let result = index.written(&entries).await;
        if let Err(error) = &result {
            health.failed(&error.to_string(), entries.len());
        }
        for addition in group.drain(..) {
            // A request that timed out has gone; its rows fire through the database.
            if let Some(reply) = addition.reply {
                let _ = reply.send(result.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use chime_domain::{
        Bucket, BucketCount, Clock, ShardKey, SystemClock, TaskKey, TimerId, Timestamp,
    };
    use chime_storage::StoreResult;
    use tokio::sync::Semaphore;

    use super::*;

    /// Records each `add` call's size; every call waits for a permit first, so a test can
    /// hold the writer inside its first write while more requests queue.
    struct GatedIndex {
        entered: AtomicI64,
        calls: Mutex<Vec<usize>>,
        gate: Semaphore,
    }

    impl GatedIndex {
        /// Every write waits until the test adds permits.
        fn closed() -> Arc<Self> {
            Arc::new(Self {
                entered: AtomicI64::new(0),
                calls: Mutex::new(Vec::new()),
                gate: Semaphore::new(0),
            })
        }
    }

    #[async_trait]
    impl HotIndex for GatedIndex {
        async fn add(&self, entries: &[HotEntry]) -> StoreResult<()> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.expect("gate open").forget();
            self.calls.lock().unwrap().push(entries.len());
            Ok(())
        }
        async fn due(
            &self,
            _: ShardKey,
            _: Timestamp,
            _: usize,
        ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
            Ok(Vec::new())
        }
        async fn touch(&self, _: &[ShardKey]) -> StoreResult<()> {
            Ok(())
        }
        async fn remove(&self, _: ShardKey, _: &[TaskKey]) -> StoreResult<()> {
            Ok(())
        }
        async fn shard_complete(&self, _: ShardKey) -> StoreResult<bool> {
            Ok(true)
        }
    }

    fn occurrence(id: i64) -> NewOccurrence {
        let timer_id = TimerId::new(id).unwrap();
        NewOccurrence {
            key: TaskKey::new(timer_id, Timestamp::from_millis(1_000_000 + id)),
            timer_version: 1,
            bucket: Bucket::of(timer_id, BucketCount::DEFAULT),
            due: None,
        }
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_write() {
        let index = GatedIndex::closed();
        let writer = Arc::new(IndexWriter::new(
            Some(index.clone() as Arc<dyn HotIndex>),
            Arc::new(SystemClock),
        ));
        // The first request's write is held at the gate; twenty more arrive meanwhile.
        let mut requests = tokio::task::JoinSet::new();
        for id in 1..=21 {
            let writer = writer.clone();
            requests.spawn(async move { writer.add(&[occurrence(id)]).await });
            if id == 1 {
                wait_until(|| index.entered.load(Ordering::SeqCst) == 1).await;
            }
        }
        wait_until(|| queued(&writer) == 20).await;
        index.gate.add_permits(2);
        while requests.join_next().await.is_some() {}
        assert_eq!(*index.calls.lock().unwrap(), vec![1, 20]);
    }

    #[tokio::test]
    async fn requests_for_later_occurrences_do_not_wait_for_the_write() {
        let index = GatedIndex::closed();
        let clock = Arc::new(SystemClock);
        let writer = IndexWriter::new(Some(index.clone() as Arc<dyn HotIndex>), clock.clone());
        let timer_id = TimerId::new(7).unwrap();
        let later = NewOccurrence {
            key: TaskKey::new(
                timer_id,
                clock.now().saturating_add(Duration::from_secs(60)),
            ),
            timer_version: 1,
            bucket: Bucket::of(timer_id, BucketCount::DEFAULT),
            due: None,
        };
        // The write is held at the gate, yet the request returns, and without counting a
        // timeout against the index.
        writer.add(&[later]).await;
        assert!(!writer.health.skipping(clock.now()));
        index.gate.add_permits(1);
        wait_until(|| *index.calls.lock().unwrap() == vec![1]).await;
    }

    #[tokio::test]
    async fn a_slow_write_delays_nothing_and_later_requests_still_queue() {
        let index = GatedIndex::closed();
        let clock = Arc::new(SystemClock);
        let writer = Arc::new(IndexWriter::new(
            Some(index.clone() as Arc<dyn HotIndex>),
            clock.clone(),
        ));
        // Due now: the request waits for the write, which is held at the gate.
        let started = tokio::time::Instant::now();
        writer.add(&[occurrence(1)]).await;
        assert!(started.elapsed() < WRITE_TIMEOUT * 4, "bounded wait");
        assert!(!writer.health.skipping(clock.now()), "slow is not failed");
        // The next request still queues its members rather than dropping them.
        let next = {
            let writer = writer.clone();
            tokio::spawn(async move { writer.add(&[occurrence(2)]).await })
        };
        wait_until(|| queued(&writer) == 1).await;
        index.gate.add_permits(2);
        next.await.unwrap();
        wait_until(|| *index.calls.lock().unwrap() == vec![1, 1]).await;
    }

    /// Additions waiting in the writer's queue.
    fn queued(writer: &IndexWriter) -> usize {
        writer
            .queue
            .get()
            .map_or(0, |q| q.max_capacity() - q.capacity())
    }

    async fn wait_until(condition: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(tokio::time::Instant::now() < deadline, "condition not met");
            tokio::task::yield_now().await;
        }
    }
}
