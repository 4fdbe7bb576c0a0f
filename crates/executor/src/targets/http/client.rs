//! The callback client: hyper's pooled HTTP/1.1 client, a resolver that applies the network
//! policy to every address it returns, and rustls with the platform's roots.
//!
//! reqwest did the same under layers that cost each callback a second parse of its URL (the
//! redirect policy, `Url` to `Uri`), extra boxing and a timer per layer; at thousands of
//! callbacks a second that was a tenth of an executor's CPU (docs/performance.md).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use chime_domain::{Blocked, NetworkPolicy};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::HostLookup;

/// How long connecting (TCP and TLS) may take, whatever the callback's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an unused keep-alive connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

type Connector = hyper_rustls::HttpsConnector<HttpConnector<GuardedResolver>>;

/// The request a callback sends.
pub type CallbackRequest = http::Request<Full<Bytes>>;

/// An HTTP client with a keep-alive pool per host.
#[derive(Clone)]
pub struct CallbackClient {
    inner: Client<Connector, Full<Bytes>>,
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    /// The `Retry-After` header, as sent.
    pub retry_after: Option<String>,
    /// The body up to the cap, lossily as UTF-8; `None` when empty.
    pub body: Option<String>,
}

/// Why nothing came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The policy refuses an address the host resolved to.
    Blocked(String),
    /// No answer within the timeout.
    TimedOut,
    /// Connecting failed: refused, unreachable, unresolvable, or the TLS handshake.
    Connect(String),
    /// The exchange failed once connected: reset, or not HTTP.
    Exchange(String),
}

impl Failure {
    /// Transport failures (refused, reset, timed out, TLS) may pass; a policy refusal won't.
    pub fn retryable(&self) -> bool {
        !matches!(self, Failure::Blocked(_))
    }
}

impl CallbackClient {
    /// Fails only if the platform's certificate verifier cannot be set up.
    pub fn new(
        networks: NetworkPolicy,
        lookup: Arc<dyn HostLookup>,
        idle_per_host: usize,
    ) -> Result<Self, rustls::Error> {
        let mut http = HttpConnector::new_with_resolver(GuardedResolver {
            policy: networks,
            lookup,
        });
        // The TLS layer above takes https; this one must let it through.
        http.enforce_http(false);
        // A request written in pieces must not wait for a delayed ACK.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config()?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(idle_per_host)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(Self { inner })
    }

    /// Sends `request` and reads the answer, keeping `cap` bytes of its body, all within
    /// `timeout`. An answer whose body is cut short by the timeout or the connection still
    /// counts by its status, with what was read of the body.
    pub async fn send(
        &self,
        request: CallbackRequest,
        timeout: Duration,
        cap: usize,
    ) -> Result<Answer, Failure> {
        let mut head: Option<(http::StatusCode, Option<String>)> = None;
        let mut kept = Vec::new();
        // One deadline for the whole exchange: a timer per callback, not one per step.
        let exchanged = tokio::time::timeout(timeout, async {
            let response = self.inner.request(request).await?;
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            head = Some((response.status(), retry_after));
            // Reading to the end lets the connection be reused.
            let mut body = response.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(chunk) = frame.into_data() {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            Ok::<_, hyper_util::client::legacy::Error>(())
        })
        .await;
        match (head, exchanged) {
            (Some((status, retry_after)), _) => Ok(Answer {
                status,
                retry_after,
                body: (!kept.is_empty()).then(|| String::from_utf8_lossy(&kept).into_owned()),
            }),
            (None, Err(_elapsed)) => Err(Failure::TimedOut),
            (None, Ok(Err(e))) => Err(failure(&e)),
            (None, Ok(Ok(()))) => Err(Failure::Exchange("no answer".into())),
        }
    }
}

/// The platform's roots (or the system's CA bundle on Linux), with the ring provider.
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_platform_verifier()?
        .with_no_client_auth())
}

fn failure(e: &hyper_util::client::legacy::Error) -> Failure {
    if let Some(blocked) = blocked_cause(e) {
        return Failure::Blocked(blocked.to_string());
    }
    if e.is_connect() {
        Failure::Connect(root_cause(e))
    } else {
        Failure::Exchange(root_cause(e))
    }
}

/// The policy refusal somewhere in an error's chain, if that is what failed.
fn blocked_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Blocked> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(b) = c.downcast_ref::<Blocked>() {
            return Some(b);
        }
        cause = c.source();
    }
    None
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Resolves callback hosts and refuses a host if any of its addresses is one the policy
/// blocks, before connecting: a name that resolves (or is rebound) to a private address
/// gets no further than an IP literal would. The addresses checked are the ones connected
/// to, so a name rebound between the check and the connection gains nothing. (IP literals
/// never reach a resolver; the target checks them before sending.)
#[derive(Clone)]
struct GuardedResolver {
    policy: NetworkPolicy,
    lookup: Arc<dyn HostLookup>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let (policy, lookup) = (self.policy.clone(), self.lookup.clone());
        Box::pin(async move {
            let ips = lookup.lookup(name.as_str()).await?;
            for ip in &ips {
                policy.check(*ip)?;
            }
            Ok(ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}
