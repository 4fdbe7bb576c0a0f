//! A lagging shard's stale runs skipped where they lie. When more falls due than the
//! executors fire, a recurring timer's runs pile up in its shard one interval apart; each
//! one whose next run is due already is skipped by the misfire policy, and so is every run
//! of a timer stopped meanwhile. Handed off one by one, each such run cost a hand-off, an
//! executor's permit and a write of its own, which is what the fleet lacked. Here they are
//! judged as an executor would (`chime_domain::misfire::early_skip`), marked in one
//! statement per look (`OccurrenceStore::skip_before_claim`, the executors' own skip) and
//! taken out of the shard, so only runs that fire go on.
//!
//! The look runs beside the shard's hand-offs, not before them: on a loaded database its
//! reads and its write take hundreds of milliseconds, and keys on time must not wait for
//! them. Its keys are held back meanwhile; what it does not mark goes out as before.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::misfire::{early_skip, overtaken_among};
use chime_domain::{EarlySkip, ShardKey, TaskKey, Timer, TimerId, Timestamp};
use tokio::task::JoinHandle;

use crate::Scheduler;
use crate::shard::{Member, ShardReader};

/// How late a shard's earliest member must be before its runs are looked at: a run is not
/// overtaken before its timer's next run is due, a second later at the shortest interval.
const LAGGING_AFTER: Duration = Duration::from_secs(1);
/// How long a timer read here is used. Any age is safe: the store marks an overtaken run
/// only at the version read and a stopped timer's only up to it, so a timer changed since
/// leaves its newer rows to the executors.
const TIMER_TTL: Duration = Duration::from_secs(5);
/// Timers held at most; a lagging shard reads its members' timers once per [`TIMER_TTL`].
const TIMERS_HELD: usize = 16_384;
/// Keys a shard's worker remembers the store would not mark, at most.
const LEFT_HELD: usize = 65_536;

/// A timer as read to judge stale runs (`None`: deleted), and when it was read.
type Read = (Option<Arc<Timer>>, Timestamp);

/// Timers read to judge stale runs, shared by a replica's shard workers.
#[derive(Default)]
pub(crate) struct TimerCache(Mutex<HashMap<TimerId, Read>>);

/// A shard worker's stale runs: those being looked at, and those looked at and left (not
/// stale, or a row the store would not mark: a retry, a run claimed meanwhile), so a
/// lagging shard does not ask about them again at every poll.
#[derive(Default)]
pub(crate) struct Stale {
    left: HashSet<TaskKey>,
    judging: HashSet<TaskKey>,
    look: Option<JoinHandle<HashSet<TaskKey>>>,
}

impl Stale {
    /// Whether no look is under way (a shard is finished only then).
    pub(crate) fn idle(&self) -> bool {
        self.look.is_none()
    }
}

impl Scheduler {
    /// Takes out of `due` (a read of the shard, in due order) the runs a finished look
    /// marked, removing them from the shard, and the runs a look under way holds. With no
    /// look under way and the shard's earliest member over [`LAGGING_AFTER`] late, starts
    /// one over the late members whose timer has a later one late too (a lagging recurring
    /// timer's; a burst's one-shots have one each and cost no read). Returns how many keys
    /// are held.
    pub(crate) async fn hold_stale(
        self: &Arc<Self>,
        shard: ShardKey,
        due: &mut Vec<Member>,
        reader: &mut ShardReader,
        stale: &mut Stale,
    ) -> usize {
        if stale.look.as_ref().is_some_and(JoinHandle::is_finished)
            && let Some(look) = stale.look.take()
        {
            let marked = look.await.unwrap_or_default();
            if !marked.is_empty() {
                let keys: Vec<TaskKey> = marked.iter().copied().collect();
                // Marked already: one left in the shard is handed off and finds nothing to
                // claim.
                if let Err(e) = reader.forget(&keys).await {
                    tracing::debug!(%shard, error = %e, "cannot remove skipped members");
                }
                due.retain(|(k, _)| !marked.contains(k));
            }
            if stale.left.len() > LEFT_HELD {
                stale.left.clear();
            }
            let judged = std::mem::take(&mut stale.judging);
            stale
                .left
                .extend(judged.into_iter().filter(|k| !marked.contains(k)));
        }
        if stale.look.is_none() {
            self.look_at_stale(shard, due, stale);
        }
        if stale.judging.is_empty() {
            return 0;
        }
        let before = due.len();
        due.retain(|(k, _)| !stale.judging.contains(k));
        before - due.len()
    }

    /// Starts a look at the late members of `due` whose timer has a later one there.
    fn look_at_stale(self: &Arc<Self>, shard: ShardKey, due: &[Member], stale: &mut Stale) {
        let now = self.clock.now();
        let lagging = now.saturating_sub(LAGGING_AFTER);
        let late = &due[..due.partition_point(|(_, d)| *d <= lagging)];
        if late.is_empty() {
            return;
        }
        // Each timer's latest late member goes on at once whatever it is: it is the run
        // that fires (or the executor skips it), and holding it back while the look runs
        // would make every firing of a lagging shard later.
        let mut latest: HashMap<TimerId, Timestamp> = HashMap::new();
        for (k, _) in late {
            let at = latest.entry(k.timer_id).or_insert(k.run_at);
            *at = (*at).max(k.run_at);
        }
        let keys: Vec<TaskKey> = late
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| latest[&k.timer_id] != k.run_at && !stale.left.contains(k))
            .collect();
        if keys.is_empty() {
            return;
        }
        stale.judging = keys.iter().copied().collect();
        let me = self.clone();
        stale.look = Some(tokio::spawn(
            async move { me.skip_stale(shard, &keys).await },
        ));
    }

    /// Marks `skipped` those of `keys` whose timer is stopped or whose next run is due
    /// already; returns the keys marked (none on any failure: the executors judge them).
    async fn skip_stale(&self, shard: ShardKey, keys: &[TaskKey]) -> HashSet<TaskKey> {
        let now = self.clock.now();
        let mut ids: Vec<TimerId> = keys.iter().map(|k| k.timer_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let timers = match self.stale_timers(&ids, now).await {
            Ok(timers) => timers,
            Err(e) => {
                tracing::debug!(%shard, error = %e, "cannot read timers of a lagging shard");
                return HashSet::new();
            }
        };
        let runs: Vec<EarlySkip> = keys
            .iter()
            .filter_map(|k| early_skip(timers.get(&k.timer_id)?.as_deref(), *k, None, now))
            .collect();
        if runs.is_empty() {
            return HashSet::new();
        }
        let marked = match self.occurrences.skip_before_claim(&runs).await {
            Ok(marked) => marked,
            Err(e) => {
                tracing::warn!(%shard, error = %e, runs = runs.len(), "cannot skip a lagging shard's stale runs; handing them off");
                return HashSet::new();
            }
        };
        let marked: HashSet<TaskKey> = marked.into_iter().collect();
        let misfired = overtaken_among(&runs, &marked);
        metrics::counter!("chime_scheduler_skipped_total").increment(marked.len() as u64);
        metrics::counter!("chime_scheduler_misfired_total").increment(misfired as u64);
        marked
    }

    /// Timers `ids`, from the cache when read within [`TIMER_TTL`], else from the store.
    async fn stale_timers(
        &self,
        ids: &[TimerId],
        now: Timestamp,
    ) -> chime_storage::StoreResult<HashMap<TimerId, Option<Arc<Timer>>>> {
        let fresh_from = now.saturating_sub(TIMER_TTL);
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        {
            let cache = self.stale.0.lock().unwrap_or_else(|p| p.into_inner());
            for id in ids {
                match cache.get(id) {
                    Some((t, at)) if *at >= fresh_from => {
                        found.insert(*id, t.clone());
                    }
                    _ => missing.push(*id),
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let read: HashMap<TimerId, Arc<Timer>> = self
            .timers
            .get_timers(&missing)
            .await?
            .into_iter()
            .map(|t| (t.id, Arc::new(t)))
            .collect();
        let mut cache = self.stale.0.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() + missing.len() > TIMERS_HELD {
            cache.retain(|_, (_, at)| *at >= fresh_from);
            if cache.len() + missing.len() > TIMERS_HELD {
                cache.clear();
            }
        }
        for id in missing {
            // Not among the live ones: deleted.
            let t = read.get(&id).cloned();
            cache.insert(id, (t.clone(), now));
            found.insert(id, t);
        }
        Ok(found)
    }
}
