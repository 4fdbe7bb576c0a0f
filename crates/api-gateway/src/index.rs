//! Adding what a request wrote to the hot index, after its transaction committed. Best
//! effort by design: the rows are durable already, and a member the index lacks is fired by
//! the schedulers' database fallback (shard missing) or the sweeper (shard present), a
//! little late but never lost. So a slow or absent Redis must not slow the API down.
//!
//! Concurrent requests share one write: a single task takes every addition queued while the
//! previous write was in flight and sends them as one pipeline, so Redis sees one command
//! per shard per round instead of three per request.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chime_domain::{Clock, NewOccurrence};
use chime_storage::{HotEntry, HotIndex};
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

struct Addition {
    entries: Vec<HotEntry>,
    reply: oneshot::Sender<Result<(), String>>,
}

pub struct IndexWriter {
    index: Option<Arc<dyn HotIndex>>,
    clock: Arc<dyn Clock>,
    /// Started on first use, inside the runtime the requests run on.
    queue: OnceLock<mpsc::Sender<Addition>>,
    /// Unix ms until which writes are skipped.
    skip_until: AtomicI64,
}

impl IndexWriter {
    /// `None`: no hot index configured; the schedulers read the database.
    pub fn new(index: Option<Arc<dyn HotIndex>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            index,
            clock,
            queue: OnceLock::new(),
            skip_until: AtomicI64::new(0),
        }
    }

    /// Indexes `written`; never fails the request.
    pub async fn add(&self, written: &[NewOccurrence]) {
        let Some(index) = &self.index else { return };
        if written.is_empty() {
            return;
        }
        let now = self.clock.now();
        if now.as_millis() < self.skip_until.load(Ordering::Relaxed) {
            metrics::counter!("chime_gateway_index_writes_skipped_total").increment(1);
            return;
        }
        let entries: Vec<HotEntry> = written
            .iter()
            .map(|o| HotEntry::new(o.key, o.key.run_at, o.bucket))
            .collect();
        let count = entries.len();
        let queue = self.queue.get_or_init(|| start(index.clone()));
        let (reply, answer) = oneshot::channel();
        if queue.try_send(Addition { entries, reply }).is_err() {
            // The writer is this far behind: Redis is slow, and waiting would only add to it.
            metrics::counter!("chime_gateway_index_writes_skipped_total").increment(1);
            return;
        }
        let error = match tokio::time::timeout(WRITE_TIMEOUT, answer).await {
            Ok(Ok(Ok(()))) => return,
            Ok(Ok(Err(e))) => e,
            Ok(Err(_)) => "the index writer stopped".to_owned(),
            Err(_) => format!("no answer within {WRITE_TIMEOUT:?}"),
        };
        self.skip_until
            .store(now.saturating_add(BACK_OFF).as_millis(), Ordering::Relaxed);
        metrics::counter!("chime_gateway_index_write_failures_total").increment(1);
        tracing::warn!(
            %error,
            occurrences = count,
            "hot index unavailable; the occurrences are stored and will fire through the \
             database fallback or the sweeper"
        );
    }
}

fn start(index: Arc<dyn HotIndex>) -> mpsc::Sender<Addition> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(write_groups(index, rx));
    tx
}

/// Writes everything queued in one call per round; stops when the service is dropped.
async fn write_groups(index: Arc<dyn HotIndex>, mut rx: mpsc::Receiver<Addition>) {
    let mut group = Vec::with_capacity(GROUP);
    while rx.recv_many(&mut group, GROUP).await > 0 {
        let entries: Vec<HotEntry> = group
            .iter()
            .flat_map(|a| a.entries.iter().copied())
            .collect();
        let result = index.add(&entries).await.map_err(|e| e.to_string());
        for addition in group.drain(..) {
            // A request that timed out has gone; its rows fire through the database.
            let _ = addition.reply.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use chime_domain::{Bucket, BucketCount, ShardKey, SystemClock, TaskKey, TimerId, Timestamp};
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
        async fn shard_exists(&self, _: ShardKey) -> StoreResult<bool> {
            Ok(true)
        }
    }

    fn occurrence(id: i64) -> NewOccurrence {
        let timer_id = TimerId::new(id).unwrap();
        NewOccurrence {
            key: TaskKey::new(timer_id, Timestamp::from_millis(1_000_000 + id)),
            timer_version: 1,
            bucket: Bucket::of(timer_id, BucketCount::DEFAULT),
        }
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_write() {
        let index = Arc::new(GatedIndex {
            entered: AtomicI64::new(0),
            calls: Mutex::new(Vec::new()),
            gate: Semaphore::new(0),
        });
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
