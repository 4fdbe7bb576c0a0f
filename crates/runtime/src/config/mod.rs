//! One `Config` for every binary, a section per role. Layers, later wins:
//! built-in defaults < TOML file (`--config` / `CHIME_CONFIG`) < `CHIME_*` environment.
//!
//! The documented flat variables (`CHIME_DATABASE_URL`, `CHIME_HTTP_ADDR`, …) map onto their
//! sections; any other setting is reachable as `CHIME_<SECTION>__<KEY>`, e.g.
//! `CHIME_SCHEDULER__LEASE_TTL=5s`.

mod args;
mod sections;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chime_domain::BucketCount;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use args::{CommonArgs, RuntimeThreads, build_runtime};
pub use sections::{
    AuthConfig, AuthMode, CallbacksConfig, DatabaseConfig, ExecutorConfig, GatewayConfig,
    LogConfig, LogFormat, MembershipConfig, MigratorConfig, QuotasConfig, RedisConfig,
    RetentionConfig, SchedulerConfig, Seconds, TlsConfig,
};

/// Flat environment names (docs/configuration.md) and the config keys they set.
const ENV_ALIASES: &[(&str, &str)] = &[
    ("database_url", "database.url"),
    ("redis_url", "redis.url"),
    ("redis_prefix", "redis.prefix"),
    ("http_addr", "gateway.http_addr"),
    ("grpc_addr", "gateway.grpc_addr"),
    ("migrator_endpoint", "gateway.migrator_endpoint"),
    ("executor_addr", "executor.addr"),
    ("migrator_addr", "migrator.addr"),
    ("executor_endpoints", "scheduler.executor_endpoints"),
    ("admin_addr", "admin_addr"),
    ("buckets", "buckets"),
    ("log_format", "log.format"),
    ("log", "log.filter"),
    ("shutdown_grace", "shutdown_grace"),
    ("callback_allow_networks", "callbacks.allow_networks"),
    ("callback_deny_networks", "callbacks.deny_networks"),
    ("brokers", "callbacks.brokers"),
    ("auth", "auth.mode"),
    ("bootstrap_token", "auth.bootstrap_token"),
    ("tls_cert", "tls.cert"),
    ("tls_key", "tls.key"),
    ("tls_client_ca", "tls.client_ca"),
    ("tls_ca", "tls.ca"),
];

/// Variables that steer loading itself rather than set a value.
/// `CHIME_SERVER` and `CHIME_TOKEN` are the `chime` client's; `CHIME_COMMIT` is read when
/// building (`BuildInfo`), and `make` exports it to everything it runs.
const ENV_IGNORED: &[&str] = &["config", "server", "token", "commit"];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("cannot read config file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        // figment names the key and the layer it came from; keep that, drop the noise.
        Self::Invalid(e.to_string())
    }
}

/// A duration written as `5s`, `1m30s`, `250ms`.

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Work is split into this many buckets (`CHIME_BUCKETS`); every service must agree.
    pub buckets: BucketCount,
    /// `/healthz` (with the version and commit), `/readyz`, `/metrics`; each service picks its own default when absent.
    pub admin_addr: Option<SocketAddr>,
    /// How long a stopping service may drain in-flight work.
    pub shutdown_grace: Seconds,
    /// Threads of the service's async runtime (`CHIME_WORKER_THREADS`). Unset: one in
    /// `chime-executor` and `chime-scheduler`, which scale by replicas; one per CPU the
    /// process may use in the others.
    pub worker_threads: Option<NonZeroUsize>,
    pub database: DatabaseConfig,
    pub redis: RedisConfig,
    pub gateway: GatewayConfig,
    pub migrator: MigratorConfig,
    pub retention: RetentionConfig,
    pub scheduler: SchedulerConfig,
    pub membership: MembershipConfig,
    pub callbacks: CallbacksConfig,
    pub auth: AuthConfig,
    pub quotas: QuotasConfig,
    pub tls: TlsConfig,
    pub executor: ExecutorConfig,
    pub log: LogConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            buckets: BucketCount::DEFAULT,
            admin_addr: None,
            shutdown_grace: Seconds::secs(30),
            worker_threads: None,
            database: DatabaseConfig::default(),
            redis: RedisConfig::default(),
            gateway: GatewayConfig::default(),
            migrator: MigratorConfig::default(),
            retention: RetentionConfig::default(),
            scheduler: SchedulerConfig::default(),
            membership: MembershipConfig::default(),
            callbacks: CallbacksConfig::default(),
            auth: AuthConfig::default(),
            quotas: QuotasConfig::default(),
            tls: TlsConfig::default(),
            executor: ExecutorConfig::default(),
            log: LogConfig::default(),
        }
    }
}

fn env_key(key: &str) -> String {
    let lower = key.to_ascii_lowercase();
    ENV_ALIASES
        .iter()
        .find(|(flat, _)| *flat == lower)
        .map(|(_, path)| (*path).to_owned())
        .unwrap_or_else(|| lower.replace("__", "."))
}

impl Config {
    /// Loads defaults, then the file (if any), then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_over(Config::default(), file)
    }

    /// [`Self::load`] over other defaults (`chime dev` has a few of its own): the file and
    /// the environment still win.
    pub fn load_over(defaults: Config, file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(defaults, file, Env::prefixed("CHIME_"))
    }

    fn load_from(defaults: Config, file: Option<&Path>, env: Env) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(defaults));
        if let Some(path) = file {
            // A named file that is missing is an error, not an empty layer.
            std::fs::metadata(path).map_err(|source| ConfigError::File {
                path: path.to_owned(),
                source,
            })?;
            figment = figment.merge(Toml::file(path));
        }
        // `CHIME_TEST_*` belong to the test harness (database, Redis, MySQL, brokers…): a
        // service started under it must not refuse them as unknown settings.
        let env = env
            .ignore(ENV_IGNORED)
            .filter(|k| !k.as_str().to_ascii_lowercase().starts_with("test_"))
            .map(|k| env_key(k.as_str()).into());
        let config: Config = figment.merge(env).extract()?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.redis.prefix.is_empty() || self.redis.prefix.contains(char::is_whitespace) {
            return bad("redis.prefix must be non-empty and contain no white space");
        }
        if self.database.max_connections == 0 {
            return bad("database.max_connections must be at least 1");
        }
        if self.executor.max_in_flight == 0 || self.executor.max_per_host == 0 {
            return bad("executor.max_in_flight and executor.max_per_host must be at least 1");
        }
        if self.migrator.lead.get() < Duration::from_secs(10) {
            return bad("migrator.lead must be at least 10s");
        }
        if self.migrator.max_ahead == 0 {
            return bad("migrator.max_ahead must be at least 1");
        }
        if self.migrator.interval.get() < Duration::from_millis(100)
            || self.migrator.interval.get() * 4 > self.migrator.lead.get()
        {
            return bad(
                "migrator.interval must be at least 100ms and at most a quarter of migrator.lead",
            );
        }
        if self.migrator.work_lease.get() < Duration::from_secs(1) {
            return bad("migrator.work_lease must be at least 1s");
        }
        if self.retention.batch == 0 || self.retention.interval.get() < Duration::from_secs(1) {
            return bad("retention.batch must be at least 1 and retention.interval at least 1s");
        }
        if self.retention.history.get() < Duration::from_secs(3600)
            || self.retention.dead_letters.get() < Duration::from_secs(3600)
        {
            return bad("retention.history and retention.dead_letters must be at least 1h");
        }
        if self.retention.partitions_ahead.get() < Duration::from_secs(86_400) {
            return bad("retention.partitions_ahead must be at least 1d");
        }
        if let Err(e) = self.network_policy() {
            return bad(&format!("callbacks: {e}"));
        }
        if let Some(token) = &self.auth.bootstrap_token
            && (token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()))
        {
            // An empty or guessable admin token is how other schedulers were taken over.
            return bad("auth.bootstrap_token must be at least 16 visible ASCII characters");
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return bad(
                "tls.cert and tls.key go together: set both (CHIME_TLS_CERT, CHIME_TLS_KEY) or neither",
            );
        }
        if self.tls.client_ca.is_some() && self.tls.cert.is_none() {
            return bad("tls.client_ca needs tls.cert and tls.key: mutual TLS is TLS first");
        }
        if self.quotas.creates_per_second == 0 || self.quotas.create_burst == 0 {
            return bad("quotas.creates_per_second and quotas.create_burst must be above 0");
        }
        if self.auth.cache_ttl.get() > Duration::from_secs(60) {
            return bad("auth.cache_ttl must be at most 1m");
        }
        if self.membership.heartbeat.get() < Duration::from_millis(50) {
            return bad("membership.heartbeat must be at least 50ms");
        }
        if self.membership.ttl.get() < self.membership.heartbeat.get() * 3 {
            return bad("membership.ttl must be at least three heartbeats");
        }
        if self.scheduler.lease_ttl.get() < Duration::from_secs(1) {
            return bad("scheduler.lease_ttl must be at least 1s");
        }
        if self.scheduler.sweep_interval.get() < Duration::from_millis(100) {
            return bad("scheduler.sweep_interval must be at least 100ms");
        }
        if self.scheduler.misfire_threshold.get() < self.scheduler.sweep_after.get() {
            return bad("scheduler.misfire_threshold must not be below scheduler.sweep_after");
        }
        // A longer wait would hold keys past the hand-off's lead (`dispatch_ahead`) or hold
        // callback slots for nothing.
        if self.executor.claim_linger.get() > Duration::from_millis(50)
            || self.executor.outcome_linger.get() > Duration::from_millis(100)
        {
            return bad(
                "executor.claim_linger must be at most 50ms, executor.outcome_linger at most 100ms",
            );
        }
        Ok(())
    }

    /// How far ahead timers are materialized (`migrator.lead`, `migrator.max_ahead`, spread
    /// over a quarter of the lead): the gateway writes a timer's first occurrences with it, the migrator extends by it.
    pub fn horizon(&self) -> chime_domain::Horizon {
        chime_domain::Horizon::new(self.migrator.lead.get(), self.migrator.max_ahead)
    }

    /// What opening the stores needs of `[database]`, `[redis]` and `buckets`.
    pub fn store_settings(&self) -> chime_storage::StoreSettings {
        chime_storage::StoreSettings {
            buckets: self.buckets,
            postgres: chime_storage::postgres::PgSettings {
                max_connections: self.database.max_connections,
                acquire_timeout: self.database.acquire_timeout.get(),
            },
            redis_url: self.redis.url.clone(),
            redis: chime_storage::redis::RedisSettings {
                prefix: self.redis.prefix.clone(),
                pool_size: self.redis.pool_size,
                shard_retention: self.redis.shard_retention.get(),
                ..Default::default()
            },
            index_lead: self.migrator.lead.get(),
        }
    }

    /// Where callbacks may go: the default SSRF policy adjusted by `callbacks.*`.
    pub fn network_policy(&self) -> Result<chime_domain::NetworkPolicy, chime_domain::CidrError> {
        let parse = |list: &[String]| {
            list.iter()
                .map(|c| c.parse::<chime_domain::Cidr>())
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(chime_domain::NetworkPolicy::new(
            parse(&self.callbacks.allow_networks)?,
            parse(&self.callbacks.deny_networks)?,
        ))
    }

    /// The brokers timers may publish to (`CHIME_BROKERS`).
    pub fn brokers(&self) -> Result<Vec<chime_domain::BrokerUrl>, ConfigError> {
        self.callbacks
            .brokers
            .iter()
            .map(|b| {
                chime_domain::BrokerUrl::parse(b)
                    .map_err(|e| ConfigError::Invalid(format!("CHIME_BROKERS: {}", e.message)))
            })
            .collect()
    }

    /// The gateway's limits on each app's creates (`[quotas]`).
    pub fn quota_limits(&self) -> (u64, f64, f64) {
        (
            self.quotas.max_timers_per_app,
            f64::from(self.quotas.creates_per_second),
            f64::from(self.quotas.create_burst),
        )
    }

    /// Heartbeat timings of the scheduler and migrator groups.
    pub fn roster(&self) -> crate::RosterSettings {
        crate::RosterSettings {
            heartbeat: self.membership.heartbeat.get(),
            ttl: self.membership.ttl.get(),
        }
    }

    /// The admin token the gateway accepts for every app, when auth is required: `None` when
    /// it is off, an error naming the variables when it is required and missing.
    pub fn bootstrap_token(&self) -> Result<Option<&str>, ConfigError> {
        match (self.auth.mode, self.auth.bootstrap_token.as_deref()) {
            (AuthMode::Off, _) => Ok(None),
            (AuthMode::Required, Some(token)) => Ok(Some(token)),
            (AuthMode::Required, None) => Err(ConfigError::Invalid(
                "authentication is required (CHIME_AUTH=required, the default) but no admin \
                 token is set: set CHIME_BOOTSTRAP_TOKEN (at least 16 characters, e.g. from a \
                 Kubernetes Secret), or CHIME_AUTH=off to serve without authentication"
                    .into(),
            )),
        }
    }

    /// The database URL, or a message naming the variable that sets it.
    pub fn database_url(&self) -> Result<&str, ConfigError> {
        self.database.url.as_deref().ok_or_else(|| {
            ConfigError::Invalid(
                "no database configured: set CHIME_DATABASE_URL (postgres://… or sqlite://…)"
                    .into(),
            )
        })
    }

    /// The effective configuration as TOML, passwords in URLs masked: what `--dump-config`
    /// prints, and a valid config file.
    pub fn dump(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = shown.database.url.as_deref().map(mask_password);
        shown.redis.url = shown.redis.url.as_deref().map(mask_password);
        if shown.auth.bootstrap_token.is_some() {
            shown.auth.bootstrap_token = Some("***".into());
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{path}")
        }
        _ => url.to_owned(),
    }
}
