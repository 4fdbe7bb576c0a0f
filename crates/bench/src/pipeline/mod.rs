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
    CpuSample, Delivery, LateSecond, Lateness, RssTrace, SentSplit, deliveries,
    distinct_and_duplicates, drain_per_second, git_commit, late_seconds, nearest_rank, pids_named,
    split_windows, total_but_sink, windows,
};
use chime_test_support::sink::Sink;

mod beside;
mod burst;
mod creates;
mod events;
mod floor;
mod harness;
mod materialize;
mod overload;
mod peers;
mod periodic;
mod pgstatements;
mod pgwork;
mod population;
mod pressure;
mod purge;
mod timed;
mod unbounded;
mod workers;

use beside::*;
use burst::*;
use creates::*;
use events::*;
use floor::*;
use harness::*;
use materialize::*;
use overload::*;
use peers::*;
use periodic::*;
use pgstatements::{PgStatements, statements_row};
use pgwork::*;
use population::*;
use purge::*;
use timed::*;
use unbounded::*;
use workers::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Burst,
    Steady,
    Sparse,
    Materialize,
    Api,
    Purge,
    Workers,
    #[value(name = "every-second")]
    EverySecond,
    Population,
    #[value(name = "beside-burst")]
    BesideBurst,
    /// The executors' HTTP callbacks alone, without Chime around them: the machine's ceiling.
    #[value(name = "callback-floor")]
    CallbackFloor,
    /// The same callbacks alone, paced at steady's and every-second's rates: the floor of
    /// their cost and lateness.
    #[value(name = "paced-floor")]
    PacedFloor,
    /// The callback floor with each callback then recorded by one row update in PostgreSQL:
    /// the ceiling of any durable timer service on this machine.
    #[value(name = "durable-floor")]
    DurableFloor,
    /// steady with timers created by batch before the first firing, their phases spread by
    /// `start_at` and their runs ended by `end_at`: not how users make them.
    #[value(name = "steady-bounded")]
    SteadyBounded,
    /// every-second the same way.
    #[value(name = "every-second-bounded")]
    EverySecondBounded,
    /// More every-second timers than the fleet fires, then most of them disabled: the
    /// timers kept within seconds meanwhile, and on time again once the load fell.
    Overload,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Scenarios to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "burst,callback-floor,durable-floor,paced-floor,beside-burst,steady,every-second,overload,sparse,materialize,api,purge,workers,population"
    )]
    pub scenarios: Vec<Scenario>,
    /// burst (and workers, once to workers and once over HTTP): one-shot timers due at the
    /// same instant.
    #[arg(long, default_value_t = 20_000)]
    pub burst: usize,
    /// steady: firings per second (timers firing every second, phases spread evenly).
    #[arg(long, default_value_t = 5_000)]
    pub rate: usize,
    /// steady: seconds of firing (ten minutes: long enough for checkpoints, autovacuum and
    /// the janitor to show in the tail).
    #[arg(long, default_value_t = 600)]
    pub duration: u64,
    /// every-second: firings per second.
    #[arg(long, default_value_t = 10_000)]
    pub fast_rate: usize,
    /// every-second: seconds of firing.
    #[arg(long, default_value_t = 120)]
    pub fast_duration: u64,
    /// paced-floor: seconds of callbacks alone at each of steady's and every-second's rates.
    #[arg(long, default_value_t = 30)]
    pub floor_duration: u64,
    /// beside-burst: every-second timers firing while a burst of `--burst` drains.
    #[arg(long, default_value_t = 1_000)]
    pub beside_rate: usize,
    /// beside-burst: seconds of every-second firing (the burst falls due a third of the way).
    #[arg(long, default_value_t = 15)]
    pub beside_duration: u64,
    /// workers: one-shots per second delivered to workers, paced rather than at one
    /// instant (the lateness a worker adds at an ordinary load; target p99 ≤ 20 ms).
    #[arg(long, default_value_t = 150)]
    pub workers_rate: usize,
    /// workers: seconds of paced firing.
    #[arg(long, default_value_t = 20)]
    pub workers_duration: u64,
    /// sparse: firings per second.
    #[arg(long, default_value_t = 200)]
    pub sparse_rate: usize,
    /// sparse: seconds of firing.
    #[arg(long, default_value_t = 20)]
    pub sparse_duration: u64,
    /// materialize: occurrences one migrator step writes (100 per timer).
    #[arg(long, default_value_t = 1_000_000)]
    pub materialize: usize,
    /// population: timers held at once (99 % daily cron, 1 % every minute, up to 1,000
    /// every second).
    #[arg(long, default_value_t = 10_000_000)]
    pub population: usize,
    /// population: seconds measured once they are all created.
    #[arg(long, default_value_t = 300)]
    pub population_window: u64,
    /// population: seconds to wait, after the last create, for the every-second timers to
    /// be on time again before the window.
    #[arg(long, default_value_t = 1_800)]
    pub population_settle: u64,
    /// overload: every-second timers kept through the overload.
    #[arg(long, default_value_t = 3_000)]
    pub overload_kept: usize,
    /// overload: every-second timers beside them, disabled after `--overload-duration`.
    #[arg(long, default_value_t = 12_000)]
    pub overload_dropped: usize,
    /// overload: seconds of overload, and then of recovery measured.
    #[arg(long, default_value_t = 60)]
    pub overload_duration: u64,
    #[arg(long, default_value_t = 60)]
    pub overload_recovery: u64,
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
    /// Deployments to run every scenario on, side by side in one report: PostgreSQL with
    /// Redis, PostgreSQL alone (no `CHIME_REDIS_URL`: hot index and leases in the
    /// database), MariaDB (`CHIME_TEST_MYSQL_URL`) with Redis. The materialize and purge
    /// scenarios measure PostgreSQL + Redis only.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres+redis"
    )]
    pub setups: Vec<Setup>,
    /// The setup being run (set per run from `--setups`).
    #[arg(skip)]
    pub setup: Setup,
    /// More settings for every service, as `CHIME_…=value`.
    #[arg(long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    #[command(flatten)]
    pub peer: PeerArgs,
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Setup {
    #[default]
    #[value(name = "postgres+redis")]
    #[serde(rename = "postgres+redis")]
    PostgresRedis,
    #[value(name = "postgres")]
    #[serde(rename = "postgres")]
    Postgres,
    #[value(name = "mariadb+redis")]
    #[serde(rename = "mariadb+redis")]
    MariadbRedis,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Self::PostgresRedis => "postgres+redis",
            Self::Postgres => "postgres",
            Self::MariadbRedis => "mariadb+redis",
        }
    }
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
    setup: Setup,
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
            setup: Setup::default(),
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

/// One table with a column per setup: each scenario's measures side by side.
fn side_by_side(setups: &[Setup], outcomes: &[Outcome]) {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for o in outcomes {
        for (measure, _, _) in &o.rows {
            if !keys.contains(&(o.scenario, measure.as_str())) {
                keys.push((o.scenario, measure));
            }
        }
    }
    println!();
    print!("{:<12} {:<36}", "scenario", "measure");
    for s in setups {
        print!(" {:<48}", s.name());
    }
    println!();
    for (scenario, measure) in keys {
        print!("{scenario:<12} {measure:<36}");
        for s in setups {
            let value = outcomes
                .iter()
                .filter(|o| o.setup == *s && o.scenario == scenario)
                .flat_map(|o| &o.rows)
                .find(|(m, _, _)| m == measure)
                .map_or("-", |(_, v, _)| v.as_str());
            print!(" {value:<48}");
        }
        println!();
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let began = Instant::now();
    let mut outcomes = Vec::new();
    for &setup in &args.setups {
        let args = Args {
            setup,
            ..args.clone()
        };
        for s in &args.scenarios {
            let pg_only_scenario = matches!(
                s,
                Scenario::Materialize | Scenario::Purge | Scenario::Population
            );
            if matches!(
                s,
                Scenario::CallbackFloor | Scenario::DurableFloor | Scenario::PacedFloor
            ) && setup != Setup::PostgresRedis
            {
                eprintln!(
                    "scenario {s:?} on {}: skipped (no database: run once)",
                    setup.name()
                );
                continue;
            }
            if pg_only_scenario && setup != Setup::PostgresRedis {
                eprintln!(
                    "scenario {s:?} on {}: skipped (PostgreSQL + Redis only)",
                    setup.name()
                );
                continue;
            }
            eprintln!("scenario {s:?} on {} …", setup.name());
            let t = Instant::now();
            let mut outcome = match s {
                Scenario::Burst => burst(&args).await,
                Scenario::Steady => steady(&args, Shape::Unbounded).await,
                Scenario::SteadyBounded => steady(&args, Shape::Bounded).await,
                Scenario::Sparse => sparse(&args).await,
                Scenario::Materialize => materialize(&args).await,
                Scenario::Api => api(&args).await,
                Scenario::Purge => purge(&args).await,
                Scenario::Workers => workers(&args).await,
                Scenario::EverySecond => every_second_scenario(&args, Shape::Unbounded).await,
                Scenario::EverySecondBounded => every_second_scenario(&args, Shape::Bounded).await,
                Scenario::Population => population(&args).await,
                Scenario::BesideBurst => beside_burst(&args).await,
                Scenario::CallbackFloor => callback_floor(&args).await,
                Scenario::DurableFloor => durable_floor(&args).await,
                Scenario::PacedFloor => paced_floor(&args).await,
                Scenario::Overload => overload(&args).await,
            }
            .with_context(|| format!("scenario {s:?} on {}", setup.name()))?;
            outcome.setup = setup;
            eprintln!("  done in {:.0} s", t.elapsed().as_secs_f64());
            outcomes.push(outcome);
        }
    }

    let mut peer_outcomes = Vec::new();
    for &peer in &args.peer.peers {
        for s in &args.scenarios {
            eprintln!("scenario {s:?} on {} …", peer.name());
            let t = Instant::now();
            let outcome = match s {
                Scenario::Burst => peer_burst(&args, peer).await,
                Scenario::Steady => {
                    peer_periodic(&args, peer, "steady", args.rate, args.duration).await
                }
                Scenario::Sparse => {
                    peer_periodic(
                        &args,
                        peer,
                        "sparse",
                        args.sparse_rate,
                        args.sparse_duration,
                    )
                    .await
                }
                _ => {
                    eprintln!("  skipped: peers run burst, steady and sparse");
                    continue;
                }
            }
            .with_context(|| format!("scenario {s:?} on {}", peer.name()))?;
            eprintln!("  done in {:.0} s", t.elapsed().as_secs_f64());
            peer_outcomes.push((peer, outcome));
        }
    }

    println!(
        "{:<14} {:<12} {:<36} {:<48} target",
        "setup", "scenario", "measure", "value"
    );
    for o in &outcomes {
        for (measure, value, target) in &o.rows {
            println!(
                "{:<14} {:<12} {measure:<36} {value:<48} {target}",
                o.setup.name(),
                o.scenario
            );
        }
    }
    for (peer, o) in &peer_outcomes {
        for (measure, value, _) in &o.rows {
            println!(
                "{:<14} {:<12} {measure:<36} {value:<48}",
                peer.name(),
                o.scenario
            );
        }
    }
    if args.setups.len() > 1 {
        side_by_side(&args.setups, &outcomes);
    }
    let comparison = (!peer_outcomes.is_empty()).then(|| compare(&outcomes, &peer_outcomes));
    let floor_share = burst_share_of(&outcomes, "callback-floor");
    let durable_share = burst_share_of(&outcomes, "durable-floor");
    let durable_of_floor = durable_share_of_callback_floor(&outcomes);
    for (share, ratio, gloss) in [
        (
            floor_share,
            "burst drain / callback floor",
            "the callbacks alone, on this machine now",
        ),
        (
            durable_share,
            "burst drain / durable floor",
            "the callbacks each recorded by one row update",
        ),
        (
            durable_of_floor,
            "durable floor / callback floor",
            "the most a burst that records each firing drains",
        ),
    ] {
        if let Some(share) = share {
            println!("{ratio}: {:.0} % ({gloss})", share * 100.0);
        }
    }
    let paced = beside_paced_floor(&outcomes, args.rate, args.fast_rate);
    for (scenario, f) in paced.iter().filter_map(|v| v.as_object()).flatten() {
        println!(
            "{scenario} beside the paced floor at {}/s: CPU {} × the callbacks alone, worst window p99 {} ms against {} ms",
            f["rate_per_second"],
            f["cpu_over_floor"]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.1}")),
            f["worst_window_p99_ms"],
            f["floor_worst_window_p99_ms"]
        );
    }
    let failed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.failed
                .iter()
                .map(move |f| format!("{} on {}: {f}", o.scenario, o.setup.name()))
        })
        .collect();
    let missed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.missed
                .iter()
                .map(move |m| format!("{} on {}: {m}", o.scenario, o.setup.name()))
        })
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
            "setups": args.setups,
            "env": args.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        },
        "seconds": began.elapsed().as_secs_f64(),
        "scenarios": outcomes,
        "peers": peer_outcomes
            .iter()
            .map(|(peer, o)| json!({"peer": peer, "scenario": o.scenario, "figures": o.figures}))
            .collect::<Vec<_>>(),
        "peer_settings": {
            "workers": args.executors,
            "concurrency": args.peer.peer_concurrency,
            "graphile_poll_ms": args.peer.graphile_poll_ms,
        },
        "comparison": comparison,
        "burst_share_of_callback_floor": floor_share,
        "burst_share_of_durable_floor": durable_share,
        "durable_floor_share_of_callback_floor": durable_of_floor,
        "beside_paced_floor": paced,
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
    // Beside peers, the comparison is the result: Chime's own targets are in the report.
    if !args.smoke && args.peer.peers.is_empty() && !missed.is_empty() {
        bail!("targets missed:\n  {}", missed.join("\n  "));
    }
    Ok(())
}
