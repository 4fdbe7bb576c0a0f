//! Which buckets this replica works: its share among the live schedulers (its group's
//! [`Ownership`]), the leases it takes for them, and the view of both that the admin port
//! serves at `/ownership`.

use std::collections::HashMap;
use std::sync::Arc;

use chime_domain::{Ownership, ShardKey};
use chime_runtime::Roster;
use chime_storage::StoreResult;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{Held, Scheduler};

/// The scheduler replicas' group.
pub const GROUP: &str = "scheduler";

/// Resolves when the members change; never without a group.
pub(crate) async fn changed(changes: &mut Option<watch::Receiver<Ownership>>) {
    let open = match changes {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !open {
        std::future::pending::<()>().await;
    }
}

impl Scheduler {
    /// Makes this replica one of a group that splits the buckets; before [`Scheduler::run`].
    /// The roster's token must be this scheduler's ([`Scheduler::token`]): a lease names its
    /// holder as a member, which is how peers know it is theirs to take once it is gone.
    pub fn join(&self, roster: Arc<Roster>) {
        let _ = self.roster.set(roster);
    }

    pub(crate) fn roster(&self) -> Option<Arc<Roster>> {
        self.roster.get().cloned()
    }

    /// Who owns what now; this replica alone owns every bucket without a group.
    pub(crate) fn ownership_now(&self) -> Ownership {
        match self.roster.get() {
            Some(r) => r.ownership(),
            None => Ownership::alone(self.token.as_str(), self.settings.buckets),
        }
    }

    /// Takes a lease if it is free, or held by a replica no longer in the group.
    pub(crate) async fn take_lease(&self, name: &str, view: &Ownership) -> StoreResult<bool> {
        let ttl = self.settings.lease_ttl;
        match self.roster.get() {
            Some(_) => {
                self.leases
                    .take(name, &self.token, ttl, view.members())
                    .await
            }
            None => self.leases.acquire(name, &self.token, ttl).await,
        }
    }

    /// Sets the gauges and the shards shown by [`Scheduler::ownership_report`].
    pub(crate) fn publish(&self, view: &Ownership, held: &HashMap<ShardKey, Held>) {
        // Shards being handed over are no longer counted.
        let mut shards: Vec<ShardKey> = held
            .iter()
            .filter(|(_, h)| !h.stop.is_cancelled())
            .map(|(s, _)| *s)
            .collect();
        metrics::gauge!("chime_scheduler_shards_held").set(shards.len() as f64);
        metrics::gauge!("chime_scheduler_members").set(view.members().len() as f64);
        metrics::gauge!("chime_scheduler_lag_seconds").set(self.lag().as_secs_f64());
        shards.sort();
        if let Ok(mut now) = self.held_now.lock() {
            *now = shards;
        }
    }

    /// Who owns which bucket as this replica sees it, and the shards it holds: served as
    /// JSON on the admin port, so an operator sees how the work is split.
    pub fn ownership_report(&self) -> Value {
        let view = self.ownership_now();
        let held: Vec<String> = self
            .held_now
            .lock()
            .map(|h| h.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let buckets: Vec<Value> = self
            .settings
            .buckets
            .all()
            .map(|b| {
                json!({
                    "bucket": b.get(),
                    "owner": view.owner(b),
                    "mine": view.owns(b),
                })
            })
            .collect();
        json!({
            "member": view.me(),
            "members": view.members(),
            "owned": view.mine().len(),
            "buckets": buckets,
            "shards_held": held,
            "lag_seconds": self.lag().as_secs_f64(),
        })
    }
}
