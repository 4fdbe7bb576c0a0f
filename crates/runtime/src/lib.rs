//! Process plumbing every Chime binary shares: the layered [`Config`], tracing setup and the
//! shutdown signal.

pub mod admin;
pub mod auth;
mod build_info;
mod config;
pub mod fleet;
pub mod memory;
mod roster;
mod shutdown;
mod telemetry;
mod tls;
mod traces;

pub use build_info::BuildInfo;
pub use config::{
    AuthConfig, AuthMode, CallbacksConfig, CommonArgs, Config, ConfigError, DatabaseConfig,
    ExecutorConfig, GatewayConfig, LogConfig, LogFormat, MembershipConfig, MigratorConfig,
    QuotasConfig, RedisConfig, RetentionConfig, RuntimeThreads, SchedulerConfig, Seconds,
    TlsConfig, build_runtime,
};
pub use roster::{Roster, RosterSettings};
pub use shutdown::{cancel_on_signal, shutdown_token};
pub use telemetry::{
    LATENCY_BUCKETS, METRICS_UPKEEP, MetricKind, MetricSpec, describe_metrics, init_tracing,
    prometheus, prometheus_recorder,
};
pub use tls::{Tls, TlsListener, grpc_server};
pub use traces::{adopt_context, flush_traces, inject_context, record_ids, traces_exported};

/// `/readyz` of a service whose job needs the database: ready when it answers.
pub struct DatabaseReadiness(pub chime_storage::Database);

#[async_trait::async_trait]
impl admin::Readiness for DatabaseReadiness {
    async fn ready(&self) -> Result<(), admin::NotReady> {
        Ok(self.0.ping().await?)
    }
}

/// Makes ring rustls's process-wide crypto provider (TLS servers and clients alike).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A reqwest client builder with TLS ready: installs rustls' ring provider for the process
/// first (reqwest is built without a default provider). Every reqwest client in Chime, tests
/// included, starts here; the executor's callbacks have their own client, on hyper.
pub fn http_client() -> reqwest::ClientBuilder {
    // A second install (another client, another test) is refused harmlessly.
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Binds a listener, naming what it is for in the error.
pub async fn bind(
    addr: std::net::SocketAddr,
    what: &str,
) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding {what} to {addr}: {e}")))
}

/// `listener` for `axum::serve`, with Nagle's algorithm off on every accepted connection
/// (axum leaves it on): a response written in pieces must not wait for a delayed ACK.
pub fn without_nagle(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    })
}
