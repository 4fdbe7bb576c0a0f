//! The flags every binary takes: `--config` and `--dump-config`.

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
