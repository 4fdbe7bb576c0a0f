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
//!
//! The members of unwritten runs have rounds of their own, beside the database's: they
//! have no rows, so nothing a statement answers changes them. Behind the statements, on a
//! loaded database each stopped every-second timer kept its next minute in the index, to be
//! handed off and skipped one run at a time, for as long as the rounds before it took, and
//! for good when its round's statement failed.

use std::sync::{Arc, OnceLock};

use chime_domain::{Clock, Horizon, StoppedTimer, Timer};
use chime_storage::{HotEntry, OccurrenceStore};
use tokio::sync::mpsc;

use crate::index::IndexWriter;

/// Timers (and unwritten timers' members) queued for each task at most; past it a request
/// leaves its runs to be skipped.
const QUEUE: usize = 16_384;
/// Most timers one round takes.
const ROUND: usize = 256;

pub struct Unscheduler {
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<IndexWriter>,
    clock: Arc<dyn Clock>,
    /// Started on first use, inside the runtime the requests run on.
    queues: OnceLock<Queues>,
}

/// The stopped timers whose rows are to go, and the hot-index members of unwritten runs
/// still to come (the timer's plan says where they are).
struct Queues {
    rows: mpsc::Sender<StoppedTimer>,
    members: mpsc::Sender<Vec<HotEntry>>,
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
            queues: OnceLock::new(),
        }
    }

    /// Queues `timer`'s runs still to come to be dropped, and the members of its unwritten
    /// runs (see [`unwritten_members`]) to leave the hot index; never fails or holds up the
    /// request.
    pub fn stopped(&self, timer: StoppedTimer, unwritten: Vec<HotEntry>) {
        let queues = self.queues.get_or_init(|| {
            let (rows, rows_rx) = mpsc::channel(QUEUE);
            let (members, members_rx) = mpsc::channel(QUEUE);
            tokio::spawn(rounds(
                self.occurrences.clone(),
                self.index.clone(),
                self.clock.clone(),
                rows_rx,
            ));
            tokio::spawn(member_rounds(self.index.clone(), members_rx));
            Queues { rows, members }
        });
        let id = timer.id;
        if !unwritten.is_empty() && queues.members.try_send(unwritten).is_err() {
            tracing::debug!(timer = %id, "unscheduling queue full; the runs are skipped when due");
        }
        if queues.rows.try_send(timer).is_err() {
            tracing::debug!(timer = %id, "unscheduling queue full; the runs are skipped when due");
        }
    }
}

/// Takes unwritten runs' members out of the hot index, every timer's queued while the last
/// removal ran in one; stops when the service is dropped.
async fn member_rounds(index: Arc<IndexWriter>, mut rx: mpsc::Receiver<Vec<HotEntry>>) {
    let mut round = Vec::with_capacity(ROUND);
    while rx.recv_many(&mut round, ROUND).await > 0 {
        let members: Vec<HotEntry> = round.drain(..).flatten().collect();
        index.remove(&members).await;
        tracing::debug!(
            runs = members.len(),
            "dropped stopped timers' unwritten runs"
        );
    }
}

/// One statement per round for every timer queued, then the members of the rows it dropped
/// out of the hot index; stops when the service is dropped.
async fn rounds(
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<IndexWriter>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::Receiver<StoppedTimer>,
) {
    let mut timers = Vec::with_capacity(ROUND);
    while rx.recv_many(&mut timers, ROUND).await > 0 {
        let began = std::time::Instant::now();
        match occurrences.drop_pending(&timers, clock.now()).await {
            Ok(dropped) => {
                let stored = began.elapsed();
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
        timers.clear();
    }
}
