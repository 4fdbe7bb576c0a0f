//! `chime-migrator`: `migrate` applies the schema migrations and exits (a Kubernetes Job).

use chime_runtime::CommonArgs;
use clap::{Parser, Subcommand};

/// Chime migrator. `chime-migrator migrate` applies the database migrations for
/// CHIME_DATABASE_URL and exits; every other service refuses a schema that is behind.
#[derive(Parser)]
#[command(name = "chime-migrator", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending schema migrations and exit (safe to run concurrently and repeatedly).
    Migrate,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Some(config) = cli.common.load_or_dump(&mut std::io::stdout())? else {
        return Ok(());
    };
    chime_runtime::init_tracing(&config.log);
    match cli.command {
        Some(Command::Migrate) => {
            chime_migrator::migrate(config.database_url()?, config.buckets).await?;
            tracing::info!("schema is current");
            Ok(())
        }
        None => anyhow::bail!(
            "the migrator service (materializing occurrences) is not built yet; \
             `chime-migrator migrate` applies the schema"
        ),
    }
}
