//! A replica's place in its group: it heartbeats its membership, learns the live members,
//! and publishes which buckets it owns ([`Ownership`]). Schedulers and migrators take
//! leases only for their own buckets, so N replicas each work about 1/N of them.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{BucketCount, Clock, Ownership};
use chime_storage::{LeaseToken, Membership};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a replica heartbeats, and how long a missed heartbeat leaves it a member.
#[derive(Debug, Clone, Copy)]
pub struct RosterSettings {
    pub heartbeat: Duration,
    pub ttl: Duration,
}

pub struct Roster {
    membership: Arc<dyn Membership>,
    group: &'static str,
    /// The replica's lease token: a lease it holds names it as a member.
    token: LeaseToken,
    buckets: BucketCount,
    settings: RosterSettings,
    clock: Arc<dyn Clock>,
    view: watch::Sender<Ownership>,
}

impl Roster {
    /// Until its first heartbeat answers, a replica owns nothing: seeing itself alone, it
    /// would take every lease from its live peers.
    pub fn new(
        membership: Arc<dyn Membership>,
        group: &'static str,
        token: LeaseToken,
        buckets: BucketCount,
        settings: RosterSettings,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        let unknown = Ownership::new(token.as_str(), buckets, Vec::new());
        Arc::new(Self {
            membership,
            group,
            token,
            buckets,
            settings,
            clock,
            view: watch::Sender::new(unknown),
        })
    }

    /// The current view.
    pub fn ownership(&self) -> Ownership {
        self.view.borrow().clone()
    }

    /// Wakes when the view changes.
    pub fn subscribe(&self) -> watch::Receiver<Ownership> {
        self.view.subscribe()
    }

    /// One heartbeat; the view it leads to.
    pub async fn beat(&self) -> Ownership {
        match self
            .membership
            .heartbeat(self.group, self.token.as_str(), self.settings.ttl)
            .await
        {
            Ok(members) => {
                let seen = Ownership::new(self.token.as_str(), self.buckets, members);
                self.view.send_if_modified(|view| {
                    let changed = *view != seen;
                    if changed {
                        tracing::info!(
                            group = self.group,
                            members = seen.members().len(),
                            owned = seen.mine().len(),
                            "group membership changed"
                        );
                        *view = seen;
                    }
                    changed
                });
            }
            // The last view stands; leases keep replicas apart meanwhile.
            Err(e) => tracing::warn!(group = self.group, error = %e, "heartbeat failed"),
        }
        self.ownership()
    }

    /// Heartbeats every `heartbeat` until `stop`, then leaves the group at once so peers
    /// take over without waiting for a lapse.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            self.beat().await;
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.clock.sleep(self.settings.heartbeat) => {}
            }
        }
        self.leave().await;
    }

    /// Leaves the group now.
    pub async fn leave(&self) {
        if let Err(e) = self.membership.leave(self.group, self.token.as_str()).await {
            tracing::warn!(group = self.group, error = %e, "cannot leave the group; it will lapse");
        }
    }
}
