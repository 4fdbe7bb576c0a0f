//! Taking a stopped timer's runs still to come out of the database and the hot index
//! (`OccurrenceStore::drop_pending`), after a disable, pause or delete committed: no
//! executor then spends a claim on each only to skip it.
//!
//! Concurrent requests share one statement: a single task takes every timer queued while
//! the previous round ran. A statement per disable fell far behind the API on a loaded
//! database (bench `overload`: thousands of timers disabled at once); in rounds they keep
//! its pace. A request waits for its round at most [`WAIT`]: the timer is stopped already,
//! and whatever stays is skipped by the timer's version when it comes due.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chime_domain::{Clock, TimerId};
use chime_storage::OccurrenceStore;
use tokio::sync::{mpsc, oneshot};

use crate::index::IndexWriter;

/// Longest a request waits for its round.
const WAIT: Duration = Duration::from_millis(500);
/// Timers queued for the task at most; past it a request leaves its runs to be skipped.
const QUEUE: usize = 16_384;
/// Most timers one round takes.
const ROUND: usize = 256;

struct Stopped {
    id: TimerId,
    done: oneshot::Sender<()>,
}

pub struct Unscheduler {
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<IndexWriter>,
    clock: Arc<dyn Clock>,
    /// Started on first use, inside the runtime the requests run on.
    queue: OnceLock<mpsc::Sender<Stopped>>,
}

impl Unscheduler {
    pub fn new(
        occurrences: Arc<dyn OccurrenceStore>,
        index: Arc<IndexWriter>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            occurrences,
            index,
            clock,
            queue: OnceLock::new(),
        }
    }

    /// Drops timer `id`'s runs still to come; never fails the request.
    pub async fn stopped(&self, id: TimerId) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(rounds(
                self.occurrences.clone(),
                self.index.clone(),
                self.clock.clone(),
                rx,
            ));
            tx
        });
        let (done, finished) = oneshot::channel();
        if queue.try_send(Stopped { id, done }).is_err() {
            tracing::debug!(timer = %id, "unscheduling queue full; the runs are skipped when due");
            return;
        }
        let _ = tokio::time::timeout(WAIT, finished).await;
    }
}

/// One statement per round for every timer queued; stops when the service is dropped.
async fn rounds(
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<IndexWriter>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::Receiver<Stopped>,
) {
    let mut round = Vec::with_capacity(ROUND);
    while rx.recv_many(&mut round, ROUND).await > 0 {
        let ids: Vec<TimerId> = round.iter().map(|s| s.id).collect();
        let began = std::time::Instant::now();
        match occurrences.drop_pending(&ids, clock.now()).await {
            Ok(dropped) => {
                let stored = began.elapsed();
                index.remove(&dropped).await;
                tracing::debug!(
                    timers = ids.len(),
                    runs = dropped.len(),
                    database_ms = stored.as_millis() as u64,
                    index_ms = (began.elapsed() - stored).as_millis() as u64,
                    "dropped stopped timers' runs"
                );
            }
            Err(e) => tracing::warn!(
                timers = ids.len(),
                error = %e,
                "cannot drop stopped timers' pending runs; they are skipped when due"
            ),
        }
        for stopped in round.drain(..) {
            let _ = stopped.done.send(());
        }
    }
}
