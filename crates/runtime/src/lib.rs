//! Process plumbing every Chime binary shares: the layered [`Config`], tracing setup and the
//! shutdown signal.

pub mod admin;
mod config;
mod shutdown;
mod telemetry;

pub use config::{
    CommonArgs, Config, ConfigError, DatabaseConfig, ExecutorConfig, GatewayConfig, LogConfig,
    LogFormat, MigratorConfig, RedisConfig, RetentionConfig, SchedulerConfig, Seconds,
};
pub use shutdown::{cancel_on_signal, shutdown_token};
pub use telemetry::{init_tracing, prometheus};

/// Opens the configured database (`CHIME_DATABASE_URL`) and checks that its schema is
/// current, so a service never runs against a schema it does not know.
pub async fn open_database(
    config: &Config,
    clock: std::sync::Arc<dyn chime_domain::Clock>,
) -> Result<chime_storage::Database, chime_storage::StoreError> {
    let url = config
        .database_url()
        .map_err(|e| chime_storage::StoreError::Internal(e.to_string()))?;
    let db =
        chime_storage::Database::open(url, &pg_settings(config), clock, config.buckets).await?;
    db.require_current_schema().await?;
    Ok(db)
}

/// The PostgreSQL pool settings of `[database]`.
pub fn pg_settings(config: &Config) -> chime_storage::postgres::PgSettings {
    chime_storage::postgres::PgSettings {
        max_connections: config.database.max_connections,
        acquire_timeout: config.database.acquire_timeout.get(),
    }
}

/// Connects to the configured Redis (`CHIME_REDIS_URL`, `CHIME_REDIS_PREFIX`).
pub async fn open_redis(
    config: &Config,
) -> Result<chime_storage::redis::RedisBackend, chime_storage::StoreError> {
    let url = config.redis.url.as_deref().ok_or_else(|| {
        chime_storage::StoreError::Internal(
            "no Redis configured: set CHIME_REDIS_URL (redis://…)".into(),
        )
    })?;
    let settings = chime_storage::redis::RedisSettings {
        prefix: config.redis.prefix.clone(),
        pool_size: config.redis.pool_size,
        shard_retention: config.redis.shard_retention.get(),
        ..Default::default()
    };
    chime_storage::redis::RedisBackend::connect(url, settings).await
}

/// `/readyz` of a service whose job needs the database: ready when it answers.
pub struct DatabaseReadiness(pub chime_storage::Database);

#[async_trait::async_trait]
impl admin::Readiness for DatabaseReadiness {
    async fn ready(&self) -> Result<(), String> {
        self.0.ping().await.map_err(|e| e.to_string())
    }
}

/// A reqwest client builder with TLS ready: installs rustls' ring provider for the process
/// first (reqwest is built without a default provider). Every HTTP client in Chime, tests
/// included, starts here.
pub fn http_client() -> reqwest::ClientBuilder {
    // A second install (another client, another test) is refused harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
