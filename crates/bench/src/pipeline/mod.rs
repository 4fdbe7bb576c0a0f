//! `chime-bench pipeline`: the firing pipeline against a distributed deployment on this
//! machine. Each scenario gets its own PostgreSQL schema, Redis prefix and processes
//! (gateway, migrator, schedulers, executors), so one scenario's timers and CPU time never
//! show up in another's; callbacks go to a sink inside this process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use chime_domain::{
    AppName, BucketCount, CallbackInput, Clock, Horizon, NewTimer, ScheduleInput, SystemClock,
    TimerName, TimerSpec, Timestamp,
};
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_client::TimerServiceClient;
use chime_storage::postgres::PgStore;
use chime_storage::{CreateTimer, TimerStore, testkit};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use serde_json::{Value, json};

use chime_bench::deploy::cluster::{Cluster, Spec};
use chime_bench::deploy::{Service, free_port, log_dir};
use chime_bench::measure::{
    CpuSample, Delivery, Lateness, deliveries, distinct_and_duplicates, git_commit, windows,
};
use chime_test_support::sink::Sink;

mod burst;
mod creates;
mod harness;
mod materialize;
mod periodic;

use burst::*;
use creates::*;
use harness::*;
use materialize::*;
use periodic::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Burst,
    Steady,
    Sparse,
    Materialize,
    Api,
    Purge,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenarios to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "burst,steady,sparse,materialize,api,purge"
    )]
    pub scenarios: Vec<Scenario>,
    /// burst: one-shot timers due at the same instant.
    #[arg(long, default_value_t = 20_000)]
    pub burst: usize,
    /// steady: firings per second (timers firing every second, phases spread evenly).
    #[arg(long, default_value_t = 5_000)]
    pub rate: usize,
    /// steady: seconds of firing.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// sparse: firings per second.
    #[arg(long, default_value_t = 200)]
    pub sparse_rate: usize,
    /// sparse: seconds of firing.
    #[arg(long, default_value_t = 20)]
    pub sparse_duration: u64,
    /// materialize: occurrences one migrator step writes (100 per timer).
    #[arg(long, default_value_t = 1_000_000)]
    pub materialize: usize,
    /// api: timers created per measurement (REST and gRPC, single and batch).
    #[arg(long, default_value_t = 20_000)]
    pub api_requests: usize,
    /// purge: finished occurrences, eight days old, the janitor removes during the run.
    #[arg(long, default_value_t = 2_000_000)]
    pub purge_rows: usize,
    /// purge: firings per second (every-second timers) during the run, and its seconds.
    #[arg(long, default_value_t = 2_000)]
    pub purge_rate: usize,
    #[arg(long, default_value_t = 40)]
    pub purge_duration: u64,
    /// api: concurrent clients, one measurement per level (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 8, 32])]
    pub api_concurrency: Vec<usize>,
    #[arg(long, default_value_t = 2)]
    pub schedulers: usize,
    #[arg(long, default_value_t = 2)]
    pub executors: usize,
    /// `CHIME_BUCKETS` of every service.
    #[arg(long, default_value_t = 16)]
    pub buckets: u32,
    /// More settings for every service, as `CHIME_…=value`.
    #[arg(long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Check only that every scenario completes and delivers everything, not the targets
    /// (CI, with small sizes).
    #[arg(long)]
    pub smoke: bool,
    #[arg(long, default_value = "target/bench/pipeline.json")]
    pub out: PathBuf,
    /// Also write every callback received (key, scheduled ms, arrival ms) as CSV beside
    /// the report, one file per scenario, for a closer look at the late ones.
    #[arg(long)]
    pub dump: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if !k.starts_with("CHIME_") {
        return Err(format!("{k} is not a CHIME_ setting"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// A scenario's outcome: its figures, and the targets it missed (empty when met).
#[derive(Debug, Serialize)]
struct Outcome {
    scenario: &'static str,
    figures: Value,
    /// Rows for the printed table: (measure, value, target).
    #[serde(skip)]
    rows: Vec<(String, String, String)>,
    missed: Vec<String>,
    /// What keeps the scenario from counting even as a smoke run: lost callbacks, errors.
    failed: Vec<String>,
}

impl Outcome {
    fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            figures: Value::Null,
            rows: Vec::new(),
            missed: Vec::new(),
            failed: Vec::new(),
        }
    }

    fn row(&mut self, measure: &str, value: String, target: &str) {
        self.rows
            .push((measure.to_owned(), value, target.to_owned()));
    }

    /// Records `what` as missed unless `met`.
    fn target(&mut self, met: bool, what: String) {
        if !met {
            self.missed.push(what);
        }
    }
}

fn now_ms() -> i64 {
    SystemClock.now().as_millis()
}

fn pb_time(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let began = Instant::now();
    let mut outcomes = Vec::new();
    for s in &args.scenarios {
        eprintln!("scenario {s:?} …");
        let t = Instant::now();
        let outcome = match s {
            Scenario::Burst => burst(&args).await,
            Scenario::Steady => steady(&args).await,
            Scenario::Sparse => sparse(&args).await,
            Scenario::Materialize => materialize(&args).await,
            Scenario::Api => api(&args).await,
            Scenario::Purge => purge(&args).await,
        }
        .with_context(|| format!("scenario {s:?}"))?;
        eprintln!("  done in {:.0} s", t.elapsed().as_secs_f64());
        outcomes.push(outcome);
    }

    println!(
        "{:<12} {:<36} {:<48} target",
        "scenario", "measure", "value"
    );
    for o in &outcomes {
        for (measure, value, target) in &o.rows {
            println!("{:<12} {measure:<36} {value:<48} {target}", o.scenario);
        }
    }
    let failed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.failed.iter().map(move |f| format!("{}: {f}", o.scenario)))
        .collect();
    let missed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.missed.iter().map(move |m| format!("{}: {m}", o.scenario)))
        .collect();
    let report = json!({
        "benchmark": "pipeline",
        "git_commit": git_commit(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "smoke": args.smoke,
        "deployment": {
            "schedulers": args.schedulers,
            "executors": args.executors,
            "buckets": args.buckets,
            "env": args.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        },
        "seconds": began.elapsed().as_secs_f64(),
        "scenarios": outcomes,
        "targets_met": missed.is_empty(),
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    eprintln!(
        "report written to {} ({:.0} s in all)",
        args.out.display(),
        began.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("not everything was delivered:\n  {}", failed.join("\n  "));
    }
    if !args.smoke && !missed.is_empty() {
        bail!("targets missed:\n  {}", missed.join("\n  "));
    }
    Ok(())
}
