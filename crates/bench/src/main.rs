//! `chime-bench`: Chime's benchmarks. Each scenario repeats its measurement, prints a table
//! of medians and writes machine-readable JSON under `target/bench/`.
//!
//! Today: `storage`, the throughput of the storage layer the firing pipeline stands on.

mod storage;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "chime-bench", version, about = "Chime benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Storage throughput: occurrence inserts and claims on PostgreSQL, hot-index adds on Redis.
    Storage(storage::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Storage(args) => storage::run(args).await,
    }
}
