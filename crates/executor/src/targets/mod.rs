//! Delivery targets: how a claimed occurrence reaches the place its timer names. One
//! [`DeliveryTarget`] per [`TargetKind`], side by side in this folder (`http.rs`, `worker.rs`,
//! `nats.rs`, `amqp.rs`);
//! the executor claims, waits for the due instant, has [`Targets`] deliver with the timer's
//! target, and applies the retry policy to the [`Attempt`] it returns, whatever the kind.

pub mod amqp;
mod broadcast;
mod brokers;
pub mod http;
pub mod nats;
pub mod signing;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    ClaimedOccurrence, Clock, OccurrenceStatus, Outcome, TargetKind, Timer, Timestamp,
};

pub use amqp::AmqpTarget;
pub use http::{CallbackSettings, HostLookup, HttpTarget, NotTaken, SystemLookup};
pub use nats::NatsTarget;
pub use signing::Signer;
pub use worker::WorkerTarget;

/// Bytes of what a target answered that a run keeps as its `output`.
pub const OUTPUT_CAP: usize = 4096;

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

impl Attempt {
    /// A failed attempt, fired now, with `error` and no response.
    pub fn failed(
        occurrence: &ClaimedOccurrence,
        clock: &dyn Clock,
        error: String,
        retryable: bool,
    ) -> Self {
        Self::failed_at(occurrence, clock.now(), error, retryable)
    }

    /// A failed attempt that went out at `fired_at`.
    pub fn failed_at(
        occurrence: &ClaimedOccurrence,
        fired_at: chime_domain::Timestamp,
        error: String,
        retryable: bool,
    ) -> Self {
        Self {
            outcome: Outcome::ended(
                occurrence.key,
                occurrence.attempt,
                OccurrenceStatus::Failed,
                Some(fired_at),
                Some(error),
            ),
            retryable,
            retry_after: None,
        }
    }

    /// A delivered attempt, fired at `fired_at`.
    /// This attempt with what the target printed as its output ("" for none).
    pub fn with_output(mut self, output: String) -> Self {
        self.outcome.output = (!output.is_empty()).then_some(output);
        self
    }

    pub fn succeeded(occurrence: &ClaimedOccurrence, fired_at: chime_domain::Timestamp) -> Self {
        Self {
            outcome: Outcome::ended(
                occurrence.key,
                occurrence.attempt,
                OccurrenceStatus::Succeeded,
                Some(fired_at),
                None,
            ),
            retryable: false,
            retry_after: None,
        }
    }
}

/// What a non-HTTP delivery carries: the callback's body, and as headers the callback's,
/// Chime's (idempotency key, attempt, send time, trace context) and the body's signature with
/// the app's secret; and the attempt's `fired_at`, taken once it is signed, which its
/// `X-Chime-Sent-At` names. `Err`: the attempt that ends it (the signature could not be
/// made: the database is away, retry later).
pub(crate) async fn prepare<'a>(
    signer: Option<&Arc<Signer>>,
    timer: &'a Timer,
    occurrence: &ClaimedOccurrence,
    clock: &dyn Clock,
) -> Result<(&'a str, Vec<(String, String)>, Timestamp), Box<Attempt>> {
    let body = timer.spec.callback.body.as_ref().map_or("", |b| b.as_str());
    let signed = match signer {
        None => None,
        Some(signer) => Some(
            signer
                .headers(&timer.spec.app, occurrence.key, body.as_bytes())
                .await
                .map_err(|e| {
                    let error = format!("cannot sign the delivery: {e}");
                    Box::new(Attempt::failed(occurrence, clock, error, true))
                })?,
        ),
    };
    let fired_at = clock.now();
    let headers: Vec<(String, String)> = timer
        .spec
        .callback
        .headers
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain(http::chime_headers(occurrence, fired_at).map(|(k, v)| (k.to_owned(), v)))
        .chain(signed.into_iter().flatten().map(|(k, v)| (k.to_owned(), v)))
        .collect();
    Ok((body, headers, fired_at))
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
        let mut attempt = match self.by_kind.get(&kind) {
            Some(target) => target.deliver(timer, occurrence, clock).await,
            None => Attempt::failed(
                &occurrence,
                clock,
                format!("this executor cannot deliver to {} targets", kind.as_str()),
                false,
            ),
        };
        // One place for every target: a callee that answers with secrets keeps none.
        if !timer.spec.callback.keep_output {
            attempt.outcome.output = None;
        }
        attempt
    }
}
