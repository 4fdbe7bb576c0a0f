//! Process plumbing every Chime binary shares: the layered [`Config`], tracing setup and the
//! shutdown signal.

mod config;
mod shutdown;
mod telemetry;

pub use config::{
    CommonArgs, Config, ConfigError, DatabaseConfig, ExecutorConfig, GatewayConfig, LogConfig,
    LogFormat, MigratorConfig, RedisConfig, SchedulerConfig, Seconds,
};
pub use shutdown::{cancel_on_signal, shutdown_token};
pub use telemetry::{init_tracing, prometheus};
