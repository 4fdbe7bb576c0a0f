//! chime-api-gateway: the timer API over REST (axum) and gRPC (tonic), both calling one
//! [`TimerApi`]. The `chime-gateway` binary wires it to the configured stores.

pub mod access;
pub mod activity;
pub mod api;
mod apply;
pub mod auth;
mod backfill;
mod calendars;
mod catalog;
mod chains;
mod checks;
pub mod console;
pub mod context;
pub mod error;
pub mod grpc;
pub mod index;
pub mod notifications;
mod preview;
pub mod quota;
pub mod rest;
mod runs;
pub mod service;
mod spec;
mod unschedule;
pub mod view;
mod visibility;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use chime_domain::Clock;
use chime_proto::v1::timer_service_server::TimerServiceServer;
use chime_storage::Credentials;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use access::{AccessApi, AccessService};
pub use api::TimerApi;
pub use auth::Authenticator;
pub use catalog::METRICS;
pub use context::{AppScope, Caller, ContextLayer, RequestContext, RequestId};
pub use error::{ApiError, ErrorCode};
pub use quota::{QuotaSettings, Quotas};
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

/// How the gateway treats callers.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// The admin token; `None`: auth is off, every caller may do everything.
    pub bootstrap_token: Option<String>,
    /// How long a looked-up token is trusted (a revocation's delay on other replicas).
    pub cache_ttl: Duration,
    /// How long a rotated-out signing secret still signs.
    pub signing_grace: Duration,
}

impl AuthSettings {
    /// No authentication (`chime dev`, tests of other concerns).
    pub fn off() -> Self {
        Self {
            bootstrap_token: None,
            cache_ttl: Duration::from_secs(1),
            signing_grace: Duration::from_secs(86_400),
        }
    }
}

/// The services the gateway serves, and who may call them.
/// Adds gRPC services to the gateway's routes.
pub type ExtraRoutes = Arc<dyn Fn(tonic::service::Routes) -> tonic::service::Routes + Send + Sync>;

#[derive(Clone)]
pub struct Gateway {
    pub timers: Arc<dyn TimerApi>,
    pub access: Arc<dyn AccessApi>,
    pub auth: Option<Arc<Authenticator>>,
    /// REST and gRPC over TLS when set.
    pub tls: Option<chime_runtime::Tls>,
    /// Adds more gRPC services on the same port (`chime dev` serves workers there).
    pub grpc_routes: Option<ExtraRoutes>,
}

impl Gateway {
    pub fn new(
        timers: Arc<dyn TimerApi>,
        credentials: Arc<dyn Credentials>,
        clock: Arc<dyn Clock>,
        settings: &AuthSettings,
    ) -> Self {
        let auth = settings.bootstrap_token.as_deref().map(|token| {
            Arc::new(Authenticator::new(
                token,
                credentials.clone(),
                clock.clone(),
                settings.cache_ttl,
            ))
        });
        let access = Arc::new(AccessService::new(
            credentials,
            clock,
            auth.clone(),
            settings.signing_grace,
        ));
        Self {
            timers,
            access,
            auth,
            tls: None,
            grpc_routes: None,
        }
    }

    /// Serves REST and gRPC over TLS with this certificate (plain TCP with `None`).
    /// Serves what `add` adds beside the timer API on the gRPC port.
    pub fn with_grpc_routes(mut self, add: ExtraRoutes) -> Self {
        self.grpc_routes = Some(add);
        self
    }

    pub fn with_tls(mut self, tls: Option<chime_runtime::Tls>) -> Self {
        self.tls = tls;
        self
    }

    fn context_layer(&self) -> ContextLayer {
        ContextLayer::authenticating(self.auth.clone())
    }

    /// The full HTTP app: REST API, OpenAPI, docs, the web console, health and metrics.
    pub fn http_app(&self) -> Router {
        self.http_app_with(Router::new())
    }

    /// The HTTP app plus `extra` routes (`chime dev` adds its echo endpoint).
    pub fn http_app_with(&self, extra: Router) -> Router {
        rest::with_fallbacks(
            rest::router(self.timers.clone(), self.access.clone())
                .merge(console::router(self.auth.is_some()))
                .merge(admin_routes(self.timers.clone()))
                .merge(extra),
        )
        .layer(self.context_layer())
    }

    /// Serves REST on `http`, gRPC on `grpc` (and health/metrics on `admin` when given)
    /// until `shutdown` fires, then drains in-flight requests.
    pub async fn serve(
        self,
        http: TcpListener,
        grpc: TcpListener,
        admin: Option<TcpListener>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        self.serve_with(http, grpc, admin, Router::new(), shutdown)
            .await
    }

    /// [`Self::serve`] with `extra` routes on the REST listener.
    pub async fn serve_with(
        self,
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
        let api = self.timers.clone();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.tls {
            builder = builder.tls_config(tls.grpc_server())?;
        }
        let grpc_server = builder
            .layer(self.context_layer())
            .add_routes(match &self.grpc_routes {
                Some(add) => add(introspection),
                None => introspection,
            })
            .add_service(
                // The same request limit as REST; beyond it, RESOURCE_EXHAUSTED.
                TimerServiceServer::new(grpc::GrpcApi(api.clone()))
                    .max_decoding_message_size(rest::MAX_BODY_BYTES),
            )
            .serve_with_incoming_shutdown(
                chime_proto::incoming(grpc),
                shutdown.clone().cancelled_owned(),
            );
        let app = self.http_app_with(extra);
        let stop = shutdown.clone().cancelled_owned();
        let http_server: std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> =
            match &self.tls {
                Some(tls) => Box::pin(
                    axum::serve(tls.rest_listener(http)?, app)
                        .with_graceful_shutdown(stop)
                        .into_future(),
                ),
                None => Box::pin(
                    axum::serve(chime_runtime::without_nagle(http), app)
                        .with_graceful_shutdown(stop)
                        .into_future(),
                ),
            };
        let admin_server =
            chime_runtime::admin::serve_admin(admin, Arc::new(ApiReadiness(api)), shutdown.clone());
        tracing::info!(
            auth = self.auth.is_some(),
            tls = self.tls.is_some(),
            "gateway serving"
        );
        let (g, h, a) = tokio::join!(grpc_server, http_server, admin_server);
        g?;
        h?;
        a?;
        tracing::info!("gateway stopped");
        Ok(())
    }
}
