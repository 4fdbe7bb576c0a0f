//! `chime-bench`: Chime's benchmarks. Each scenario repeats its measurement, prints a table
//! of medians and writes machine-readable JSON under `target/bench/`.
//!
//! Today: `storage` (the storage layer's throughput) and `api` (create-timer over REST).

mod api;
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
    /// Create-timer throughput and latency over REST against a running gateway.
    Api(api::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Storage(args) => storage::run(args).await,
        Command::Api(args) => api::run(args).await,
    }
}
