//! chime-api-gateway: the timer API over REST (axum) and gRPC (tonic), both calling one
//! [`TimerApi`]. The `chime-gateway` binary wires it to the configured stores.

pub mod api;
pub mod error;
pub mod grpc;
pub mod migrator;
pub mod rest;
pub mod service;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use chime_proto::v1::timer_service_server::TimerServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use api::TimerApi;
pub use error::{ApiError, ErrorCode};
pub use service::TimerService;

/// `/healthz` (the process runs), `/readyz` (it can serve: the database answers),
/// `/metrics` (Prometheus text).
pub fn admin_routes(api: Arc<dyn TimerApi>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(
                |axum::extract::State(api): axum::extract::State<Arc<dyn TimerApi>>| async move {
                    match api.ready().await {
                        Ok(()) => (StatusCode::OK, "ready").into_response(),
                        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
                    }
                },
            ),
        )
        .route(
            "/metrics",
            get(|| async { chime_runtime::prometheus().render() }),
        )
        .with_state(api)
}

/// The full HTTP app: REST API, OpenAPI, docs, health and metrics.
pub fn http_app(api: Arc<dyn TimerApi>) -> Router {
    rest::with_fallbacks(rest::router(api.clone()).merge(admin_routes(api)))
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
    // Install the recorder before any request counts something.
    let _ = chime_runtime::prometheus();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<TimerServiceServer<grpc::GrpcApi>>()
        .await;
    // Reflection describes the timer API (not the internal migrator service, which this
    // server does not serve), health, and the google.rpc error details clients decode.
    let reflection = || -> anyhow::Result<tonic_reflection::server::Builder<'static>> {
        Ok(tonic_reflection::server::Builder::configure()
            .register_file_descriptor_set(chime_proto::descriptors_of(&["chime/v1/timer.proto"])?)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET))
    };
    let reflection_v1 = reflection()?.build_v1()?;
    let reflection_v1alpha = reflection()?.build_v1alpha()?;
    let grpc_server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            // The same request limit as REST; beyond it, RESOURCE_EXHAUSTED.
            TimerServiceServer::new(grpc::GrpcApi(api.clone()))
                .max_decoding_message_size(rest::MAX_BODY_BYTES),
        )
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc),
            shutdown.clone().cancelled_owned(),
        );
    let http_server = axum::serve(http, http_app(api.clone()))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let admin_server = async {
        match admin {
            Some(listener) => axum::serve(listener, admin_routes(api))
                .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                .await
                .map_err(anyhow::Error::from),
            None => Ok(()),
        }
    };
    tracing::info!("gateway serving");
    let (g, h, a) = tokio::join!(grpc_server, http_server, admin_server);
    g?;
    h?;
    a?;
    tracing::info!("gateway stopped");
    Ok(())
}
