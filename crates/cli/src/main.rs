//! `chime`: Chime in one process for development (`chime dev`), and the command-line client
//! of a running Chime (`chime timers …`).

// mimalloc, not glibc malloc: the many small allocations per callback cost less CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod apply;
mod args;
mod calendars;
mod client;
mod dev;
mod notifications;
mod output;
mod worker;

use std::process::ExitCode;

use chime_runtime::CommonArgs;
use clap::{Parser, Subcommand};

use client::TimersCommand;
use output::Output;

/// Chime, the distributed timer service: its development server and its client.
///
/// Start here:
///   chime dev                      every service in one process on SQLite; REST :8080,
///                                  gRPC :50051, an echo endpoint at /v1/echo
///   chime timers create --app demo --name hello --every 2s \
///     --url http://127.0.0.1:8080/v1/echo
///   chime timers list
///   chime timers runs 1
///
/// The client talks gRPC to --server (CHIME_SERVER, default http://127.0.0.1:50051): a
/// `chime dev`, or the chime-gateway of a deployment. Exit codes: 0 success, 1 the server
/// refused or failed the request, 2 bad usage, 3 the server cannot be reached, 4 not found.
#[derive(Parser)]
#[command(name = "chime", version = chime_runtime::build_info!().register(), verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every Chime service in this one process, on SQLite and in-memory stores: no
    /// PostgreSQL, no Redis. Timers and their history survive restarts (in ./chime-dev.db
    /// unless --memory). Takes the same CHIME_* settings as the services.
    Dev {
        #[command(flatten)]
        dev: dev::DevArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Manage timers on a running Chime.
    Timers {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: Box<TimersCommand>,
    },
    /// Sync one app's timers to YAML or JSON files (timers kept in Git): prints what
    /// changes (+ created, ~ changed with the fields, - deleted) and applies it.
    ///
    /// Example: chime apply -f timers/ --app billing --prune --dry-run
    #[command(verbatim_doc_comment)]
    Apply {
        #[command(flatten)]
        args: apply::ApplyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// A registered worker: runs CMD for each delivery of the group's timers, the body on
    /// stdin and the metadata in CHIME_IDEMPOTENCY_KEY, CHIME_TIMER_ID, CHIME_TIMER_NAME,
    /// CHIME_APP, CHIME_SCHEDULED_AT, CHIME_ATTEMPT, CHIME_DELIVERY_ID; exit status 0 acks.
    /// --server is an executor's gRPC address (or `chime dev`'s).
    ///
    /// Example: chime worker --server http://chime-executor:50061 --app billing --group invoices -- ./invoice.sh
    #[command(verbatim_doc_comment)]
    Worker {
        #[command(flatten)]
        args: worker::WorkerArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// An app's exclusion calendars: dates its timers skip (timers name them with
    /// --exclude-calendar).
    Calendars {
        #[command(subcommand)]
        command: calendars::CalendarsCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Where an app's failed, dead and recovered runs are told (admin scope).
    Notifications {
        #[command(subcommand)]
        command: notifications::NotificationsCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// Where the client commands find Chime, and how they print.
#[derive(clap::Args)]
struct ClientArgs {
    /// Chime's gRPC address.
    #[arg(
        long,
        global = true,
        env = "CHIME_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    server: String,
    /// Bearer token (an app token, or the bootstrap admin token); not needed by
    /// `chime dev`.
    #[arg(long, global = true, env = "CHIME_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// table for people, json for scripts.
    #[arg(long, global = true, value_enum, default_value = "table")]
    output: Output,
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if let Command::Dev { dev, common } = command {
        return dev_main(dev, common);
    }
    match chime_runtime::build_runtime(None, chime_runtime::RuntimeThreads::PerCpu) {
        Ok(rt) => rt.block_on(client_main(command)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `chime dev`: its config first, since `worker_threads` sizes the runtime it runs on.
fn dev_main(dev: dev::DevArgs, common: CommonArgs) -> ExitCode {
    // One developer on their own machine: no tokens unless CHIME_AUTH says so.
    let mut defaults = chime_runtime::Config::default();
    defaults.auth.mode = chime_runtime::AuthMode::Off;
    let ran = common.run_over(
        defaults,
        chime_runtime::RuntimeThreads::PerCpu,
        |config| async move {
            let ran = dev::run(config, dev).await;
            chime_runtime::flush_traces();
            ran
        },
    );
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        // A config that does not load is a usage error, as clap's own are.
        Err(e) if e.downcast_ref::<chime_runtime::ConfigError>().is_some() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The client commands, on a runtime of their own.
async fn client_main(command: Command) -> ExitCode {
    match command {
        Command::Dev { .. } => unreachable!("chime dev starts in dev_main"),
        Command::Timers { client: c, command } => finish(
            async {
                let mut client = client::connect(&c.server, c.token.as_deref()).await?;
                client::run(&mut client, *command, c.output).await
            }
            .await,
        ),
        Command::Calendars { command, client: c } => finish(
            async {
                let mut client = client::connect(&c.server, c.token.as_deref()).await?;
                calendars::run(&mut client, command, c.output).await
            }
            .await,
        ),
        Command::Notifications { command, client: c } => finish(
            async {
                let mut client = client::connect(&c.server, c.token.as_deref()).await?;
                notifications::run(&mut client, command, c.output).await
            }
            .await,
        ),
        Command::Worker { args, client: c } => match worker::run(args, c.server, c.token).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Apply { args, client: c } => finish(
            async {
                let mut client = client::connect(&c.server, c.token.as_deref()).await?;
                apply::run(&mut client, args, c.output).await
            }
            .await,
        ),
    }
}

/// Prints a client command's answer, or its error with its exit code.
fn finish(result: Result<String, client::CliError>) -> ExitCode {
    match result {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.message());
            ExitCode::from(e.exit_code())
        }
    }
}
