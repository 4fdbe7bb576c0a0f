//! Taking a stopped timer's runs still to come out of the database and the hot index
//! (`OccurrenceStore::drop_pending`), after a disable, pause or delete committed: no
//! scheduler hands each off and no executor spends a claim on it only to skip it.
//!
//! Concurrent requests share one round: a single task takes every timer queued while the
//! previous round ran. A statement per disable fell far behind the API on a loaded database
//! (bench `overload`: thousands of timers disabled at once); in rounds they keep its pace.
//! A request does not wait for its round: the timer is stopped once its change committed,
//! and whatever a round has not taken out yet is skipped by the timer's version when it
//! comes due. Waiting made each request as slow as a round on a loaded database, and each
//! round as small as the number of callers.

use std::sync::{Arc, OnceLock};

use chime_domain::{Clock, Horizon, StoppedTimer, Timer};
use chime_storage::{HotEntry, OccurrenceStore};
use tokio::sync::mpsc;

use crate::index::IndexWriter;

/// Timers queued for the task at most; past it a request leaves its runs to be skipped.
const QUEUE: usize = 16_384;
/// Most timers one round takes.
const ROUND: usize = 256;

pub struct Unscheduler {
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<IndexWriter>,
    clock: Arc<dyn Clock>,
    /// Started on first use, inside the runtime the requests run on.
    queue: OnceLock<mpsc::Sender<Stopped>>,
}

/// A stopped timer, with the hot-index members of its unwritten runs still to come (they
/// have no rows to drop: the timer's plan says where they are).
struct Stopped {
    timer: StoppedTimer,
    unwritten: Vec<HotEntry>,
}

/// The members `timer`'s unwritten runs may have in the hot index from `now`: its plan over
/// the lead, as the migrator indexes it. None for a timer whose runs are written ahead.
pub(crate) fn unwritten_members(
    timer: &Timer,
    now: chime_domain::Timestamp,
    horizon: Horizon,
) -> Vec<HotEntry> {
    if timer.written_ahead {
        return Vec::new();
    }
    timer
        .spec
        .schedule
        .occurrences_between(now, now.saturating_add(horizon.lead))
        .take(horizon.max_rows)
        .map(|at| {
            HotEntry::new(
                chime_domain::TaskKey::new(timer.id, at),
                chime_domain::misfire::natural_due(timer, at),
                timer.bucket,
            )
        })
        .collect()
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

    /// Queues `timer`'s runs still to come to be dropped, with the members of its unwritten
    /// runs (see [`unwritten_members`]); never fails or holds up the request.
    pub fn stopped(&self, timer: StoppedTimer, unwritten: Vec<HotEntry>) {
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
        let id = timer.id;
        if queue.try_send(Stopped { timer, unwritten }).is_err() {
            tracing::debug!(timer = %id, "unscheduling queue full; the runs are skipped when due");
        }
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
        let began = std::time::Instant::now();
        let timers: Vec<StoppedTimer> = round.iter().map(|s| s.timer).collect();
        let unwritten: Vec<HotEntry> = round.drain(..).flat_map(|s| s.unwritten).collect();
        match occurrences.drop_pending(&timers, clock.now()).await {
            Ok(mut dropped) => {
                let stored = began.elapsed();
                dropped.extend(unwritten);
                index.remove(&dropped).await;
                tracing::debug!(
                    timers = timers.len(),
                    runs = dropped.len(),
                    database_ms = stored.as_millis() as u64,
                    index_ms = (began.elapsed() - stored).as_millis() as u64,
                    "dropped stopped timers' runs"
                );
            }
            Err(e) => tracing::warn!(
                timers = timers.len(),
                error = %e,
                "cannot drop stopped timers' pending runs; they are skipped when due"
            ),
        }
    }
}
