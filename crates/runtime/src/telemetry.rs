use tracing_subscriber::EnvFilter;

use crate::{LogConfig, LogFormat};

/// Installs the global subscriber: text for people, JSON for log pipelines. `RUST_LOG`, when
/// set, wins over the configured filter. Calling it twice keeps the first.
pub fn init_tracing(config: &LogConfig) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
