//! Where an occurrence goes besides an HTTP URL: a group of registered workers, a NATS
//! JetStream subject, an AMQP exchange. Each is named in a callback by one field (`url`,
//! `worker`, `nats`, `amqp`); [`Target`] is that choice once checked.

use serde::{Deserialize, Serialize};
use url::Url;

use crate::callback::{
    Callback, CallbackBody, CallbackHeaders, CallbackTimeout, CallbackUrl, HttpMethod,
};
use crate::error::ValidationError;
use crate::limits;

/// Which place a callback delivers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Http(CallbackUrl),
    Worker(WorkerTarget),
    Nats(NatsTarget),
    Amqp(AmqpTarget),
}

/// The kinds of place an occurrence can be delivered to. Each has one delivery target in the
/// executor (`crates/executor/src/targets/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    Http,
    Worker,
    Nats,
    Amqp,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Worker => "worker",
            Self::Nats => "nats",
            Self::Amqp => "amqp",
        }
    }
}

impl Target {
    pub fn kind(&self) -> TargetKind {
        match self {
            Self::Http(_) => TargetKind::Http,
            Self::Worker(_) => TargetKind::Worker,
            Self::Nats(_) => TargetKind::Nats,
            Self::Amqp(_) => TargetKind::Amqp,
        }
    }

    /// The broker a NATS or AMQP target publishes to.
    pub fn broker(&self) -> Option<&BrokerUrl> {
        match self {
            Self::Nats(n) => Some(&n.url),
            Self::Amqp(a) => Some(&a.url),
            Self::Http(_) | Self::Worker(_) => None,
        }
    }
}

/// A name made of ASCII letters, digits and `_ - . :`, 1 to `max` long: worker groups, NATS
/// subjects (also `*`, `>` are refused: a publish names one subject), AMQP exchanges and
/// routing keys.
fn token(field: &str, s: &str, max: usize, extra: &[char]) -> Result<String, ValidationError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c) || extra.contains(&c);
    if s.is_empty() || s.len() > max || !s.chars().all(ok) {
        return Err(ValidationError::new(
            field,
            format!("must be 1 to {max} of A-Z a-z 0-9 _ - . :"),
        ));
    }
    Ok(s.to_owned())
}

/// Registered workers of the timer's app that named this group when they connected.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerTarget {
    #[serde(deserialize_with = "de_group")]
    pub group: String,
    /// Which of the group's workers takes each run.
    #[serde(default, skip_serializing_if = "Route::is_least_busy")]
    pub route: Route,
    /// Each run goes to every worker of the group connected at its first attempt, each
    /// told its shard index and the total.
    #[serde(default, skip_serializing_if = "is_false")]
    pub broadcast: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl WorkerTarget {
    pub fn parse(group: &str) -> Result<Self, ValidationError> {
        Ok(Self {
            group: worker_group(group)?,
            route: Route::LeastBusy,
            broadcast: false,
        })
    }
}

/// How a run picks one worker of its group, among those connected to any executor.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The worker with the fewest runs in flight (of those on the executor that claimed the
    /// run, else another executor's).
    #[default]
    LeastBusy,
    /// Each worker in turn.
    RoundRobin,
    /// The same worker for a timer while the group's workers stay the same; when one joins
    /// or leaves, only the timers it takes or held move.
    ConsistentHash,
    /// The worker registered earliest of those connected; the next one once it leaves.
    Failover,
}

impl Route {
    pub const ALL: [Self; 4] = [
        Self::LeastBusy,
        Self::RoundRobin,
        Self::ConsistentHash,
        Self::Failover,
    ];

    pub fn is_least_busy(&self) -> bool {
        *self == Self::LeastBusy
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeastBusy => "least_busy",
            Self::RoundRobin => "round_robin",
            Self::ConsistentHash => "consistent_hash",
            Self::Failover => "failover",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "route",
                    format!(
                        "{s:?} is not one of least_busy, round_robin, consistent_hash, failover"
                    ),
                )
            })
    }
}

/// A worker group's name: 1 to 64 of A-Z a-z 0-9 _ - . :
pub fn worker_group(s: &str) -> Result<String, ValidationError> {
    token("group", s, 64, &[])
}

fn de_group<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    worker_group(&s).map_err(serde::de::Error::custom)
}

/// A broker's URL: `nats://` (NATS) or `amqp://` / `amqps://` (AMQP 0-9-1), as listed in
/// `CHIME_BROKERS`. Compared as written after URL normalisation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BrokerUrl(Url);

impl BrokerUrl {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        let err = |m: String| ValidationError::new("url", m);
        if s.len() > limits::MAX_URL_LEN {
            return Err(err("must be at most 2048 bytes".into()));
        }
        let url = Url::parse(s.trim()).map_err(|e| err(format!("invalid URL {s:?}: {e}")))?;
        if !matches!(url.scheme(), "nats" | "amqp" | "amqps") {
            return Err(err(format!(
                "scheme {:?} is not a broker's; use nats, amqp or amqps",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(err("must name a host".into()));
        }
        Ok(Self(url))
    }

    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The URL without its password, for errors and logs.
    pub fn redacted(&self) -> String {
        let mut u = self.0.clone();
        if u.password().is_some() {
            let _ = u.set_password(Some("***"));
        }
        u.to_string()
    }
}

impl TryFrom<String> for BrokerUrl {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<BrokerUrl> for String {
    fn from(u: BrokerUrl) -> Self {
        u.0.into()
    }
}

/// A JetStream publish: the subject must belong to a stream on that server.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsTarget {
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "nats://127.0.0.1:4222"))]
    pub url: BrokerUrl,
    #[serde(deserialize_with = "de_subject")]
    pub subject: String,
}

fn nats_subject(s: &str) -> Result<String, ValidationError> {
    // Dots separate tokens; an empty token (`a..b`, a leading or trailing dot) is invalid.
    let subject = token("subject", s, 255, &[])?;
    if subject.split('.').any(str::is_empty) {
        return Err(ValidationError::new(
            "subject",
            "must not have empty tokens between dots",
        ));
    }
    Ok(subject)
}

fn de_subject<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    nats_subject(&s).map_err(serde::de::Error::custom)
}

/// A publish to an AMQP exchange (`""`: the default exchange, routing by queue name).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpTarget {
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "amqp://guest:guest@127.0.0.1:5672/%2f"))]
    pub url: BrokerUrl,
    #[serde(default, deserialize_with = "de_exchange")]
    pub exchange: String,
    #[serde(deserialize_with = "de_routing_key")]
    pub routing_key: String,
}

fn amqp_exchange(s: &str) -> Result<String, ValidationError> {
    if s.is_empty() {
        return Ok(String::new());
    }
    token("exchange", s, 127, &[])
}

fn amqp_routing_key(s: &str) -> Result<String, ValidationError> {
    token("routing_key", s, 255, &[])
}

fn de_exchange<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    amqp_exchange(&s).map_err(serde::de::Error::custom)
}

fn de_routing_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    amqp_routing_key(&s).map_err(serde::de::Error::custom)
}

/// The targets other than a URL as a request spells them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerInput {
    pub group: String,
    /// `least_busy` (the default), `round_robin`, `consistent_hash` or `failover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Every worker of the group takes each run, as one shard of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<bool>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsInput {
    pub url: String,
    pub subject: String,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpInput {
    pub url: String,
    #[serde(default)]
    pub exchange: String,
    pub routing_key: String,
}

impl WorkerInput {
    pub fn parse(&self) -> Result<WorkerTarget, ValidationError> {
        let mut target = WorkerTarget::parse(&self.group).map_err(|e| e.within("worker"))?;
        if let Some(route) = self.route.as_deref().filter(|r| !r.is_empty()) {
            target.route = Route::parse(route).map_err(|e| e.within("worker"))?;
        }
        target.broadcast = self.broadcast.unwrap_or(false);
        if target.broadcast && !target.route.is_least_busy() {
            return Err(ValidationError::new(
                "worker.route",
                "does not apply with broadcast: every worker takes each run",
            ));
        }
        Ok(target)
    }
}

impl NatsInput {
    pub fn parse(&self) -> Result<NatsTarget, ValidationError> {
        let under = |e: ValidationError| e.within("nats");
        let url = BrokerUrl::parse(&self.url).map_err(under)?;
        if url.scheme() != "nats" {
            return Err(ValidationError::new("nats.url", "must be a nats:// URL"));
        }
        Ok(NatsTarget {
            url,
            subject: nats_subject(&self.subject).map_err(under)?,
        })
    }
}

impl AmqpInput {
    pub fn parse(&self) -> Result<AmqpTarget, ValidationError> {
        let under = |e: ValidationError| e.within("amqp");
        let url = BrokerUrl::parse(&self.url).map_err(under)?;
        if url.scheme() == "nats" {
            return Err(ValidationError::new(
                "amqp.url",
                "must be an amqp:// or amqps:// URL",
            ));
        }
        Ok(AmqpTarget {
            url,
            exchange: amqp_exchange(&self.exchange).map_err(under)?,
            routing_key: amqp_routing_key(&self.routing_key).map_err(under)?,
        })
    }
}

impl From<&WorkerTarget> for WorkerInput {
    fn from(t: &WorkerTarget) -> Self {
        Self {
            group: t.group.clone(),
            route: (!t.route.is_least_busy()).then(|| t.route.as_str().to_owned()),
            broadcast: t.broadcast.then_some(true),
        }
    }
}

impl From<&NatsTarget> for NatsInput {
    fn from(t: &NatsTarget) -> Self {
        Self {
            url: t.url.as_str().to_owned(),
            subject: t.subject.clone(),
        }
    }
}

impl From<&AmqpTarget> for AmqpInput {
    fn from(t: &AmqpTarget) -> Self {
        Self {
            url: t.url.as_str().to_owned(),
            exchange: t.exchange.clone(),
            routing_key: t.routing_key.clone(),
        }
    }
}

/// The stored (JSON) form: the target as one of four optional fields.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CallbackRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<CallbackUrl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worker: Option<WorkerTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nats: Option<NatsTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    amqp: Option<AmqpTarget>,
    #[serde(default)]
    method: HttpMethod,
    #[serde(default, skip_serializing_if = "CallbackHeaders::is_empty")]
    headers: CallbackHeaders,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<CallbackBody>,
    #[serde(default)]
    timeout: CallbackTimeout,
    #[serde(default = "keeps_output", skip_serializing_if = "keeps")]
    keep_output: bool,
}

/// Specs stored before `keep_output` existed kept output.
fn keeps_output() -> bool {
    true
}

fn keeps(keep: &bool) -> bool {
    *keep
}

pub(crate) const ONE_TARGET: &str = "give exactly one of url, worker, nats or amqp";

pub(crate) fn one_target(
    url: Option<CallbackUrl>,
    worker: Option<WorkerTarget>,
    nats: Option<NatsTarget>,
    amqp: Option<AmqpTarget>,
) -> Result<Target, ValidationError> {
    match (url, worker, nats, amqp) {
        (Some(u), None, None, None) => Ok(Target::Http(u)),
        (None, Some(w), None, None) => Ok(Target::Worker(w)),
        (None, None, Some(n), None) => Ok(Target::Nats(n)),
        (None, None, None, Some(a)) => Ok(Target::Amqp(a)),
        (None, None, None, None) => Err(ValidationError::new(
            "url",
            "is required, unless the callback names a worker, nats or amqp target",
        )),
        _ => Err(ValidationError::new("", ONE_TARGET)),
    }
}

impl TryFrom<CallbackRepr> for Callback {
    type Error = ValidationError;
    fn try_from(r: CallbackRepr) -> Result<Self, Self::Error> {
        Ok(Self {
            target: one_target(r.url, r.worker, r.nats, r.amqp)?,
            method: r.method,
            headers: r.headers,
            body: r.body,
            timeout: r.timeout,
            keep_output: r.keep_output,
        })
    }
}

impl From<Callback> for CallbackRepr {
    fn from(c: Callback) -> Self {
        let (mut url, mut worker, mut nats, mut amqp) = (None, None, None, None);
        match c.target {
            Target::Http(u) => url = Some(u),
            Target::Worker(w) => worker = Some(w),
            Target::Nats(n) => nats = Some(n),
            Target::Amqp(a) => amqp = Some(a),
        }
        Self {
            url,
            worker,
            nats,
            amqp,
            method: c.method,
            headers: c.headers,
            body: c.body,
            timeout: c.timeout,
            keep_output: c.keep_output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_route_is_parsed_kept_and_shown_only_when_not_the_default() {
        let input = |route: Option<&str>| WorkerInput {
            group: "jobs".into(),
            route: route.map(str::to_owned),
            broadcast: None,
        };
        let broadcast = WorkerInput {
            broadcast: Some(true),
            ..input(None)
        };
        let parsed = broadcast.parse().unwrap();
        assert!(parsed.broadcast);
        assert_eq!(
            serde_json::to_string(&parsed).unwrap(),
            r#"{"group":"jobs","broadcast":true}"#
        );
        assert_eq!(WorkerInput::from(&parsed).broadcast, Some(true));
        let both = WorkerInput {
            broadcast: Some(true),
            ..input(Some("failover"))
        };
        assert_eq!(both.parse().unwrap_err().field, "worker.route");
        assert_eq!(input(None).parse().unwrap().route, Route::LeastBusy);
        assert_eq!(input(Some("")).parse().unwrap().route, Route::LeastBusy);
        let hashed = input(Some("consistent_hash")).parse().unwrap();
        assert_eq!(hashed.route, Route::ConsistentHash);
        assert_eq!(
            serde_json::to_string(&hashed).unwrap(),
            r#"{"group":"jobs","route":"consistent_hash"}"#
        );
        assert_eq!(
            serde_json::to_string(&input(None).parse().unwrap()).unwrap(),
            r#"{"group":"jobs"}"#
        );
        assert_eq!(
            WorkerInput::from(&hashed).route.as_deref(),
            Some("consistent_hash")
        );
        assert_eq!(WorkerInput::from(&input(None).parse().unwrap()).route, None);
        let bad = input(Some("random")).parse().unwrap_err();
        assert_eq!(bad.field, "worker.route");
        for r in Route::ALL {
            assert_eq!(Route::parse(r.as_str()), Ok(r));
        }
    }

    #[test]
    fn names_are_checked_and_broker_schemes_match_their_kind() {
        assert!(WorkerTarget::parse("invoices").is_ok());
        assert_eq!(WorkerTarget::parse("bad group").unwrap_err().field, "group");
        let nats = NatsInput {
            url: "nats://127.0.0.1:4222".into(),
            subject: "chime.fire".into(),
        };
        assert!(nats.parse().is_ok());
        for bad in ["a..b", ".a", "a.*", "a >"] {
            let err = NatsInput {
                subject: bad.into(),
                ..nats.clone()
            }
            .parse()
            .unwrap_err();
            assert_eq!(err.field, "nats.subject", "{bad}");
        }
        let wrong = NatsInput {
            url: "amqp://h".into(),
            ..nats.clone()
        };
        assert_eq!(wrong.parse().unwrap_err().field, "nats.url");
        let amqp = AmqpInput {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            exchange: String::new(),
            routing_key: "jobs".into(),
        };
        let parsed = amqp.parse().unwrap();
        assert_eq!(parsed.url.redacted(), "amqp://guest:***@127.0.0.1:5672/%2f");
        assert_eq!(
            AmqpInput {
                url: "http://h/".into(),
                ..amqp
            }
            .parse()
            .unwrap_err()
            .field,
            "amqp.url"
        );
    }
}
