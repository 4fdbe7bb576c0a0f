//! `chime-bench`: Chime's benchmarks. Each prints a table and writes machine-readable JSON
//! under `target/bench/`.
//!
//! - `pipeline`: burst, steady, sparse, materialize and api scenarios against a distributed
//!   deployment started here (`make bench`, `make bench-smoke`);
//! - `storage`: the storage layer's throughput on its own (`make bench-storage`).

mod api;
mod pipeline;
mod storage;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "chime-bench", version = chime_runtime::build_info!().register(), about = "Chime benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The firing pipeline and the API against separate processes of every service.
    Pipeline(pipeline::Args),
    /// Storage throughput: occurrence inserts and claims on PostgreSQL, hot-index adds on Redis.
    Storage(storage::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pipeline(args) => pipeline::run(args).await,
        Command::Storage(args) => storage::run(args).await,
    }
}
