//! chime-api-gateway: the timer API over REST (axum) and gRPC (tonic), both calling one
//! [`TimerApi`]. The `chime-gateway` binary wires it to the configured stores.

pub mod api;
mod catalog;
pub mod context;
pub mod error;
pub mod grpc;
pub mod index;
pub mod rest;
pub mod service;
pub mod view;

use std::sync::Arc;

use axum::Router;
use chime_proto::v1::timer_service_server::TimerServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use api::TimerApi;
pub use catalog::METRICS;
pub use context::{AppScope, Caller, ContextLayer, RequestContext, RequestId};
pub use error::{ApiError, ErrorCode};
pub use service::TimerService;

/// `/readyz` of the gateway: the database answers.
struct ApiReadiness(Arc<dyn TimerApi>);

#[async_trait::async_trait]
impl chime_runtime::admin::Readiness for ApiReadiness {
    async fn ready(&self) -> Result<(), chime_runtime::admin::NotReady> {
        Ok(self.0.ready().await?)
    }
}

/// `/healthz`, `/readyz` (the database answers) and `/metrics`.
pub fn admin_routes(api: Arc<dyn TimerApi>) -> Router {
    chime_runtime::admin::admin_router(Arc::new(ApiReadiness(api)))
}

/// The full HTTP app: REST API, OpenAPI, docs, health and metrics.
pub fn http_app(api: Arc<dyn TimerApi>) -> Router {
    http_app_with(api, Router::new())
}

/// The HTTP app plus `extra` routes (`chime dev` adds its echo endpoint).
pub fn http_app_with(api: Arc<dyn TimerApi>, extra: Router) -> Router {
    rest::with_fallbacks(
        rest::router(api.clone())
            .merge(admin_routes(api))
            .merge(extra),
    )
    .layer(ContextLayer)
}

/// Serves REST on `http`, gRPC on `grpc` (and health/metrics on `admin` when given) until
/// `shutdown` fires, then drains in-flight requests.
pub async fn serve(
    api: Arc<dyn TimerApi>,
    http: TcpListener,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    serve_with(api, http, grpc, admin, Router::new(), shutdown).await
}

/// [`serve`] with `extra` routes on the REST listener.
pub async fn serve_with(
    api: Arc<dyn TimerApi>,
    http: TcpListener,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    extra: Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Install the recorder, and describe the metrics, before any request counts something.
    chime_runtime::describe_metrics(METRICS);
    // Reflection describes the timer API only: the internal services run elsewhere.
    let (health, introspection) = chime_proto::introspection(&["chime/v1/timer.proto"])?;
    health
        .set_serving::<TimerServiceServer<grpc::GrpcApi>>()
        .await;
    let grpc_server = tonic::transport::Server::builder()
        .layer(ContextLayer)
        .add_routes(introspection)
        .add_service(
            // The same request limit as REST; beyond it, RESOURCE_EXHAUSTED.
            TimerServiceServer::new(grpc::GrpcApi(api.clone()))
                .max_decoding_message_size(rest::MAX_BODY_BYTES),
        )
        .serve_with_incoming_shutdown(
            chime_proto::incoming(grpc),
            shutdown.clone().cancelled_owned(),
        );
    let http_server = axum::serve(
        chime_runtime::without_nagle(http),
        http_app_with(api.clone(), extra),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let admin_server =
        chime_runtime::admin::serve_admin(admin, Arc::new(ApiReadiness(api)), shutdown.clone());
    tracing::info!("gateway serving");
    let (g, h, a) = tokio::join!(grpc_server, http_server, admin_server);
    g?;
    h?;
    a?;
    tracing::info!("gateway stopped");
    Ok(())
}
