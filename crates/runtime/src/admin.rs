//! The admin endpoints every service serves: `/healthz` (the process runs; its version and
//! commit, as JSON), `/readyz` (it can do its job now) and `/metrics` (Prometheus text).

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::without_nagle;

/// Why a service cannot serve right now: the failing dependency's own error.
pub type NotReady = Box<dyn std::error::Error + Send + Sync>;

/// What `/readyz` asks.
#[async_trait]
pub trait Readiness: Send + Sync + 'static {
    async fn ready(&self) -> Result<(), NotReady>;
}

/// Ready whenever the process runs: for services whose readiness is their own liveness.
pub struct AlwaysReady;

#[async_trait]
impl Readiness for AlwaysReady {
    async fn ready(&self) -> Result<(), NotReady> {
        Ok(())
    }
}

/// The admin endpoints; a service adds its own views (the scheduler's `/ownership`) with
/// [`Router::merge`].
pub fn admin_router(readiness: Arc<dyn Readiness>) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async {
                let build = crate::BuildInfo::current();
                axum::Json(serde_json::json!({
                    "status": "ok",
                    "version": build.version,
                    "commit": build.commit,
                }))
            }),
        )
        .route(
            "/readyz",
            get(|State(r): State<Arc<dyn Readiness>>| async move {
                match r.ready().await {
                    Ok(()) => (StatusCode::OK, "ready".to_owned()).into_response(),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()).into_response(),
                }
            }),
        )
        .route("/metrics", get(|| async { crate::prometheus().render() }))
        .with_state(readiness)
}

/// Serves the admin endpoints on `listener` until `shutdown`; does nothing without one.
pub async fn serve_admin(
    listener: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_admin_with(listener, readiness, Router::new(), shutdown).await
}

/// [`serve_admin`] with a service's own routes beside the common ones.
pub async fn serve_admin_with(
    listener: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    extra: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    match listener {
        Some(l) => {
            axum::serve(without_nagle(l), admin_router(readiness).merge(extra))
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
        None => Ok(()),
    }
}

/// Binds the admin address when one is configured.
pub async fn bind_admin(
    addr: Option<std::net::SocketAddr>,
) -> std::io::Result<Option<TcpListener>> {
    match addr {
        Some(a) => TcpListener::bind(a).await.map(Some),
        None => Ok(None),
    }
}
