//! Who is calling, on whose behalf, and which request this is. [`ContextLayer`] fills in one
//! [`RequestContext`] per request in front of both REST and gRPC: it authenticates the bearer
//! token (when auth is on) and refuses a request without a valid one before any handler runs.
//! Handlers hand the context to every service method, and the services apply its app scope
//! and scopes.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use chime_domain::{AppName, Scope, Scopes, TokenId};
use http::{HeaderName, HeaderValue, Request, Response};
use tower::{Layer, Service};
use tracing::Instrument;

use crate::auth::Authenticator;
use crate::error::{ApiError, ApiResult, ErrorCode};

/// Request id header: taken from the caller when valid, else generated; echoed on the answer.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest request id accepted from a caller.
const MAX_REQUEST_ID: usize = 128;

/// Correlates one request's logs and answer; chosen by the caller or generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// A caller's id if it is 1 to 128 visible ASCII characters; otherwise `None`.
    pub fn from_caller(raw: &str) -> Option<Self> {
        let valid = !raw.is_empty()
            && raw.len() <= MAX_REQUEST_ID
            && raw.bytes().all(|b| b.is_ascii_graphic());
        valid.then(|| Self(raw.to_owned()))
    }

    /// A fresh id: unique within the process, and across processes in practice (the start
    /// time and the process id seed it).
    pub fn generate() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            xxhash_rust::xxh3::xxh3_64(
                &[
                    nanos.to_le_bytes(),
                    u64::from(std::process::id()).to_le_bytes(),
                ]
                .concat(),
            )
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(format!("{seed:016x}{n:08x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Auth is off: nobody is asked.
    Anonymous,
    /// The bootstrap token: every app, every scope.
    Admin,
    /// An app token.
    Token { id: TokenId, app: AppName },
}

/// The apps a caller may act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppScope {
    All,
    Only(AppName),
}

impl AppScope {
    pub fn permits(&self, app: &AppName) -> bool {
        match self {
            Self::All => true,
            Self::Only(own) => own == app,
        }
    }

    /// For operations that name the app: another app's is refused outright.
    pub fn check(&self, app: &AppName) -> ApiResult<()> {
        if self.permits(app) {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "APP_FORBIDDEN",
            format!("this caller may not act on app {app}"),
        ))
    }

    /// The app a listing is limited to: the one asked for (if permitted), else the caller's.
    pub fn narrow(&self, asked: Option<AppName>) -> ApiResult<Option<AppName>> {
        match (self, asked) {
            (_, Some(app)) => self.check(&app).map(|()| Some(app)),
            (Self::All, None) => Ok(None),
            (Self::Only(own), None) => Ok(Some(own.clone())),
        }
    }
}

/// Everything a [`TimerApi`](crate::TimerApi) method knows about the request besides its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    pub request_id: RequestId,
    pub caller: Caller,
    /// The apps the caller may act on.
    pub scope: AppScope,
    /// What the caller may do there.
    pub scopes: Scopes,
}

impl RequestContext {
    /// An anonymous caller allowed everything: what every request is while auth is off.
    pub fn anonymous(request_id: RequestId) -> Self {
        Self {
            request_id,
            caller: Caller::Anonymous,
            scope: AppScope::All,
            scopes: Scopes::ALL,
        }
    }

    /// Refuses an operation the caller's token does not carry the scope for (403).
    pub fn require(&self, scope: Scope) -> ApiResult<()> {
        if self.scopes.contains(scope) {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "SCOPE_MISSING",
            format!("this token lacks the {} scope", scope.as_str()),
        ))
    }

    /// The context [`ContextLayer`] put on a request, or a fresh anonymous one for a request
    /// that did not pass through it.
    pub fn of(extensions: &http::Extensions) -> Self {
        extensions
            .get::<Self>()
            .cloned()
            .unwrap_or_else(|| Self::anonymous(RequestId::generate()))
    }
}

/// Paths any caller may reach: probes, metrics, the API's description, the console's static
/// files (the page asks for a token and sends it to the API), and gRPC health and reflection.
fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
        || path == "/docs"
        || path.starts_with("/docs/")
        || path == "/console"
        || path.starts_with("/console/")
        || path.starts_with("/grpc.health.v1.Health/")
        || path.starts_with("/grpc.reflection.")
}

/// How a transport answers a request refused before its handler ran.
pub trait Refusal: Sized {
    fn refusal(error: ApiError) -> Response<Self>;
}

impl Refusal for axum::body::Body {
    fn refusal(error: ApiError) -> Response<Self> {
        axum::response::IntoResponse::into_response(error)
    }
}

impl Refusal for tonic::body::Body {
    fn refusal(error: ApiError) -> Response<Self> {
        tonic::Status::from(error).into_http()
    }
}

/// Puts a [`RequestContext`] on every request, runs it inside a span naming its request id,
/// and answers with the `x-request-id` header. With an [`Authenticator`], every request but
/// those to open paths needs a valid bearer token: without one it is answered 401
/// (`UNAUTHENTICATED` on gRPC) here. One layer for REST and gRPC alike.
#[derive(Clone, Default)]
pub struct ContextLayer {
    auth: Option<Arc<Authenticator>>,
}

impl ContextLayer {
    /// Every caller anonymous and allowed everything (`CHIME_AUTH=off`).
    pub fn open() -> Self {
        Self { auth: None }
    }

    pub fn authenticating(auth: Option<Arc<Authenticator>>) -> Self {
        Self { auth }
    }
}

impl<S> Layer<S> for ContextLayer {
    type Service = WithContext<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WithContext {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Clone)]
pub struct WithContext<S> {
    inner: S,
    auth: Option<Arc<Authenticator>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for WithContext<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send,
    B: Send + 'static,
    R: Refusal + Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let request_id = req
            .headers()
            .get(&REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .and_then(RequestId::from_caller)
            .unwrap_or_else(RequestId::generate);
        let echo = HeaderValue::from_str(request_id.as_str()).ok();
        let span = tracing::info_span!("request", request_id = request_id.as_str());
        // The service that was polled ready serves this request; its clone the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone().filter(|_| !is_open(req.uri().path()));
        Box::pin(
            async move {
                let mut ctx = RequestContext::anonymous(request_id);
                let refused = match auth {
                    None => None,
                    Some(auth) => {
                        let header = req.headers().get(http::header::AUTHORIZATION);
                        match auth.authenticate(header).await {
                            Ok(verified) => {
                                (ctx.caller, ctx.scope, ctx.scopes) =
                                    crate::auth::principal(verified);
                                None
                            }
                            Err(Ok(refused)) => {
                                metrics::counter!(
                                    "chime_gateway_auth_failures_total",
                                    "reason" => refused.as_str()
                                )
                                .increment(1);
                                tracing::info!(
                                    reason = refused.as_str(),
                                    "request not authenticated"
                                );
                                Some(crate::auth::refusal(refused))
                            }
                            Err(Err(store)) => Some(store.into()),
                        }
                    }
                };
                let mut response = match refused {
                    Some(error) => R::refusal(error),
                    None => {
                        req.extensions_mut().insert(ctx);
                        inner.call(req).await?
                    }
                };
                if let Some(id) = echo {
                    response.headers_mut().insert(REQUEST_ID, id);
                }
                Ok(response)
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_ids_are_kept_when_sane() {
        assert_eq!(
            RequestId::from_caller("abc-123").unwrap().as_str(),
            "abc-123"
        );
        assert!(RequestId::from_caller("").is_none());
        assert!(RequestId::from_caller("has space").is_none());
        assert!(RequestId::from_caller(&"x".repeat(129)).is_none());
        assert_ne!(RequestId::generate(), RequestId::generate());
    }

    #[test]
    fn a_scope_narrows_listings_and_refuses_other_apps() {
        let billing = AppName::parse("billing".to_owned()).unwrap();
        let mail = AppName::parse("mail".to_owned()).unwrap();
        let only = AppScope::Only(billing.clone());
        assert_eq!(only.narrow(None).unwrap(), Some(billing.clone()));
        assert_eq!(
            only.narrow(Some(billing.clone())).unwrap(),
            Some(billing.clone())
        );
        let refused = only.narrow(Some(mail.clone())).unwrap_err();
        assert_eq!(refused.code, ErrorCode::PermissionDenied);
        assert_eq!(AppScope::All.narrow(None).unwrap(), None);
        assert!(AppScope::All.check(&mail).is_ok());
    }
}
