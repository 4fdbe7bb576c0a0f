use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::duration::{format_duration, parse_duration};
use crate::error::ValidationError;
use crate::limits;
use crate::target::{AmqpInput, NatsInput, Target, TargetKind, WorkerInput, one_target};

/// An absolute `http` or `https` URL with a host, at most 2048 bytes, no credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CallbackUrl(Url);

impl CallbackUrl {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        let err = |m: String| ValidationError::new("url", m);
        if s.len() > limits::MAX_URL_LEN {
            return Err(err("must be at most 2048 bytes".into()));
        }
        let url = Url::parse(s.trim()).map_err(|e| err(format!("invalid URL {s:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(err(format!(
                "scheme {:?} is not allowed; use http or https",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(err("must name a host".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(err(
                "must not carry credentials; send them in a header instead".into(),
            ));
        }
        Ok(Self(url))
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl TryFrom<String> for CallbackUrl {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<CallbackUrl> for String {
    fn from(u: CallbackUrl) -> Self {
        u.0.into()
    }
}

impl fmt::Display for CallbackUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The HTTP methods a callback may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    #[default]
    Post,
    Put,
    Patch,
    Delete,
}

impl HttpMethod {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "GET" => Ok(Self::Get),
            "POST" => Ok(Self::Post),
            "PUT" => Ok(Self::Put),
            "PATCH" => Ok(Self::Patch),
            "DELETE" => Ok(Self::Delete),
            _ => Err(ValidationError::new(
                "method",
                format!("{s:?} is not one of GET, POST, PUT, PATCH, DELETE"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }
}

/// Headers Chime sets itself on every callback; a timer may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "idempotency-key",
    "traceparent",
    "tracestate",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// Callback headers: at most 32, valid HTTP names and values, values at most 4 KiB, none of
/// the reserved ones (`Idempotency-Key`, `X-Chime-*`, hop-by-hop headers). Names are stored
/// lowercase and sorted, so two equal header sets compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "BTreeMap<String, String>",
    into = "BTreeMap<String, String>"
)]
pub struct CallbackHeaders(BTreeMap<String, String>);

impl CallbackHeaders {
    pub fn parse(raw: BTreeMap<String, String>) -> Result<Self, ValidationError> {
        if raw.len() > limits::MAX_HEADERS {
            return Err(ValidationError::new(
                "headers",
                format!("at most {} headers are allowed", limits::MAX_HEADERS),
            ));
        }
        let mut out = BTreeMap::new();
        for (name, value) in raw {
            let field = format!("headers.{name}");
            let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ValidationError::new(&field, format!("{name:?} is not a valid header name"))
            })?;
            let lower = parsed.as_str().to_owned();
            if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-chime-") {
                return Err(ValidationError::new(
                    &field,
                    format!("{name:?} is set by Chime and cannot be overridden"),
                ));
            }
            if value.len() > limits::MAX_HEADER_VALUE_LEN {
                return Err(ValidationError::new(
                    &field,
                    "value must be at most 4096 bytes",
                ));
            }
            HeaderValue::from_str(&value).map_err(|_| {
                ValidationError::new(&field, "value has characters not allowed in a header")
            })?;
            if out.insert(lower, value).is_some() {
                return Err(ValidationError::new(&field, "header given twice"));
            }
        }
        Ok(Self(out))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl TryFrom<BTreeMap<String, String>> for CallbackHeaders {
    type Error = ValidationError;
    fn try_from(raw: BTreeMap<String, String>) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

impl From<CallbackHeaders> for BTreeMap<String, String> {
    fn from(h: CallbackHeaders) -> Self {
        h.0
    }
}

/// A callback body of at most 64 KiB.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CallbackBody(String);

impl CallbackBody {
    pub fn parse(s: String) -> Result<Self, ValidationError> {
        if s.len() > limits::MAX_BODY_BYTES {
            return Err(ValidationError::new("body", "must be at most 65536 bytes"));
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CallbackBody {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<CallbackBody> for String {
    fn from(b: CallbackBody) -> Self {
        b.0
    }
}

/// How long one callback attempt may take: 100 ms to 5 min, default 5 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CallbackTimeout(Duration);

impl CallbackTimeout {
    pub const DEFAULT: Self = Self(Duration::from_secs(5));

    pub fn new(d: Duration) -> Result<Self, ValidationError> {
        let ms = d.as_millis() as i64;
        if !(limits::MIN_CALLBACK_TIMEOUT_MS..=limits::MAX_CALLBACK_TIMEOUT_MS).contains(&ms) {
            return Err(ValidationError::new(
                "timeout",
                "must be between 100ms and 5m",
            ));
        }
        Ok(Self(d))
    }

    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        Self::new(parse_duration(s).map_err(|m| ValidationError::new("timeout", m))?)
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

impl Default for CallbackTimeout {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<String> for CallbackTimeout {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<CallbackTimeout> for String {
    fn from(t: CallbackTimeout) -> Self {
        format_duration(t.0)
    }
}

/// Where and how a timer's occurrence is delivered: one target (`url`, `worker`, `nats` or
/// `amqp`), and what every kind carries (the body, headers, the timeout of one attempt; the
/// method only matters to HTTP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "crate::target::CallbackRepr",
    into = "crate::target::CallbackRepr"
)]
pub struct Callback {
    pub target: Target,
    pub method: HttpMethod,
    pub headers: CallbackHeaders,
    pub body: Option<CallbackBody>,
    pub timeout: CallbackTimeout,
    /// Keep what the target answers (an HTTP response body, a worker's output) as the run's
    /// output; off for callees whose answers hold secrets.
    pub keep_output: bool,
}

impl Callback {
    /// An HTTP callback to `url` with every other field at its default.
    pub fn http(url: CallbackUrl) -> Self {
        Self {
            target: Target::Http(url),
            method: HttpMethod::default(),
            headers: CallbackHeaders::default(),
            body: None,
            timeout: CallbackTimeout::default(),
            keep_output: true,
        }
    }

    /// Which kind of target delivers this callback.
    pub fn target_kind(&self) -> TargetKind {
        self.target.kind()
    }

    /// The URL of an HTTP callback.
    pub fn url(&self) -> Option<&CallbackUrl> {
        match &self.target {
            Target::Http(u) => Some(u),
            _ => None,
        }
    }
}

/// The callback as a request spells it, every field a plain value; [`CallbackInput::parse`]
/// checks them all and names the first bad one as `callback.<field>`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackInput {
    /// An HTTP callback to this URL; or one of `worker`, `nats`, `amqp` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Deliver to a registered worker of the timer's app in this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInput>,
    /// Publish to a NATS JetStream subject (the server must be listed in `CHIME_BROKERS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsInput>,
    /// Publish to an AMQP exchange (the server must be listed in `CHIME_BROKERS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amqp: Option<AmqpInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Keep what the target answers (an HTTP response body, a worker's stdout and stderr) as
    /// each run's `output`; default true. false for callees whose answers hold secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_output: Option<bool>,
}

impl CallbackInput {
    pub fn parse(self) -> Result<Callback, ValidationError> {
        let under = |e: ValidationError| e.within("callback");
        let target = one_target(
            self.url
                .as_deref()
                .map(CallbackUrl::parse)
                .transpose()
                .map_err(under)?,
            self.worker
                .as_ref()
                .map(WorkerInput::parse)
                .transpose()
                .map_err(under)?,
            self.nats
                .as_ref()
                .map(NatsInput::parse)
                .transpose()
                .map_err(under)?,
            self.amqp
                .as_ref()
                .map(AmqpInput::parse)
                .transpose()
                .map_err(under)?,
        )
        .map_err(under)?;
        Ok(Callback {
            target,
            method: self
                .method
                .as_deref()
                .map(HttpMethod::parse)
                .transpose()
                .map_err(under)?
                .unwrap_or_default(),
            headers: CallbackHeaders::parse(self.headers).map_err(under)?,
            body: self
                .body
                .map(CallbackBody::parse)
                .transpose()
                .map_err(under)?,
            timeout: self
                .timeout
                .as_deref()
                .map(CallbackTimeout::parse)
                .transpose()
                .map_err(under)?
                .unwrap_or_default(),
            keep_output: self.keep_output.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(url: &str) -> CallbackInput {
        CallbackInput {
            url: Some(url.into()),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_full_callback() {
        let cb = CallbackInput {
            url: Some("https://billing.internal:8443/run?x=1".into()),
            method: Some("put".into()),
            headers: BTreeMap::from([("X-Job".into(), "invoice".into())]),
            body: Some("{}".into()),
            timeout: Some("2s".into()),
            ..Default::default()
        }
        .parse()
        .unwrap();
        assert_eq!(cb.method, HttpMethod::Put);
        assert_eq!(
            cb.headers.iter().collect::<Vec<_>>(),
            vec![("x-job", "invoice")]
        );
        assert_eq!(cb.timeout.get(), Duration::from_secs(2));
    }

    #[test]
    fn rejects_bad_urls_naming_the_field() {
        for bad in [
            "ftp://x/y",
            "not a url",
            "http://",
            "/relative",
            "https://u:p@host/",
        ] {
            let err = input(bad).parse().unwrap_err();
            assert_eq!(err.field, "callback.url", "{bad:?}: {err}");
        }
        let long = format!("http://h/{}", "a".repeat(limits::MAX_URL_LEN));
        assert_eq!(input(&long).parse().unwrap_err().field, "callback.url");
    }

    #[test]
    fn rejects_bad_headers() {
        let with = |k: &str, v: &str| CallbackInput {
            headers: BTreeMap::from([(k.into(), v.into())]),
            ..input("http://h/")
        };
        for (k, v) in [
            ("bad name", "v"),
            ("X-Ok", "line\nbreak"),
            ("Idempotency-Key", "mine"),
            ("X-Chime-Attempt", "9"),
            ("Host", "evil"),
        ] {
            let err = with(k, v).parse().unwrap_err();
            assert!(err.field.starts_with("callback.headers."), "{k}: {err}");
        }
        let huge = "v".repeat(limits::MAX_HEADER_VALUE_LEN + 1);
        assert!(with("X-Big", &huge).parse().is_err());
        let many = CallbackInput {
            headers: (0..=limits::MAX_HEADERS)
                .map(|i| (format!("x-h{i}"), "v".to_owned()))
                .collect(),
            ..input("http://h/")
        };
        assert_eq!(many.parse().unwrap_err().field, "callback.headers");
    }

    #[test]
    fn rejects_oversized_body_bad_method_and_timeout() {
        let body = CallbackInput {
            body: Some("b".repeat(limits::MAX_BODY_BYTES + 1)),
            ..input("http://h/")
        };
        assert_eq!(body.parse().unwrap_err().field, "callback.body");
        let method = CallbackInput {
            method: Some("TRACE".into()),
            ..input("http://h/")
        };
        assert_eq!(method.parse().unwrap_err().field, "callback.method");
        for t in ["50ms", "6m", "soon"] {
            let timeout = CallbackInput {
                timeout: Some(t.into()),
                ..input("http://h/")
            };
            assert_eq!(
                timeout.parse().unwrap_err().field,
                "callback.timeout",
                "{t}"
            );
        }
    }

    #[test]
    fn exactly_one_target_is_named() {
        let none = CallbackInput::default().parse().unwrap_err();
        assert_eq!(none.field, "callback.url");
        let two = CallbackInput {
            worker: Some(WorkerInput {
                group: "g".into(),
                route: None,
                broadcast: None,
            }),
            ..input("http://h/")
        };
        assert_eq!(two.parse().unwrap_err().message, crate::target::ONE_TARGET);
        let worker = CallbackInput {
            worker: Some(WorkerInput {
                group: "invoices".into(),
                route: None,
                broadcast: None,
            }),
            body: Some("{}".into()),
            ..Default::default()
        }
        .parse()
        .unwrap();
        assert_eq!(worker.target_kind(), TargetKind::Worker);
        // The stored form round-trips and names the target by its field.
        let json = serde_json::to_string(&worker).unwrap();
        assert!(
            json.starts_with(r#"{"worker":{"group":"invoices"}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Callback>(&json).unwrap(), worker);
        assert!(serde_json::from_str::<Callback>(r#"{"timeout":"5s"}"#).is_err());
    }

    #[test]
    fn stored_form_revalidates() {
        let ok: Callback = serde_json::from_str(r#"{"url":"http://h/x"}"#).unwrap();
        assert_eq!(ok.timeout, CallbackTimeout::DEFAULT);
        assert!(serde_json::from_str::<Callback>(r#"{"url":"file:///etc/passwd"}"#).is_err());
    }
}
