//! The flags every binary takes (`--config`, `--dump-config`), and how a service starts on
//! them: its config, then the async runtime the config sizes, then tracing.

use std::future::Future;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use super::{Config, ConfigError};

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

/// How many threads a binary's runtime has when `worker_threads` is not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeThreads {
    /// One. For a service that scales by replicas and whose work is many short tasks woken
    /// by the network: a second worker mostly adds threads parking and waking around each
    /// task (docs/performance.md).
    One,
    /// One per CPU the process may use (tokio's default).
    PerCpu,
}

/// The multi-thread runtime a binary runs on: `configured` workers, else its `default`.
/// `TOKIO_WORKER_THREADS`, tokio's own variable, still overrides a default.
pub fn build_runtime(
    configured: Option<NonZeroUsize>,
    default: RuntimeThreads,
) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let tokio_env = std::env::var_os("TOKIO_WORKER_THREADS").is_some();
    match (configured, default) {
        (Some(n), _) => {
            builder.worker_threads(n.get());
        }
        (None, RuntimeThreads::One) if !tokio_env => {
            builder.worker_threads(1);
        }
        (None, _) => {}
    }
    builder.build()
}

impl CommonArgs {
    /// What a service's `main` does: loads the config (with `--dump-config`, prints it and
    /// returns), starts the runtime it sizes (`default` threads unless `worker_threads` is
    /// set), sets up tracing and runs `service` to its end.
    pub fn run<F, Fut, E>(&self, default: RuntimeThreads, service: F) -> Result<(), E>
    where
        F: FnOnce(Config) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<ConfigError> + From<std::io::Error>,
    {
        self.run_over(Config::default(), default, service)
    }

    /// [`Self::run`] over other defaults than the services' (`chime dev` has a few of its
    /// own).
    pub fn run_over<F, Fut, E>(
        &self,
        defaults: Config,
        default: RuntimeThreads,
        service: F,
    ) -> Result<(), E>
    where
        F: FnOnce(Config) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<ConfigError> + From<std::io::Error>,
    {
        let Some(config) = self.load_or_dump(defaults, &mut std::io::stdout())? else {
            return Ok(());
        };
        crate::memory::without_huge_pages();
        build_runtime(config.worker_threads, default)?.block_on(async {
            crate::init_tracing(&config.log);
            service(config).await
        })
    }

    /// Loads the config over `defaults`; with `--dump-config`, writes it to `out` and returns
    /// `None` (the binary then exits without starting).
    pub(super) fn load_or_dump(
        &self,
        defaults: Config,
        out: &mut dyn std::io::Write,
    ) -> Result<Option<Config>, ConfigError> {
        let config = Config::load_over(defaults, self.config.as_deref())?;
        if self.dump_config {
            out.write_all(config.dump().as_bytes())
                .map_err(|e| ConfigError::Invalid(format!("cannot write config: {e}")))?;
            return Ok(None);
        }
        Ok(Some(config))
    }
}
