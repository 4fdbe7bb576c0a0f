//! Delivery targets: how a claimed occurrence reaches the place its timer names. One
//! [`DeliveryTarget`] per [`TargetKind`], side by side in this folder (`http.rs` today);
//! the executor claims, waits for the due instant, has [`Targets`] deliver with the timer's
//! target, and applies the retry policy to the [`Attempt`] it returns, whatever the kind.

pub mod http;
pub mod signing;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{ClaimedOccurrence, Clock, OccurrenceStatus, Outcome, TargetKind, Timer};

pub use http::{CallbackSettings, HostLookup, HttpTarget, SystemLookup};
pub use signing::Signer;

/// What one delivery attempt came to, before the retry policy is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// `succeeded`, or `failed` with what the target reported (an HTTP status and error).
    pub outcome: Outcome,
    /// Whether trying again may help.
    pub retryable: bool,
    /// How long the receiver asked to be left alone (HTTP `Retry-After`).
    pub retry_after: Option<Duration>,
}

/// Delivers one claimed occurrence. Never fails: every failure is an [`Attempt`] outcome.
#[async_trait]
pub trait DeliveryTarget: Send + Sync + 'static {
    async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt;
}

/// The executor's targets, one per kind it can deliver to.
#[derive(Clone)]
pub struct Targets {
    by_kind: HashMap<TargetKind, Arc<dyn DeliveryTarget>>,
}

impl Targets {
    /// What `chime-executor` delivers with: HTTP.
    pub fn new(http: HttpTarget) -> Self {
        Self {
            by_kind: HashMap::new(),
        }
        .with(TargetKind::Http, Arc::new(http))
    }

    /// Delivers `kind` with `target` instead (or as well).
    pub fn with(mut self, kind: TargetKind, target: Arc<dyn DeliveryTarget>) -> Self {
        self.by_kind.insert(kind, target);
        self
    }

    /// Delivers one occurrence of `timer` with the target of its callback's kind; a kind
    /// this executor has no target for fails for good, and says so.
    pub async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        let kind = timer.spec.callback.target_kind();
        match self.by_kind.get(&kind) {
            Some(target) => target.deliver(timer, occurrence, clock).await,
            None => Attempt {
                outcome: Outcome::ended(
                    occurrence.key,
                    occurrence.attempt,
                    OccurrenceStatus::Failed,
                    Some(clock.now()),
                    Some(format!(
                        "this executor cannot deliver to {} targets",
                        kind.as_str()
                    )),
                ),
                retryable: false,
                retry_after: None,
            },
        }
    }
}
