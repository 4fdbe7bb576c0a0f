//! Group commit for single creates: concurrent requests share one statement and one commit,
//! each timer with its first occurrences. The queue and its writer are the same on every
//! SQL backend; each says how it inserts a group ([`InsertTimers`]).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use chime_domain::Timestamp;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::{StoreResult, Written, rows};

/// How a backend inserts a group of new timers with their first occurrences, atomically.
#[async_trait]
pub(crate) trait InsertTimers: Send + Sync + 'static {
    /// Returns the ids inserted; a timer left out had its (app, name) taken, by an existing
    /// timer or by an earlier row of the same group.
    async fn insert_timers(&self, group: &[(&Written, Timestamp)]) -> StoreResult<HashSet<i64>>;
}

/// A create waiting for a writer: the timer, its first occurrences and watermark, and the
/// channel its caller awaits the result on.
pub(crate) struct PendingCreate {
    pub written: Written,
    pub watermark: Timestamp,
    pub reply: oneshot::Sender<StoreResult<Written>>,
}

pub(crate) type CreateQueue = mpsc::Sender<PendingCreate>;

/// Most timers one group-commit statement inserts.
const CREATE_GROUP: usize = 128;
/// Writers inserting groups concurrently. One: while it waits on a commit the next group
/// collects in the queue. Each statement and commit costs PostgreSQL about the same CPU
/// whatever its size, and a second writer halved the groups, costing more CPU per create for
/// no gain in throughput.
const CREATE_WRITERS: usize = 1;

/// Starts the writers; they stop when every sender is gone.
pub(crate) fn start(db: Arc<dyn InsertTimers>) -> CreateQueue {
    let (tx, rx) = mpsc::channel(CREATE_GROUP * 8);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..CREATE_WRITERS {
        tokio::spawn(create_writer(db.clone(), rx.clone()));
    }
    tx
}

/// Takes every create queued so far (up to [`CREATE_GROUP`]), inserts them in one statement,
/// and answers each caller after the commit. A row the statement skipped had its (app, name)
/// taken, by an existing timer or by an earlier row of the same group; its occurrences are
/// skipped with it.
async fn create_writer(
    db: Arc<dyn InsertTimers>,
    queue: Arc<Mutex<mpsc::Receiver<PendingCreate>>>,
) {
    loop {
        let mut group = Vec::with_capacity(CREATE_GROUP);
        {
            let mut rx = queue.lock().await;
            if rx.recv_many(&mut group, CREATE_GROUP).await == 0 {
                return;
            }
            // Let requests that are ready to enqueue do so before the statement goes: a
            // yield, not a timer, so an idle gateway adds no latency.
            tokio::task::yield_now().await;
            while group.len() < CREATE_GROUP {
                match rx.try_recv() {
                    Ok(p) => group.push(p),
                    Err(_) => break,
                }
            }
        }
        let result = {
            let rows: Vec<(&Written, Timestamp)> =
                group.iter().map(|p| (&p.written, p.watermark)).collect();
            // One atomic statement: when it rolled back (a day partition attached under it,
            // a deadlock), the same rows go again.
            let (db, rows) = (&db, &rows);
            crate::error::retry_rolled_back(|| db.insert_timers(rows)).await
        };
        for pending in group {
            let timer = &pending.written.timer;
            let answer = match &result {
                Ok(inserted) if inserted.contains(&timer.id.get()) => Ok(pending.written),
                Ok(_) => Err(rows::name_taken(&timer.spec)),
                Err(e) => Err(e.clone()),
            };
            // The caller may have gone (request cancelled); the timer stays created.
            let _ = pending.reply.send(answer);
        }
    }
}

/// Queues one create and waits for the commit of its group.
pub(crate) async fn submit(
    queue: &CreateQueue,
    written: Written,
    watermark: Timestamp,
) -> StoreResult<Written> {
    let (reply, answer) = oneshot::channel();
    let gone = || crate::StoreError::unavailable("timer writer stopped");
    queue
        .send(PendingCreate {
            written,
            watermark,
            reply,
        })
        .await
        .map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

/// A timer about to be created at `now`: id, bucket, version 1, its first occurrences and
/// watermark.
pub(crate) fn new_written(
    id: chime_domain::TimerId,
    new: &chime_domain::NewTimer,
    buckets: chime_domain::BucketCount,
    now: Timestamp,
    horizon: chime_domain::Horizon,
) -> (Written, Timestamp) {
    let timer = rows::new_timer_row(id, new, buckets, now);
    let (occurrences, watermark) = crate::first_occurrences(&timer, now, horizon);
    (Written { timer, occurrences }, watermark)
}

/// A batch create's results in request order: timers an idempotency key created before, and
/// fresh ones for one group insert.
pub(crate) struct BatchResults {
    results: Vec<Result<Written, usize>>,
    fresh: Vec<(Written, Timestamp)>,
}

impl BatchResults {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            results: Vec::with_capacity(n),
            fresh: Vec::new(),
        }
    }

    /// A repeated request: the timer its key created before.
    pub(crate) fn repeat(&mut self, original: Written) {
        self.results.push(Ok(original));
    }

    /// A new timer, with its watermark.
    pub(crate) fn fresh(&mut self, written: (Written, Timestamp)) {
        self.results.push(Err(self.fresh.len()));
        self.fresh.push(written);
    }

    /// The fresh timers, as the group insert takes them (none: nothing to insert).
    pub(crate) fn group(&self) -> Vec<(&Written, Timestamp)> {
        self.fresh.iter().map(|(w, m)| (w, *m)).collect()
    }

    /// All or none: the first fresh timer the insert left out had its name taken.
    pub(crate) fn check_inserted(&self, inserted: &HashSet<i64>) -> StoreResult<()> {
        match self
            .fresh
            .iter()
            .find(|(w, _)| !inserted.contains(&w.timer.id.get()))
        {
            Some((w, _)) => Err(rows::name_taken(&w.timer.spec)),
            None => Ok(()),
        }
    }

    /// Every request's timer, in request order.
    pub(crate) fn finish(self) -> StoreResult<Vec<Written>> {
        let mut fresh: Vec<Option<Written>> =
            self.fresh.into_iter().map(|(w, _)| Some(w)).collect();
        self.results
            .into_iter()
            .map(|r| match r {
                Ok(w) => Ok(w),
                Err(i) => fresh
                    .get_mut(i)
                    .and_then(Option::take)
                    .ok_or_else(|| crate::StoreError::internal("batch result out of place")),
            })
            .collect()
    }
}
