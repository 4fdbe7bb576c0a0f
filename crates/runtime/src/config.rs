//! One `Config` for every binary, a section per role. Layers, later wins:
//! built-in defaults < TOML file (`--config` / `CHIME_CONFIG`) < `CHIME_*` environment.
//!
//! The documented flat variables (`CHIME_DATABASE_URL`, `CHIME_HTTP_ADDR`, …) map onto their
//! sections; any other setting is reachable as `CHIME_<SECTION>__<KEY>`, e.g.
//! `CHIME_SCHEDULER__LEASE_TTL=5s`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chime_domain::{BucketCount, format_duration, parse_duration};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Flat environment names from ARCHITECTURE §4 and the config keys they set.
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
];

/// Variables that steer loading itself rather than set a value.
const ENV_IGNORED: &[&str] = &["config", "test_database_url", "test_redis_url", "server"];

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl Seconds {
    pub const fn secs(s: u64) -> Self {
        Self(Duration::from_secs(s))
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Secs(u64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => parse_duration(&s)
                .map(Self)
                .map_err(serde::de::Error::custom),
            Raw::Secs(n) => Ok(Self(Duration::from_secs(n))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://…` or `sqlite://…`.
    pub url: Option<String>,
    pub max_connections: u32,
    pub acquire_timeout: Seconds,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            max_connections: 16,
            acquire_timeout: Seconds::secs(5),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Absent in embedded mode.
    pub url: Option<String>,
    /// Prefix of every key, so deployments can share one Redis.
    pub prefix: String,
    pub pool_size: usize,
    /// How long a hot-index shard outlives its minute.
    pub shard_retention: Seconds,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            prefix: "chime".into(),
            pool_size: 4,
            shard_retention: Seconds::secs(300),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// The migrator asked to materialize a timer at once; absent: rely on the periodic step.
    pub migrator_endpoint: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            grpc_addr: SocketAddr::from(([0, 0, 0, 0], 50051)),
            migrator_endpoint: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MigratorConfig {
    pub addr: SocketAddr,
    /// How far ahead every enabled timer's occurrences are written: by the gateway with the
    /// timer, then by the migrator, which extends a timer once less than half is left.
    /// Recurring timers keep firing at least this long with every migrator down.
    pub lead: Seconds,
    /// At most this many occurrences of one timer are written ahead, whatever `lead` says.
    pub max_ahead: usize,
    /// How often a migrator replica passes over its buckets.
    pub interval: Seconds,
    /// The lease on a bucket a replica works; a dead replica's buckets are taken over this
    /// long after.
    pub work_lease: Seconds,
}

impl Default for MigratorConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 50071)),
            lead: Seconds(chime_domain::Horizon::DEFAULT.lead),
            max_ahead: chime_domain::Horizon::DEFAULT.max_rows,
            interval: Seconds::secs(1),
            work_lease: Seconds::secs(3),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Succeeded, failed and skipped occurrences are kept this long after their due time,
    /// and deleted timers this long after their deletion (then with all their rows).
    pub history: Seconds,
    /// Dead occurrences (attempts exhausted) are kept this long after their due time.
    pub dead_letters: Seconds,
    /// Create requests' idempotency keys are kept this long.
    pub idempotency_keys: Seconds,
    /// How often the janitor (one migrator replica at a time) looks for rows to remove.
    pub interval: Seconds,
    /// Rows one delete statement removes at most.
    pub batch: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            history: Seconds::secs(7 * 86_400),
            dead_letters: Seconds::secs(30 * 86_400),
            idempotency_keys: Seconds::secs(86_400),
            interval: Seconds::secs(60),
            batch: 5_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Executor URLs, or one DNS name re-resolved periodically. Comma-separated in the env.
    #[serde(deserialize_with = "comma_list")]
    pub executor_endpoints: Vec<String>,
    /// How long a shard lease lasts without renewal.
    pub lease_ttl: Seconds,
    /// How far ahead of due the holder reads a shard.
    pub lookahead: Seconds,
    /// How far ahead of due keys are handed to executors, which claim them at once and
    /// call back at the due instant. At most `lookahead`.
    pub dispatch_ahead: Seconds,
    /// How often the sweeper looks for occurrences the hot path missed.
    pub sweep_interval: Seconds,
    /// How overdue a pending occurrence must be before the sweeper takes it over.
    pub sweep_after: Seconds,
    /// Occurrences overdue by more than this fall under their timer's misfire policy.
    pub misfire_threshold: Seconds,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            executor_endpoints: Vec::new(),
            lease_ttl: Seconds::secs(3),
            lookahead: Seconds::secs(2),
            dispatch_ahead: Seconds(Duration::from_millis(100)),
            sweep_interval: Seconds::secs(1),
            sweep_after: Seconds::secs(2),
            misfire_threshold: Seconds::secs(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    pub addr: SocketAddr,
    /// Callbacks in flight at once before the executor answers "full".
    pub max_in_flight: usize,
    /// Added to the longest callback timeout of a batch to form its claim lease: past it,
    /// the sweeper may hand the occurrence to another executor.
    pub claim_lease_margin: Seconds,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 50061)),
            max_in_flight: 1024,
            claim_lease_margin: Seconds::secs(5),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// An `EnvFilter` directive such as `info,chime_storage=debug`.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Work is split into this many buckets (`CHIME_BUCKETS`); every service must agree.
    pub buckets: BucketCount,
    /// `/healthz`, `/readyz`, `/metrics`; each service picks its own default when absent.
    pub admin_addr: Option<SocketAddr>,
    /// How long a stopping service may drain in-flight work.
    pub shutdown_grace: Seconds,
    pub database: DatabaseConfig,
    pub redis: RedisConfig,
    pub gateway: GatewayConfig,
    pub migrator: MigratorConfig,
    pub retention: RetentionConfig,
    pub scheduler: SchedulerConfig,
    pub executor: ExecutorConfig,
    pub log: LogConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            buckets: BucketCount::DEFAULT,
            admin_addr: None,
            shutdown_grace: Seconds::secs(30),
            database: DatabaseConfig::default(),
            redis: RedisConfig::default(),
            gateway: GatewayConfig::default(),
            migrator: MigratorConfig::default(),
            retention: RetentionConfig::default(),
            scheduler: SchedulerConfig::default(),
            executor: ExecutorConfig::default(),
            log: LogConfig::default(),
        }
    }
}

fn comma_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let items = match Raw::deserialize(d)? {
        Raw::One(s) => s.split(',').map(str::to_owned).collect(),
        Raw::Many(v) => v,
    };
    Ok(items
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect())
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
        let env = env.ignore(ENV_IGNORED).map(|k| env_key(k.as_str()).into());
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
        if self.executor.max_in_flight == 0 {
            return bad("executor.max_in_flight must be at least 1");
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
        if self.scheduler.lease_ttl.get() < Duration::from_secs(1) {
            return bad("scheduler.lease_ttl must be at least 1s");
        }
        if self.scheduler.sweep_interval.get() < Duration::from_millis(100) {
            return bad("scheduler.sweep_interval must be at least 100ms");
        }
        if self.scheduler.misfire_threshold.get() < self.scheduler.sweep_after.get() {
            return bad("scheduler.misfire_threshold must not be below scheduler.sweep_after");
        }
        Ok(())
    }

    /// How far ahead timers are materialized (`migrator.lead`, `migrator.max_ahead`): the
    /// gateway writes a timer's first occurrences with it, the migrator extends by it.
    pub fn horizon(&self) -> chime_domain::Horizon {
        chime_domain::Horizon {
            lead: self.migrator.lead.get(),
            max_rows: self.migrator.max_ahead,
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

/// The flags every Chime binary takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// TOML config file; `CHIME_*` environment variables override it.
    #[arg(long, env = "CHIME_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (defaults < file < env) as TOML and exit.
    #[arg(long)]
    pub dump_config: bool,
}

impl CommonArgs {
    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.config.as_deref())
    }

    /// What every binary does first: loads the config (printing it and returning `None`
    /// with `--dump-config`) and sets up tracing from it.
    pub fn start(&self) -> Result<Option<Config>, ConfigError> {
        self.start_over(Config::default())
    }

    /// [`Self::start`] over other defaults.
    pub fn start_over(&self, defaults: Config) -> Result<Option<Config>, ConfigError> {
        let config = self.dump_or(
            Config::load_over(defaults, self.config.as_deref())?,
            &mut std::io::stdout(),
        )?;
        if let Some(c) = &config {
            crate::init_tracing(&c.log);
        }
        Ok(config)
    }

    /// Loads the config; with `--dump-config`, writes it to `out` and returns `None` (the
    /// binary then exits without starting).
    pub fn load_or_dump(
        &self,
        out: &mut dyn std::io::Write,
    ) -> Result<Option<Config>, ConfigError> {
        self.dump_or(self.load()?, out)
    }

    fn dump_or(
        &self,
        config: Config,
        out: &mut dyn std::io::Write,
    ) -> Result<Option<Config>, ConfigError> {
        if self.dump_config {
            out.write_all(config.dump().as_bytes())
                .map_err(|e| ConfigError::Invalid(format!("cannot write config: {e}")))?;
            return Ok(None);
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
// figment's Jail API fixes its closures' (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    fn load_with(file: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        // Jail gives each test a private environment and working directory.
        let mut out = None;
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            if let Some(body) = file {
                jail.create_file("chime.toml", body)?;
            }
            for (k, v) in env {
                jail.set_env(k, v);
            }
            out = Some(Config::load(file.map(|_| Path::new("chime.toml"))));
            Ok(())
        });
        out.expect("jail ran")
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = load_with(None, &[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.gateway.http_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(c.gateway.grpc_addr.to_string(), "0.0.0.0:50051");
        assert_eq!(c.executor.addr.to_string(), "0.0.0.0:50061");
        assert_eq!(c.migrator.addr.to_string(), "0.0.0.0:50071");
        assert_eq!(c.redis.prefix, "chime");
        assert_eq!(c.buckets.get(), 16);
        assert_eq!(c.executor.max_in_flight, 1024);
        assert_eq!(c.migrator.lead.get(), Duration::from_secs(60));
        assert_eq!(c.migrator.max_ahead, 100);
        assert!(c.database_url().is_err());
    }

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let file = r#"
            buckets = 8
            [database]
            url = "postgres://file/db"
            [redis]
            prefix = "from-file"
            [migrator]
            lead = "10m"
        "#;
        let c = load_with(
            Some(file),
            &[
                ("CHIME_DATABASE_URL", "postgres://env/db"),
                ("CHIME_BUCKETS", "32"),
                ("CHIME_EXECUTOR_ENDPOINTS", "http://a:50061, http://b:50061"),
                ("CHIME_HTTP_ADDR", "127.0.0.1:9000"),
                ("CHIME_SCHEDULER__LEASE_TTL", "3s"),
            ],
        )
        .unwrap();
        assert_eq!(c.database.url.as_deref(), Some("postgres://env/db"));
        assert_eq!(c.buckets.get(), 32);
        assert_eq!(c.redis.prefix, "from-file");
        assert_eq!(c.migrator.lead.get(), Duration::from_secs(600));
        assert_eq!(
            c.scheduler.executor_endpoints,
            vec!["http://a:50061".to_owned(), "http://b:50061".to_owned()]
        );
        assert_eq!(c.gateway.http_addr.to_string(), "127.0.0.1:9000");
        assert_eq!(c.scheduler.lease_ttl.get(), Duration::from_secs(3));
    }

    #[test]
    fn bad_values_are_reported_with_their_key() {
        let err = load_with(None, &[("CHIME_BUCKETS", "0")])
            .unwrap_err()
            .to_string()
            .to_lowercase();
        assert!(err.contains("buckets"), "{err}");
        let err = load_with(None, &[("CHIME_HTTP_ADDR", "not-an-addr")])
            .unwrap_err()
            .to_string()
            .to_lowercase();
        assert!(err.contains("http_addr"), "{err}");
        let err = load_with(None, &[("CHIME_MIGRATOR__LEAD", "soon")])
            .unwrap_err()
            .to_string()
            .to_lowercase();
        assert!(err.contains("lead"), "{err}");
        let err = load_with(None, &[("CHIME_MIGRATOR__INTERVAL", "30s")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("migrator.interval"), "{err}");
        let err = load_with(Some("[gateway]\nhttp_port = 1\n"), &[])
            .unwrap_err()
            .to_string()
            .to_lowercase();
        assert!(err.contains("http_port"), "{err}");
        assert!(Config::load(Some(Path::new("/nonexistent/chime.toml"))).is_err());
    }

    #[test]
    fn dump_is_valid_toml_that_loads_back_with_passwords_masked() {
        let c = load_with(
            None,
            &[
                (
                    "CHIME_DATABASE_URL",
                    "postgres://chime:s3cret@db:5432/chime",
                ),
                ("CHIME_REDIS_URL", "redis://cache:6379"),
            ],
        )
        .unwrap();
        let dumped = c.dump();
        assert!(!dumped.contains("s3cret"), "{dumped}");
        assert!(
            dumped.contains("postgres://chime:***@db:5432/chime"),
            "{dumped}"
        );
        let back = load_with(Some(&dumped), &[]).unwrap();
        assert_eq!(back.redis, c.redis);
        assert_eq!(back.scheduler, c.scheduler);
        assert_eq!(back.buckets, c.buckets);
    }

    #[test]
    fn dump_config_flag_prints_and_stops() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let mut out = None;
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            jail.set_env("CHIME_REDIS_PREFIX", "dumped");
            let dump = Cli::parse_from(["chime-test", "--dump-config"]);
            let run = Cli::parse_from(["chime-test"]);
            let mut printed = Vec::new();
            let stopped = dump.common.load_or_dump(&mut printed).map(|c| c.is_none());
            let started = run
                .common
                .load_or_dump(&mut Vec::new())
                .map(|c| c.is_some());
            out = Some((
                stopped,
                started,
                String::from_utf8_lossy(&printed).into_owned(),
            ));
            Ok(())
        });
        let (stopped, started, printed) = out.expect("jail ran");
        assert!(stopped.unwrap() && started.unwrap());
        assert!(printed.contains("prefix = \"dumped\""), "{printed}");
    }

    #[test]
    fn other_defaults_still_yield_to_file_and_env() {
        let mut defaults = Config::default();
        defaults.migrator.lead = Seconds::secs(30);
        let mut out = None;
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            let plain = Config::load_over(defaults.clone(), None);
            jail.set_env("CHIME_MIGRATOR__LEAD", "1h");
            let overridden = Config::load_over(defaults.clone(), None);
            out = Some((plain, overridden));
            Ok(())
        });
        let (plain, overridden) = out.expect("jail ran");
        assert_eq!(plain.unwrap().migrator.lead, Seconds::secs(30));
        assert_eq!(overridden.unwrap().migrator.lead, Seconds::secs(3600));
    }

    #[test]
    fn masking_leaves_password_free_urls_alone() {
        assert_eq!(
            mask_password("sqlite://chime-dev.db"),
            "sqlite://chime-dev.db"
        );
        assert_eq!(mask_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(mask_password("redis://:pw@h:6379"), "redis://:***@h:6379");
    }
}
