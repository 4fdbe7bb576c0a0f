//! Written runs' first attempts taken under their run leases ([`chime_storage::RunLeases`])
//! instead of claimed on their rows: the lease first, then a read of the row, so a second
//! taker finds the lease held, and the outcome moves the row on from `pending`. The claim's
//! row write is spared where a lease costs the database nothing (Redis). Only with
//! `executor.leased_first_attempts` on (the default: see docs/pipeline.md, Executor).

use std::collections::HashSet;

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

impl Inner {
    /// Takes `runs` (written, `allow_all`, not `at_most_once`) under their run leases: a
    /// run whose row waits for its first attempt fires with the row left `pending`; the
    /// other rows (retries, lapsed claims) are claimed as usual and their leases freed.
    /// Without Redis to hold leases, every run is claimed on its row, so firing goes on.
    pub(crate) async fn take_first(&self, runs: &[TaskKey], claim: Claim) -> StoreResult<Taken> {
        if runs.is_empty() {
            return Ok(Taken::default());
        }
        let Some(leases) = self.run_leases.as_ref() else {
            return self.claim_rows(runs, claim).await;
        };
        let held = match take_leases(leases.as_ref(), runs, claim).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, runs = runs.len(), "cannot take run leases; claiming the rows");
                return self.claim_rows(runs, claim).await;
            }
        };
        if held.is_empty() {
            return Ok(Taken::default());
        }
        let first = match self.occurrences.first_attempts(&held).await {
            Ok(first) => first,
            Err(e) => {
                let _ = leases.free_runs(&held).await;
                return Err(e);
            }
        };
        let found: HashSet<TaskKey> = first.iter().map(|c| c.key).collect();
        let rest: Vec<TaskKey> = held
            .iter()
            .filter(|k| !found.contains(k))
            .copied()
            .collect();
        let mut taken = Taken {
            fired: first.into_iter().map(|c| (c.key, c)).collect(),
            left: Vec::new(),
        };
        if !rest.is_empty() {
            let claimed = self.claim_rows(&rest, claim).await;
            // Claimed on their rows (or not at all): the leases have no more to guard.
            let _ = leases.free_runs(&rest).await;
            let claimed = claimed?;
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
