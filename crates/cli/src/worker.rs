//! `chime worker --app A --group G -- CMD…`: a registered worker that runs CMD once per
//! delivery, with the body on stdin and the metadata in `CHIME_*` environment variables;
//! exit status 0 acks it, any other status nacks it (retryable) with the tail of stderr.
//! What it printed (stdout, then stderr) goes with the answer as the run's output, unless
//! the timer says `"keep_output": false`.

use std::process::Stdio;

use chime_worker::{Answer, Answered, Delivery, WorkerConfig};
use tokio::io::AsyncWriteExt;

/// How much of a failed command's stderr goes into its nack.
const STDERR_TAIL: usize = 500;
/// How much of what the command printed (stdout, then stderr) goes with its answer as the
/// run's output; the executor keeps at most its last 4 KiB.
const OUTPUT_TAIL: usize = 4096;

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The app whose timers this worker serves (the token must be one of its tokens).
    #[arg(long)]
    app: String,
    /// The worker group timers name in `"callback": {"worker": {"group": …}}`.
    #[arg(long)]
    group: String,
    /// Deliveries run at once.
    #[arg(long, default_value_t = 1)]
    credits: u32,
    /// A name for the executor's logs (default: this host's name).
    #[arg(long)]
    name: Option<String>,
    /// The command run for each delivery, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// Runs until SIGINT or SIGTERM; an error if the executor refuses the worker.
pub async fn run(
    args: WorkerArgs,
    server: String,
    token: Option<String>,
) -> Result<(), chime_worker::Error> {
    let name = args
        .name
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let mut config = WorkerConfig::new(server, args.app, args.group)
        .with_credits(args.credits)
        .with_name(name);
    config.token = token;
    let command = std::sync::Arc::new(args.command);
    let handler = move |delivery: Delivery| {
        let command = command.clone();
        async move { run_command(&command, delivery).await }
    };
    chime_worker::run(config, handler, chime_runtime::shutdown_token()).await
}

async fn run_command(command: &[String], d: Delivery) -> Answered {
    let Some((program, args)) = command.split_first() else {
        return Answer::Nack {
            retryable: false,
            error: "no command".into(),
        }
        .into();
    };
    let keep_output = d.keep_output;
    let mut command = tokio::process::Command::new(program);
    // A run a chain step started: the run that ended before it.
    if let Some(parent) = d.headers.get("x-chime-parent-run") {
        command.env("CHIME_PARENT_RUN", parent);
    }
    // A broadcast run: this worker's share of it.
    if let Some((index, total)) = d.shard {
        command
            .env("CHIME_SHARD_INDEX", index.to_string())
            .env("CHIME_SHARD_TOTAL", total.to_string());
    }
    let spawned = command
        .args(args)
        .env("CHIME_DELIVERY_ID", &d.id)
        .env("CHIME_IDEMPOTENCY_KEY", &d.idempotency_key)
        .env("CHIME_TIMER_ID", d.timer_id.to_string())
        .env("CHIME_TIMER_NAME", &d.timer_name)
        .env("CHIME_APP", &d.app)
        .env("CHIME_SCHEDULED_AT", &d.scheduled_at)
        .env("CHIME_ATTEMPT", d.attempt.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Answer::Nack {
                retryable: true,
                error: format!("cannot start {program}: {e}"),
            }
            .into();
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input is fine.
        let _ = stdin.write_all(&d.body).await;
    }
    let waited = tokio::time::timeout(d.ack_timeout, child.wait_with_output()).await;
    let out = match waited {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return Answer::Nack {
                retryable: true,
                error: format!("waiting for {program}: {e}"),
            }
            .into();
        }
        // Dropping the child kills it.
        Err(_) => {
            return Answer::Nack {
                retryable: true,
                error: format!("{program} ran longer than {:?}", d.ack_timeout),
            }
            .into();
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The worker's own log still shows what the command printed.
    print!("{stdout}");
    eprint!("{stderr}");
    let answer = if out.status.success() {
        Answer::Ack
    } else {
        Answer::Nack {
            retryable: true,
            error: format!("{}: {}", out.status, tail(&stderr, STDERR_TAIL).trim()),
        }
    };
    if !keep_output {
        return answer.into();
    }
    let printed = if stderr.is_empty() {
        stdout.into_owned()
    } else {
        format!("{stdout}{stderr}")
    };
    answer.with_output(tail(&printed, OUTPUT_TAIL))
}

/// The last `chars` characters of `s`.
fn tail(s: &str, chars: usize) -> &str {
    s.char_indices()
        .rev()
        .nth(chars)
        .map_or(s, |(i, _)| &s[i..])
}
