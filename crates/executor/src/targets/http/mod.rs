//! The HTTP target: the request a timer's callback describes, with Chime's headers, and its
//! result as an [`Outcome`].

mod client;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chime_domain::{
    ClaimedOccurrence, Clock, NetworkPolicy, OccurrenceStatus, Outcome, Timer, Timestamp,
};
use http::{HeaderName, HeaderValue};
use http_body_util::Full;

use client::{CallbackClient, CallbackRequest, Failure};

use super::signing::Signer;
use super::{Attempt, DeliveryTarget};

#[derive(Debug, Clone)]
pub struct CallbackSettings {
    /// Response bytes kept as the run's `output`; the rest is read and dropped.
    pub output_cap: usize,
    /// Idle keep-alive connections kept per callback host.
    pub idle_per_host: usize,
    /// Which addresses callbacks may connect to (the SSRF policy).
    pub networks: NetworkPolicy,
    /// How host names become addresses: the system resolver, or a test's.
    pub lookup: Arc<dyn HostLookup>,
}

/// Resolves a callback's host name to addresses (each is then checked by the policy).
#[async_trait]
pub trait HostLookup: Send + Sync + std::fmt::Debug + 'static {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<std::net::IpAddr>>;
}

/// The system resolver (getaddrinfo, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

#[async_trait]
impl HostLookup for SystemLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|a| a.ip())
            .collect())
    }
}

impl Default for CallbackSettings {
    fn default() -> Self {
        Self {
            output_cap: super::OUTPUT_CAP,
            idle_per_host: 64,
            networks: NetworkPolicy::default(),
            lookup: Arc::new(SystemLookup),
        }
    }
}

impl CallbackSettings {
    /// Keeps as many idle connections per host as the executor has callbacks in flight:
    /// a burst opens up to that many at once, and dropping all but a few after each wave
    /// made the next wave connect again.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        Self {
            idle_per_host: config.executor.max_in_flight,
            // `Config::load` has checked every network already.
            networks: config.network_policy().unwrap_or_default(),
            ..Self::default()
        }
    }
}

/// Whether an HTTP status is worth retrying.
pub fn retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..=599).contains(&status)
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3), relative to `now_ms`.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let ms = at.timestamp_millis() - now_ms;
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// The callback client and what each callback carries, shared by every callback of an
/// executor.
#[derive(Clone)]
pub struct HttpTarget {
    client: CallbackClient,
    settings: CallbackSettings,
    /// Signs every callback (Standard Webhooks) when set.
    signer: Option<Arc<Signer>>,
}

impl HttpTarget {
    /// Fails only if the platform's certificate verifier cannot be set up.
    pub fn new(settings: CallbackSettings) -> Result<Self, rustls::Error> {
        let client = CallbackClient::new(
            settings.networks.clone(),
            settings.lookup.clone(),
            settings.idle_per_host,
        )?;
        Ok(Self {
            client,
            settings,
            signer: None,
        })
    }

    /// Signs every callback with its app's secrets.
    pub fn with_signer(mut self, signer: Arc<Signer>) -> Self {
        self.signer = Some(signer);
        self
    }
}

#[async_trait]
impl DeliveryTarget for HttpTarget {
    /// Calls the timer's callback for one claimed occurrence; never fails, every failure
    /// is an outcome.
    async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        let cb = &timer.spec.callback;
        let Some(url) = cb.url() else {
            return Attempt::failed(&occurrence, clock, "not an HTTP callback".into(), false);
        };
        let key = occurrence.key;
        let body = cb.body.as_ref().map_or("", |b| b.as_str());
        let signed = match &self.signer {
            None => Ok(None),
            Some(signer) => signer
                .headers(&timer.spec.app, key, body.as_bytes())
                .await
                .map(Some),
        };
        let fired_at = clock.now();
        let mut attempt = Attempt {
            outcome: Outcome::ended(
                key,
                occurrence.attempt,
                OccurrenceStatus::Failed,
                Some(fired_at),
                None,
            ),
            retryable: false,
            retry_after: None,
        };
        let signature = match signed {
            Ok(signature) => signature,
            Err(e) => {
                // An unsigned callback would be refused by a receiver that verifies; try
                // again once the database answers.
                attempt.outcome.error = Some(format!("cannot sign the callback: {e}"));
                attempt.retryable = true;
                return attempt;
            }
        };
        if let Err(blocked) = self.settings.networks.check_url(url.as_url()) {
            // Refused by policy, not by the network: trying again cannot help.
            attempt.outcome.error = Some(blocked_by_policy(blocked));
            return attempt;
        }
        match self.request(timer, url, &occurrence, fired_at, signature) {
            Ok(request) => {
                self.send(request, cb.timeout.get(), clock, &mut attempt)
                    .await
            }
            // A request that cannot even be built will not be buildable next time either.
            Err(e) => attempt.outcome.error = Some(format!("callback failed: {e}")),
        }
        attempt
    }
}

/// Why a [`HttpTarget::post_signed`] was not taken, and whether trying again may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotTaken {
    pub error: String,
    pub retryable: bool,
}

impl HttpTarget {
    /// POSTs the JSON `body` to `url` as message `id` of `app`, signed like a callback
    /// (when this target signs) and under the same network policy. `Ok` on a 2xx answer.
    pub async fn post_signed(
        &self,
        app: &chime_domain::AppName,
        id: String,
        url: &chime_domain::CallbackUrl,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), NotTaken> {
        let fail = |error: String, retryable: bool| NotTaken { error, retryable };
        if let Err(blocked) = self.settings.networks.check_url(url.as_url()) {
            return Err(fail(blocked_by_policy(blocked), false));
        }
        let signed = match &self.signer {
            None => None,
            Some(signer) => Some(
                signer
                    .headers_for(app, id, &body)
                    .await
                    .map_err(|e| fail(format!("cannot sign: {e}"), true))?,
            ),
        };
        let mut request = new_request(http::Method::POST, url, body.into())
            .map_err(|e| fail(format!("{e}"), false))?;
        let headers = request.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, value) in signed.into_iter().flatten() {
            put(headers, name, value).map_err(|e| fail(format!("{e}"), false))?;
        }
        match self.client.send(request, timeout, 0).await {
            Ok(answer) if answer.status.is_success() => Ok(()),
            Ok(answer) => {
                let status = answer.status.as_u16();
                Err(fail(
                    format!("answered HTTP {status}"),
                    retryable_status(status),
                ))
            }
            Err(e) => Err(fail(describe(&e, timeout), e.retryable())),
        }
    }

    /// The callback's request: the timer's method, headers and body, Chime's headers, the
    /// trace context and the signature.
    fn request(
        &self,
        timer: &Timer,
        url: &chime_domain::CallbackUrl,
        occurrence: &ClaimedOccurrence,
        sent_at: Timestamp,
        signature: Option<[(&'static str, String); 3]>,
    ) -> Result<CallbackRequest, http::Error> {
        let cb = &timer.spec.callback;
        let method =
            http::Method::from_bytes(cb.method.as_str().as_bytes()).unwrap_or(http::Method::POST);
        let body = match &cb.body {
            Some(body) => Bytes::copy_from_slice(body.as_str().as_bytes()),
            None => Bytes::new(),
        };
        let mut request = new_request(method, url, body)?;
        let headers = request.headers_mut();
        for (name, value) in cb.headers.iter() {
            headers.append(
                HeaderName::from_bytes(name.as_bytes())?,
                HeaderValue::from_str(value)?,
            );
        }
        for (name, value) in chime_headers(occurrence, sent_at) {
            put(headers, name, value)?;
        }
        // The callback span's context, so the callee's spans join the firing's trace.
        chime_runtime::inject_context(&tracing::Span::current(), headers);
        for (name, value) in signature.into_iter().flatten() {
            put(headers, name, value)?;
        }
        // As a browser or curl would, unless the timer set its own.
        headers
            .entry(http::header::USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT));
        headers
            .entry(http::header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        Ok(request)
    }

    /// Sends `request` and writes what came back into `attempt`: the status, the capped
    /// body, whether to retry and when.
    async fn send(
        &self,
        request: CallbackRequest,
        timeout: Duration,
        clock: &dyn Clock,
        attempt: &mut Attempt,
    ) {
        let outcome = &mut attempt.outcome;
        match self
            .client
            .send(request, timeout, self.settings.output_cap)
            .await
        {
            Ok(answer) => {
                let status = answer.status.as_u16();
                outcome.http_status = Some(status);
                if matches!(status, 429 | 503) {
                    attempt.retry_after = answer
                        .retry_after
                        .and_then(|v| parse_retry_after(&v, clock.now().as_millis()));
                }
                outcome.output = answer.body;
                if answer.status.is_success() {
                    outcome.status = OccurrenceStatus::Succeeded;
                } else {
                    attempt.retryable = retryable_status(status);
                    outcome.error = Some(format!("callback answered HTTP {status}"));
                }
            }
            Err(failure) => {
                attempt.retryable = failure.retryable();
                outcome.error = Some(describe(&failure, timeout));
            }
        }
    }
}

const USER_AGENT: &str = concat!("chime-executor/", env!("CARGO_PKG_VERSION"));

/// A request to `url` with no headers yet.
fn new_request(
    method: http::Method,
    url: &chime_domain::CallbackUrl,
    body: Bytes,
) -> Result<CallbackRequest, http::Error> {
    http::Request::builder()
        .method(method)
        .uri(url.as_url().as_str())
        .body(Full::new(body))
}

/// Adds one of Chime's own headers (a lowercase name known here).
fn put(
    headers: &mut http::HeaderMap,
    name: &'static str,
    value: String,
) -> Result<(), http::Error> {
    headers.append(HeaderName::from_static(name), HeaderValue::try_from(value)?);
    Ok(())
}

/// The headers Chime sets on every callback (docs/pipeline.md, Executor). The idempotency key and the
/// trace id are the same on every attempt of an occurrence, so retries are recognisable. A
/// run a chain step started names its parent run. `sent_at` (the attempt's `fired_at`) lets
/// a callee tell how late Chime sent from how long the request took to reach it.
pub fn chime_headers(
    occurrence: &ClaimedOccurrence,
    sent_at: Timestamp,
) -> impl Iterator<Item = (&'static str, String)> + use<> {
    let (key, attempt) = (occurrence.key, occurrence.attempt);
    let trace_id = xxhash_rust::xxh3::xxh3_128(key.to_string().as_bytes()).max(1);
    let span_id = rand::random::<u64>().max(1);
    // A fixed array and an option: no allocation per callback for the list itself.
    [
        ("idempotency-key", key.to_string()),
        ("x-chime-timer-id", key.timer_id.to_string()),
        ("x-chime-scheduled-at", key.run_at.to_rfc3339()),
        ("x-chime-attempt", attempt.to_string()),
        ("x-chime-sent-at", sent_at.to_rfc3339()),
        (
            "traceparent",
            format!("00-{trace_id:032x}-{span_id:016x}-01"),
        ),
    ]
    .into_iter()
    .chain(
        occurrence
            .parent
            .map(|parent| ("x-chime-parent-run", parent.to_string())),
    )
}

fn describe(failure: &Failure, timeout: Duration) -> String {
    match failure {
        Failure::TimedOut => format!(
            "callback timed out after {}",
            chime_domain::format_duration(timeout)
        ),
        Failure::Connect(cause) => format!("cannot connect to the callback: {cause}"),
        Failure::Exchange(cause) => format!("callback failed: {cause}"),
        Failure::Blocked(blocked) => blocked_by_policy(blocked),
    }
}

fn blocked_by_policy(blocked: impl std::fmt::Display) -> String {
    format!("blocked by the callback network policy: {blocked}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_statuses_are_408_429_and_5xx() {
        for s in [408, 429, 500, 502, 503, 599] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 301, 400, 401, 403, 404, 409, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        assert_eq!(parse_retry_after("7", 0), Some(Duration::from_secs(7)));
        // Sun, 06 Nov 1994 08:49:37 GMT = 784111777 s.
        let now = 784_111_777_000 - 3_000;
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now + 10_000),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(parse_retry_after("soon", 0), None);
    }
}
