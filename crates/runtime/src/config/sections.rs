//! The sections of [`Config`](super::Config), one struct per role, with their defaults.

use std::net::SocketAddr;
use std::time::Duration;

use chime_domain::{format_duration, parse_duration};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

/// TLS: this service's certificate and key (PEM files), the CA whose client certificates its
/// gRPC server requires (mutual TLS), and the CA it trusts when it calls other services.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Certificate chain (PEM): with `key`, the servers speak TLS and gRPC calls present it.
    pub cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of `cert`.
    pub key: Option<std::path::PathBuf>,
    /// CA (PEM) that client certificates must chain to: the gRPC server then requires one.
    pub client_ca: Option<std::path::PathBuf>,
    /// CA (PEM) this service trusts for its own gRPC calls (scheduler → executors).
    pub ca: Option<std::path::PathBuf>,
}

/// Limits on each app's creates, per gateway replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasConfig {
    /// Live timers one app may have.
    pub max_timers_per_app: u64,
    /// Creates per second one app may sustain, per gateway replica.
    pub creates_per_second: u32,
    /// Creates one app may make at once before the rate applies, per gateway replica.
    pub create_burst: u32,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        Self {
            max_timers_per_app: 100_000,
            creates_per_second: 2_000,
            create_burst: 20_000,
        }
    }
}

/// Whether the gateway asks callers for a token (`CHIME_AUTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Every API request needs a bearer token (the default of every service).
    #[default]
    Required,
    /// Every caller may do everything (`chime dev`).
    Off,
}

/// Who may call the gateway, and how callbacks are signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// An admin token for every app (`CHIME_BOOTSTRAP_TOKEN`, from a Secret): required by
    /// the gateway when `mode` is `required`. At least 16 characters.
    pub bootstrap_token: Option<String>,
    /// How long a gateway trusts what it read of a token: a revocation reaches every
    /// replica within this.
    pub cache_ttl: Seconds,
    /// How long a rotated-out signing secret still signs callbacks beside the new one.
    pub signing_grace: Seconds,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::Required,
            bootstrap_token: None,
            cache_ttl: Seconds::secs(1),
            signing_grace: Seconds::secs(86_400),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MigratorConfig {
    /// Unused: the migrator serves no gRPC any more, only its admin endpoints. Still
    /// accepted, with a warning, so a rollout's older manifests keep starting.
    pub addr: Option<SocketAddr>,
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
    /// Fast recurring timers created from now on leave their runs unwritten: no occurrence
    /// row ahead, one row each when it ends (`chime_domain::UnwrittenRun`). `false`: every
    /// new timer's runs are written ahead, as before. Timers keep what they were created
    /// with.
    pub unwritten_runs: bool,
}

impl Default for MigratorConfig {
    fn default() -> Self {
        Self {
            addr: None,
            lead: Seconds(chime_domain::Horizon::DEFAULT.lead),
            max_ahead: chime_domain::Horizon::DEFAULT.max_rows,
            interval: Seconds::secs(1),
            work_lease: Seconds::secs(3),
            unwritten_runs: true,
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
    /// PostgreSQL: how far ahead the janitor keeps day partitions of occurrences ready.
    /// Rows due further ahead wait in the default partition until their day is created.
    pub partitions_ahead: Seconds,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            history: Seconds::secs(7 * 86_400),
            dead_letters: Seconds::secs(30 * 86_400),
            idempotency_keys: Seconds::secs(86_400),
            interval: Seconds::secs(60),
            batch: 5_000,
            partitions_ahead: Seconds::secs(7 * 86_400),
        }
    }
}

/// Where callbacks may go (the SSRF policy, `chime_domain::NetworkPolicy`): CIDRs opened
/// beyond the default and CIDRs closed on top of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallbacksConfig {
    #[serde(deserialize_with = "comma_list")]
    pub allow_networks: Vec<String>,
    #[serde(deserialize_with = "comma_list")]
    pub deny_networks: Vec<String>,
    /// The NATS and AMQP servers a timer may publish to (`CHIME_BROKERS`); none by default,
    /// so tenants cannot point Chime at a broker of their choosing.
    #[serde(deserialize_with = "comma_list")]
    pub brokers: Vec<String>,
}

/// Scheduler and migrator replicas split the buckets among the live members of their group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MembershipConfig {
    /// How often a replica announces itself.
    pub heartbeat: Seconds,
    /// How long after its last heartbeat a replica still counts as live: a replica killed
    /// without a goodbye loses its buckets to its peers this long after its last heartbeat.
    pub ttl: Seconds,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        Self {
            heartbeat: Seconds(Duration::from_millis(250)),
            ttl: Seconds(Duration::from_millis(1_000)),
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
    /// Callbacks to one host (`host:port`) at once; more wait their turn without holding an
    /// in-flight slot, so one slow endpoint cannot starve the others.
    pub max_per_host: usize,
    /// How long keys handed off well ahead of their due time wait for more to join their
    /// claim (one statement per batch); 0 claims each hand-off at once.
    pub claim_linger: Seconds,
    /// How long finished callbacks' outcomes wait for more to join their write; 0 writes
    /// each batch at once.
    pub outcome_linger: Seconds,
    /// Timers kept between claims (a timer is the same until its version changes, which the
    /// claim reports): a claim of cached timers reads and parses none. 0 keeps none.
    pub timer_cache: usize,
    /// The URL other executors reach this one's gRPC at, which it announces in the
    /// `executors` roster when no `CHIME_EXECUTOR_ENDPOINTS` is set. `None`: the listening
    /// address, with the machine's own address for an unspecified IP (`0.0.0.0`).
    pub advertise_url: Option<String>,
    /// With Redis, take written runs' first attempts under run leases instead of claiming
    /// their rows (one row write per firing fewer). Off, a Redis that loses its data cannot
    /// bring a written run's callback in flight a second time.
    pub leased_first_attempts: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 50061)),
            max_in_flight: 2048,
            claim_lease_margin: Seconds::secs(5),
            max_per_host: 256,
            claim_linger: Seconds(Duration::from_millis(20)),
            outcome_linger: Seconds(Duration::from_millis(50)),
            timer_cache: 16_384,
            advertise_url: None,
            leased_first_attempts: true,
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
