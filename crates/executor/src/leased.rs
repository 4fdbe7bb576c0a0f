//! Written runs' first attempts taken under their run leases ([`chime_storage::RunLeases`])
//! instead of claimed on their rows: the row read first (with the batch's timers where they
//! were not held, [`PreRead`]), then the lease of each run waiting for its first attempt,
//! and the outcome moves the row on from `pending`. The lease is kept until it lapses
//! ([`crate::record`]), so a second taker that read the row as `pending` before the outcome
//! still finds it held. The claim's row write is spared where a lease costs the database
//! nothing (Redis). Only with `executor.leased_first_attempts` on (the default: see
//! docs/pipeline.md, Executor).

use std::collections::{HashMap, HashSet};

use chime_domain::{Claim, ClaimedOccurrence, TaskKey};
use chime_storage::StoreResult;

use crate::Inner;

/// What [`Inner::take_first`] did with its keys.
#[derive(Default)]
pub(crate) struct Taken {
    pub fired: Vec<(TaskKey, ClaimedOccurrence)>,
    /// Held here but neither a first attempt nor claimable on its row: a backfill under
    /// an overlap policy, say, for the caller to look at as it does its own unclaimed keys.
    pub left: Vec<TaskKey>,
}

/// How long a lease taken under `claim` lasts: as long as the claim's lease on a row would.
fn lease_ttl(claim: Claim) -> std::time::Duration {
    std::time::Duration::from_millis(
        u64::try_from(claim.lease_until.as_millis() - claim.now.as_millis()).unwrap_or(0),
    )
}

/// Takes the leases of `runs` for the length of `claim`; the runs now held here. The others
/// another executor holds (a key offered twice) and are counted as not claimed.
pub(crate) async fn take_leases(
    leases: &dyn chime_storage::RunLeases,
    runs: &[TaskKey],
    claim: Claim,
) -> StoreResult<Vec<TaskKey>> {
    let flags = leases.take_runs(runs, lease_ttl(claim)).await?;
    let held: Vec<TaskKey> = runs
        .iter()
        .zip(&flags)
        .filter(|(_, taken)| **taken)
        .map(|(k, _)| *k)
        .collect();
    let busy = runs.len() - held.len();
    if busy > 0 {
        metrics::counter!("chime_executor_not_claimed_total").increment(busy as u64);
    }
    Ok(held)
}

/// Rows read with a batch's timers, before any lease ([`Inner::timers_of`]).
#[derive(Default)]
pub(crate) struct PreRead {
    /// The keys whose rows were read.
    pub read: HashSet<TaskKey>,
    /// Those among them waiting for their first attempt.
    pub first: HashMap<TaskKey, ClaimedOccurrence>,
}

impl Inner {
    /// Takes `runs` (written, `allow_all`, not `at_most_once`): each row read first (or as
    /// `pre` read it), then the leases of the runs waiting for their first attempt, which
    /// fire with their rows left `pending`; the other rows (retries, lapsed claims) are
    /// claimed as usual, without a lease. Without Redis to hold leases, or when it fails,
    /// every run is claimed on its row, so firing goes on.
    pub(crate) async fn take_first(
        &self,
        runs: &[TaskKey],
        claim: Claim,
        pre: &PreRead,
    ) -> StoreResult<Taken> {
        if runs.is_empty() {
            return Ok(Taken::default());
        }
        let Some(leases) = self.run_leases.as_ref() else {
            return self.claim_rows(runs, claim).await;
        };
        let unread: Vec<TaskKey> = runs
            .iter()
            .filter(|k| !pre.read.contains(k))
            .copied()
            .collect();
        let mut first: HashMap<TaskKey, ClaimedOccurrence> = runs
            .iter()
            .filter_map(|k| pre.first.get(k).map(|c| (*k, *c)))
            .collect();
        if !unread.is_empty() {
            first.extend(
                self.occurrences
                    .first_attempts(&unread)
                    .await?
                    .into_iter()
                    .map(|c| (c.key, c)),
            );
        }
        // Offered twice in the batch: one lease, one callback.
        let mut waiting: Vec<TaskKey> = Vec::with_capacity(first.len());
        let mut rest: Vec<TaskKey> = Vec::new();
        let mut seen = HashSet::with_capacity(runs.len());
        for k in runs.iter().filter(|k| seen.insert(**k)) {
            if first.contains_key(k) {
                waiting.push(*k);
            } else {
                rest.push(*k);
            }
        }
        let held = match take_leases(leases.as_ref(), &waiting, claim).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, runs = runs.len(), "cannot take run leases; claiming the rows");
                return self.claim_rows(runs, claim).await;
            }
        };
        let mut taken = Taken {
            fired: held
                .iter()
                .filter_map(|k| first.remove(k).map(|c| (*k, c)))
                .collect(),
            left: Vec::new(),
        };
        if !rest.is_empty() {
            let claimed = self.claim_rows(&rest, claim).await?;
            taken.fired.extend(claimed.fired);
            taken.left = claimed.left;
        }
        Ok(taken)
    }

    /// Claims `runs` on their rows, as a batch without leases is.
    async fn claim_rows(&self, runs: &[TaskKey], claim: Claim) -> StoreResult<Taken> {
        let claimed = self.occurrences.claim(runs, claim).await?;
        let got: HashSet<TaskKey> = claimed.iter().map(|c| c.key).collect();
        Ok(Taken {
            left: runs.iter().filter(|k| !got.contains(k)).copied().collect(),
            fired: claimed.into_iter().map(|c| (c.key, c)).collect(),
        })
    }
}
