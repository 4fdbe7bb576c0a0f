//! Unwritten runs on the claim side ([`chime_domain::UnwrittenRun`]): taken under their run
//! leases rather than claimed as rows, and checked again against a timer that changed.

use std::collections::{HashMap, HashSet};

use chime_domain::{Claim, ClaimedOccurrence, TaskKey};
use chime_storage::StoreResult;

use crate::Inner;
use crate::claim::Timers;

impl Inner {
    /// Takes unwritten runs ([`chime_domain::UnwrittenRun`]): each run's lease first, then
    /// a look for its row, so a second taker either finds the lease held or finds the row.
    /// A run with no row is this executor's first attempt of it; one with a row (a retry,
    /// a run skipped meanwhile) is claimed as any row is, and its lease freed.
    pub(crate) async fn take_unwritten(
        &self,
        runs: &[TaskKey],
        timers: &Timers,
        claim: Claim,
    ) -> StoreResult<Vec<(TaskKey, ClaimedOccurrence)>> {
        let Some(leases) = self.run_leases.as_ref().filter(|_| !runs.is_empty()) else {
            return Ok(Vec::new());
        };
        let held = crate::leased::take_leases(leases.as_ref(), runs, claim).await?;
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let absent = match self.occurrences.absent(&held).await {
            Ok(absent) => absent,
            Err(e) => {
                let _ = leases.free_runs(&held).await;
                return Err(e);
            }
        };
        let without_row: HashSet<TaskKey> = absent.iter().map(|a| a.key).collect();
        let with_row: Vec<TaskKey> = held
            .iter()
            .filter(|k| !without_row.contains(k))
            .copied()
            .collect();
        let mut taken: Vec<(TaskKey, ClaimedOccurrence)> = absent
            .iter()
            .filter_map(|a| {
                let t = timers.get(&a.key.timer_id)?;
                Some((
                    a.key,
                    ClaimedOccurrence {
                        key: a.key,
                        timer_version: t.version,
                        bucket: t.bucket,
                        attempt: 1,
                        due: chime_domain::misfire::natural_due(t, a.key.run_at),
                        backfill: false,
                        parent: None,
                        timer_now: a.timer_now,
                        unwritten: Some(t.unwritten()),
                        leased: false,
                    },
                ))
            })
            .collect();
        if !with_row.is_empty() {
            let claimed = self.occurrences.claim(&with_row, claim).await;
            let _ = leases.free_runs(&with_row).await;
            taken.extend(claimed?.into_iter().map(|c| (c.key, c)));
        }
        Ok(taken)
    }

    /// Unwritten runs taken on a timer that changed since it was cached fire under the
    /// timer as it is now if it still names them; the rest are dropped (nothing of them was
    /// written) and their leases freed, as are those of timers that could not be read.
    /// Returns the keys dropped.
    pub(crate) async fn recheck_unwritten(
        &self,
        claimed: &mut HashMap<TaskKey, ClaimedOccurrence>,
        timers: &Timers,
        unreadable: &[chime_domain::TimerId],
    ) -> HashSet<TaskKey> {
        let mut dropped = HashSet::new();
        for c in claimed.values_mut().filter(|c| c.unwritten.is_some()) {
            let now = timers
                .get(&c.key.timer_id)
                .filter(|t| !unreadable.contains(&t.id));
            match now {
                Some(t) if t.enabled && t.unwritten_run(c.key.run_at, None) => {
                    c.timer_version = t.version;
                    c.unwritten = Some(t.unwritten());
                    c.due = chime_domain::misfire::natural_due(t, c.key.run_at);
                }
                _ => {
                    dropped.insert(c.key);
                }
            }
        }
        if dropped.is_empty() {
            return dropped;
        }
        claimed.retain(|k, _| !dropped.contains(k));
        metrics::counter!("chime_executor_not_claimed_total").increment(dropped.len() as u64);
        if let Some(leases) = &self.run_leases {
            let keys: Vec<TaskKey> = dropped.iter().copied().collect();
            if let Err(e) = leases.free_runs(&keys).await {
                tracing::warn!(error = %e, runs = keys.len(), "cannot free run leases; they lapse");
            }
        }
        dropped
    }
}
