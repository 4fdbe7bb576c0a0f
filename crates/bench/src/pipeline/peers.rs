//! `chime-bench pipeline --peers …`: the burst, steady and sparse scenarios run again against
//! BullMQ (on the same Redis) and Graphile Worker (on the same PostgreSQL), whose workers
//! deliver each job as the same POST to the same sink, so one record measures all three.
//! The Node side is `crates/bench/peers/peer.mjs` (`make bench-peers` installs its packages).

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Peer {
    #[value(name = "bullmq")]
    #[serde(rename = "bullmq")]
    Bullmq,
    #[value(name = "graphile-worker")]
    #[serde(rename = "graphile-worker")]
    GraphileWorker,
}

impl Peer {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Bullmq => "bullmq",
            Self::GraphileWorker => "graphile-worker",
        }
    }
}

/// How each peer is run: as many worker processes as Chime has executors, each with
/// `--peer-concurrency` jobs in flight.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    /// Also run the burst, steady and sparse scenarios on these peers, and print Chime's
    /// ratio to each (`make bench-peers`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub peers: Vec<Peer>,
    /// Jobs in flight per peer worker process.
    #[arg(long, default_value_t = 50)]
    pub peer_concurrency: usize,
    /// Graphile Worker's poll interval: it finds jobs scheduled in the future by polling.
    #[arg(long, default_value_t = 100)]
    pub graphile_poll_ms: u64,
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/peer.mjs")
}

/// Where a peer keeps its jobs: a Redis prefix or a PostgreSQL schema of its own, removed
/// when dropped.
enum Namespace {
    Redis(testkit::RedisFixture),
    Postgres(testkit::PgFixture),
}

impl Namespace {
    async fn new(peer: Peer) -> Self {
        match peer {
            Peer::Bullmq => Self::Redis(testkit::redis().await),
            Peer::GraphileWorker => Self::Postgres(testkit::pg_unmigrated().await),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Redis(r) => vec![
                ("REDIS_URL", testkit::redis_url()),
                ("NAMESPACE", r.backend.prefix().to_owned()),
            ],
            Self::Postgres(p) => vec![
                ("DATABASE_URL", testkit::database_url()),
                ("NAMESPACE", p.schema().to_owned()),
            ],
        }
    }
}

/// One Node process of a peer's run.
struct NodeProcess {
    label: String,
    child: Child,
}

impl NodeProcess {
    fn spawn(
        label: String,
        peer: Peer,
        role: &str,
        env: &[(&'static str, String)],
        logs: &Path,
    ) -> anyhow::Result<Self> {
        let log = logs.join(format!("{label}.log"));
        let mut cmd = Command::new("node");
        cmd.arg(script())
            .arg(peer.name())
            .arg(role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .context("cannot start node (Debian's nodejs package)")?;
        Ok(Self { label, child })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// The first line the process prints ("ready", or the enqueuer's summary).
    async fn first_line(&mut self, within: Duration) -> anyhow::Result<String> {
        let out = self.child.stdout.as_mut().context("stdout")?;
        let mut line = String::new();
        let mut reader = BufReader::new(out);
        let read = reader.read_line(&mut line);
        match tokio::time::timeout(within, read).await {
            Ok(Ok(n)) if n > 0 => Ok(line.trim().to_owned()),
            _ => bail!(
                "{} printed nothing within {within:?} (or exited); see {}.log",
                self.label,
                self.label
            ),
        }
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// What every Node process of a run is told: where the jobs live and where they go.
fn run_env(namespace: &Namespace, sink: &Sink) -> Vec<(&'static str, String)> {
    let mut env = namespace.env();
    env.push(("SINK_URL", sink.url("/peer")));
    env
}

/// A peer's workers, started and ready, delivering to `sink_url`.
struct PeerRun {
    namespace: Namespace,
    /// Where every Node process of the run logs.
    logs: std::path::PathBuf,
    workers: Vec<NodeProcess>,
    sink: Sink,
}

impl PeerRun {
    async fn start(args: &Args, peer: Peer) -> anyhow::Result<Self> {
        ensure!(
            script().with_file_name("node_modules").exists(),
            "the peers' npm packages are missing: run `make bench-peers` (npm ci in crates/bench/peers)"
        );
        let namespace = Namespace::new(peer).await;
        let sink = Sink::start_lean().await?;
        let mut env = run_env(&namespace, &sink);
        env.push(("CONCURRENCY", args.peer.peer_concurrency.to_string()));
        env.push(("POLL_MS", args.peer.graphile_poll_ms.to_string()));
        let logs = log_dir(&format!("bench-{}", peer.name()));
        eprintln!("process logs: {}", logs.display());
        let name = |role: &str| format!("{}-{role}", peer.name());
        let mut migrate = NodeProcess::spawn(name("migrate"), peer, "migrate", &env, &logs)?;
        let status = migrate.child.wait().await?;
        ensure!(status.success(), "{} migrate failed: {status}", peer.name());
        let mut workers = Vec::new();
        for i in 0..args.executors.max(1) {
            let mut w =
                NodeProcess::spawn(name(&format!("worker-{i}")), peer, "worker", &env, &logs)?;
            let line = w.first_line(Duration::from_secs(60)).await?;
            ensure!(line == "ready", "{} said {line:?}", w.label);
            workers.push(w);
        }
        Ok(Self {
            namespace,
            logs,
            workers,
            sink,
        })
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        run_env(&self.namespace, &self.sink)
    }

    fn processes(&self, feeder: Option<&NodeProcess>) -> Vec<(String, u32)> {
        self.workers
            .iter()
            .chain(feeder)
            .map(|p| (p.label.clone(), p.pid()))
            .collect()
    }

    /// Waits until the sink holds `expected` callbacks or `deadline` passes, then `quiet`.
    async fn collect(&self, expected: usize, deadline: Instant, quiet: Duration) -> Vec<Delivery> {
        while self.sink.count() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(quiet).await;
        deliveries(&self.sink.received())
    }

    async fn stop(self) {
        for w in self.workers {
            w.stop().await;
        }
        drop(self.namespace);
    }
}

pub(super) async fn peer_burst(args: &Args, peer: Peer) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("burst");
    let n = args.burst;
    let run = PeerRun::start(args, peer).await?;
    let due = now_ms() + 3_000 + (n as i64) * 1_000 / 2_500;
    let mut env = run.env();
    env.extend([
        ("SCENARIO", "burst".to_owned()),
        ("COUNT", n.to_string()),
        ("DUE_MS", due.to_string()),
    ]);
    let t = Instant::now();
    let mut enqueue = NodeProcess::spawn(
        format!("{}-enqueue", peer.name()),
        peer,
        "enqueue",
        &env,
        &run.logs,
    )?;
    enqueue
        .first_line(Duration::from_secs(120))
        .await
        .context("enqueue")?;
    let created = t.elapsed();
    enqueue.stop().await;
    ensure!(
        now_ms() < due - 500,
        "{} took {created:?} to enqueue {n} jobs, past the due instant",
        peer.name()
    );
    until(due - 200).await;
    let cpu0 = CpuSample::take(&run.processes(None));
    let ds = run
        .collect(
            n,
            Instant::now() + Duration::from_secs(60 + n as u64 / 500),
            Duration::from_secs(3),
        )
        .await;
    let cpu1 = CpuSample::take(&run.processes(None));
    run.stop().await;
    let (delivered, duplicates) = distinct_and_duplicates(&ds);
    let lateness = Lateness::of(&ds);
    let drain = drain_per_second(&ds, due, delivered);
    let cpu = cpu0.per_thousand(&cpu1, delivered);
    o.row("delivered", format!("{delivered} of {n}"), "");
    o.row("drain", format!("{drain:.0} firings/s"), "");
    lateness_row(&mut o, "lateness", &lateness, "");
    o.figures = json!({
        "jobs": n,
        "enqueue_seconds": created.as_secs_f64(),
        "delivered": delivered,
        "duplicates": duplicates,
        "drain_per_second": drain,
        "lateness": lateness,
        "cpu_seconds_per_1000": cpu,
        "cpu_total_per_1000": total_but_sink(&cpu),
    });
    Ok(o)
}

/// steady and sparse: jobs due as the every-second timers would fire, added by a feeder
/// five seconds ahead of their second (a queue has no every-second timer to create once).
pub(super) async fn peer_periodic(
    args: &Args,
    peer: Peer,
    name: &'static str,
    rate: usize,
    seconds: u64,
) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new(name);
    let run = PeerRun::start(args, peer).await?;
    let ahead_s = 5;
    let start = now_ms() + 2_000 + (ahead_s * rate as i64) * 1_000 / 5_000;
    let mut env = run.env();
    env.extend([
        ("SCENARIO", "periodic".to_owned()),
        ("RATE", rate.to_string()),
        ("SECONDS", seconds.to_string()),
        ("START_MS", start.to_string()),
        ("AHEAD_S", ahead_s.to_string()),
    ]);
    let mut feeder = NodeProcess::spawn(
        format!("{}-feeder", peer.name()),
        peer,
        "enqueue",
        &env,
        &run.logs,
    )?;
    until(start - 200).await;
    let cpu0 = CpuSample::take(&run.processes(Some(&feeder)));
    let end = start + seconds as i64 * 1000;
    until(end).await;
    let cpu1 = CpuSample::take(&run.processes(Some(&feeder)));
    let expected = rate * seconds as usize;
    let ds = run
        .collect(
            expected,
            Instant::now() + Duration::from_secs(30),
            Duration::from_secs(2),
        )
        .await;
    // A peer that cannot take the jobs as fast as they come is still adding them: that is
    // its result (the undelivered count shows it), not a failure of the run.
    let kept_up = feeder.first_line(Duration::from_secs(5)).await.is_ok();
    feeder.stop().await;
    run.stop().await;
    let (delivered, duplicates) = distinct_and_duplicates(&ds);
    let lateness = Lateness::of(&ds);
    let per_window = windows(&ds, start, 10_000);
    let worst = per_window.iter().map(|(_, l)| l.p99_ms).max().unwrap_or(0);
    let cpu = cpu0.per_thousand(&cpu1, delivered);
    o.row(
        "delivered",
        format!("{delivered} of {expected} (30 s after the last was due)"),
        "",
    );
    o.row(
        "jobs added in time",
        if kept_up {
            "yes"
        } else {
            "no: still adding when the run ended"
        }
        .to_owned(),
        "",
    );
    lateness_row(&mut o, "lateness, all", &lateness, "");
    o.row("worst 10 s window p99", format!("{worst} ms"), "");
    o.row(
        "cpu, all but the sink",
        format!("{:.3} s / 1,000 firings", total_but_sink(&cpu)),
        "",
    );
    o.figures = json!({
        "rate_per_second": rate,
        "seconds": seconds,
        "expected": expected,
        "delivered": delivered,
        "duplicates": duplicates,
        "lateness": lateness,
        "worst_window_p99_ms": worst,
        "enqueued_in_time": kept_up,
        "cpu_seconds_per_1000": cpu,
        "cpu_total_per_1000": total_but_sink(&cpu),
    });
    Ok(o)
}

/// A figure of each system's outcome for one scenario, and Chime's ratio to each peer.
struct Compared {
    scenario: &'static str,
    measure: &'static str,
    /// Higher is better (throughput) rather than lower (lateness, CPU).
    higher_better: bool,
    /// The least value a ratio divides by: 1 ms for lateness (0 ms happens), else tiny.
    floor: f64,
    pick: fn(&Value) -> Option<f64>,
}

const COMPARED: &[Compared] = &[
    Compared {
        scenario: "burst",
        measure: "drain (firings/s)",
        higher_better: true,
        floor: 0.001,
        pick: |f| f["drain_per_second"].as_f64(),
    },
    Compared {
        scenario: "burst",
        measure: "lateness p99 (ms)",
        higher_better: false,
        floor: 1.0,
        pick: |f| f["lateness"]["p99_ms"].as_f64(),
    },
    Compared {
        scenario: "steady",
        measure: "lateness p50 (ms)",
        higher_better: false,
        floor: 1.0,
        pick: |f| f["lateness"]["p50_ms"].as_f64(),
    },
    Compared {
        scenario: "steady",
        measure: "lateness p99 (ms)",
        higher_better: false,
        floor: 1.0,
        pick: |f| f["lateness"]["p99_ms"].as_f64(),
    },
    Compared {
        scenario: "steady",
        measure: "delivered in time (%)",
        higher_better: true,
        floor: 0.001,
        pick: |f| Some(100.0 * f["delivered"].as_f64()? / f["expected"].as_f64()?),
    },
    Compared {
        scenario: "steady",
        measure: "cpu s / 1,000 (no sink)",
        higher_better: false,
        floor: 0.001,
        pick: |f| f["cpu_total_per_1000"].as_f64(),
    },
    Compared {
        scenario: "sparse",
        measure: "lateness p50 (ms)",
        higher_better: false,
        floor: 1.0,
        pick: |f| f["lateness"]["p50_ms"].as_f64(),
    },
    Compared {
        scenario: "sparse",
        measure: "lateness p99 (ms)",
        higher_better: false,
        floor: 1.0,
        pick: |f| f["lateness"]["p99_ms"].as_f64(),
    },
];

/// A figure to print: CPU-seconds need their decimals, milliseconds and rates do not.
fn figure(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.0}")
    }
}

/// Prints Chime beside each peer with Chime's advantage (× better; below 1 is worse), and
/// returns the same as JSON for the report.
pub(super) fn compare(chime: &[Outcome], peers: &[(Peer, Outcome)]) -> Value {
    let names: Vec<Peer> = peers.iter().map(|(p, _)| *p).fold(Vec::new(), |mut v, p| {
        if !v.contains(&p) {
            v.push(p);
        }
        v
    });
    println!();
    print!("{:<8} {:<26} {:>10}", "scenario", "measure", "chime");
    for p in &names {
        print!(" {:>16} {:>9}", p.name(), "chime ×");
    }
    println!();
    let mut rows = Vec::new();
    for c in COMPARED {
        let Some(ours) = figures_of(chime, c.scenario).and_then(c.pick) else {
            continue;
        };
        print!("{:<8} {:<26} {:>10}", c.scenario, c.measure, figure(ours));
        let mut row = json!({"scenario": c.scenario, "measure": c.measure, "chime": ours});
        for p in &names {
            let theirs = peers
                .iter()
                .find(|(q, o)| q == p && o.scenario == c.scenario)
                .and_then(|(_, o)| (c.pick)(&o.figures));
            match theirs {
                Some(theirs) => {
                    let ratio = if c.higher_better {
                        ours / theirs.max(c.floor)
                    } else {
                        theirs.max(c.floor) / ours.max(c.floor)
                    };
                    print!(" {:>16} {ratio:>8.2}×", figure(theirs));
                    row[p.name()] = json!({"value": theirs, "chime_advantage": ratio});
                }
                None => print!(" {:>16} {:>9}", "-", "-"),
            }
        }
        println!();
        rows.push(row);
    }
    Value::Array(rows)
}
