//! callback-floor and paced-floor: an executor's HTTP callbacks alone, with no scheduler,
//! claim, outcome or database. As many client processes as executors each send their share of a burst
//! with an executor's own client and request (`HttpTarget::deliver`), as many at once as an
//! executor lets one host have, to the same sink the other scenarios use. The rate is the
//! most this machine delivers over HTTP whatever Chime does around each callback: the
//! ceiling a burst's drain is judged against. Paced, at the periodic scenarios' rates, it
//! is the floor of their cost and lateness.
//!
//! durable-floor: the same burst with each delivered callback then recorded by one row update
//! in PostgreSQL, a batch at a time: what these cores give any timer service that records
//! every firing durably, whatever its design, and so the ceiling a durable burst's drain
//! meets before Chime's own work is counted.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use chime_bench::callbacks::callback_id;

use super::*;

pub(super) async fn callback_floor(args: &Args) -> anyhow::Result<Outcome> {
    burst_floor(args, None).await
}

/// durable-floor: callback-floor's burst with each delivered callback's row then updated in
/// PostgreSQL (`chime-bench-callbacks --record`), the rows written before the start as a
/// burst's timers are. Its CPU counts PostgreSQL's beside the clients'.
pub(super) async fn durable_floor(args: &Args) -> anyhow::Result<Outcome> {
    let db = testkit::pg_unmigrated().await;
    let pool = db.store.pool();
    sqlx::query(
        "CREATE TABLE durable_floor (id bigint PRIMARY KEY, run_at bigint NOT NULL, \
         status text NOT NULL DEFAULT 'pending', attempt int NOT NULL DEFAULT 0, \
         finished_at bigint)",
    )
    .execute(pool)
    .await?;
    let clients = args.executors.max(1);
    for c in 0..clients {
        // The ids `chime-bench-callbacks --client c` sends.
        let count = client_share(args.burst, clients, c);
        sqlx::query(
            "INSERT INTO durable_floor (id, run_at) \
             SELECT g, 0 FROM generate_series($1::bigint, $2::bigint) g",
        )
        .bind(callback_id(c as i64, 0))
        .bind(callback_id(c as i64, count - 1))
        .execute(pool)
        .await?;
    }
    sqlx::query("ANALYZE durable_floor").execute(pool).await?;
    burst_floor(args, Some(&db)).await
}

/// A burst of `--burst` callbacks from one client process per executor, each recording its
/// callbacks in `durable`'s `durable_floor` table when given.
async fn burst_floor(args: &Args, durable: Option<&testkit::PgFixture>) -> anyhow::Result<Outcome> {
    let (scenario, path, what) = match durable {
        None => ("callback-floor", "/floor", "callbacks alone"),
        Some(_) => ("durable-floor", "/durable", "callbacks, each recorded"),
    };
    let mut o = Outcome::new(scenario);
    let n = args.burst;
    let clients = args.executors.max(1);
    let concurrency = chime_runtime::Config::default().executor.max_per_host;
    let sink = Sink::start_lean().await?;
    let record = durable.map(|db| db.url());
    // Time for the clients to start and build their HTTP client.
    let start_ms = now_ms() + 2_000;
    let mut run = Clients::start(
        &sink.url(path),
        n,
        clients,
        concurrency,
        start_ms,
        None,
        record.as_deref(),
    )?;
    until(start_ms - 200).await;
    run.mark();
    let (failed, cpu) = run
        .finish(Duration::from_secs(60 + n as u64 / 1_000), n)
        .await?;
    let recorded = match durable {
        Some(db) => Some(
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM durable_floor WHERE status = 'succeeded'",
            )
            .fetch_one(db.store.pool())
            .await? as usize,
        ),
        None => None,
    };
    let received = sink.received();
    let delivered = received.len();
    if delivered < n || failed > 0 || recorded.is_some_and(|r| r < n) {
        let recorded = recorded.map_or(String::new(), |r| format!(", {r} recorded"));
        o.failed.push(format!(
            "{delivered} of {n} callbacks received{recorded}, {failed} failed"
        ));
    }
    let last = received.iter().map(|r| r.at_ms).max().unwrap_or(start_ms);
    let rate = delivered as f64 / ((last - start_ms).max(1) as f64 / 1000.0);
    let clients_cpu = total_but_sink(&cpu);
    let with_sink: f64 = cpu.values().sum();
    let cores = with_sink * rate / 1_000.0;
    let with_db = if durable.is_some() {
        " with PostgreSQL"
    } else {
        ""
    };
    o.row(
        what,
        format!("{rate:.0}/s ({clients} clients, {concurrency} in flight each)"),
        "",
    );
    o.row(
        "cpu",
        format!(
            "{clients_cpu:.3} s / 1,000 callbacks{with_db}, {with_sink:.3} with the sink: {cores:.2} cores busy"
        ),
        "",
    );
    o.figures = json!({
        "callbacks": n,
        "delivered": delivered,
        "recorded": recorded,
        "failed": failed,
        "clients": clients,
        "in_flight_per_client": concurrency,
        "callbacks_per_second": rate,
        "cores_busy": cores,
        "cpu_seconds_per_1000": cpu,
    });
    Ok(o)
}

/// paced-floor: the callbacks alone at steady's rate and at every-second's, each sent at its
/// own due instant for `--floor-duration` seconds, to the same sink. What these cores give
/// a paced load with nothing of Chime around it: the lateness (per 10-s window, as the
/// periodic scenarios report it) and the CPU per 1,000 callbacks that the steady cost and
/// the every-second windows are judged against.
pub(super) async fn paced_floor(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("paced-floor");
    let clients = args.executors.max(1);
    let concurrency = chime_runtime::Config::default().executor.max_in_flight;
    let mut figures = serde_json::Map::new();
    for rate in [args.rate, args.fast_rate] {
        let n = rate * args.floor_duration as usize;
        let sink = Sink::start_lean().await?;
        let start_ms = now_ms() + 2_000;
        let per_client = rate as f64 / clients as f64;
        let mut run = Clients::start(
            &sink.url("/paced"),
            n,
            clients,
            concurrency,
            start_ms,
            Some(per_client),
            None,
        )?;
        until(start_ms - 200).await;
        run.mark();
        let (failed, cpu) = run
            .finish(Duration::from_secs(60 + args.floor_duration), n)
            .await?;
        let ds = deliveries(&sink.received());
        let (delivered, _) = distinct_and_duplicates(&ds);
        if delivered < n || failed > 0 {
            o.failed.push(format!(
                "at {rate}/s: {delivered} of {n} callbacks received, {failed} failed"
            ));
        }
        let all = Lateness::of(&ds);
        let per_window = windows(&ds, start_ms, 10_000);
        let worst = per_window.iter().map(|(_, l)| l.p99_ms).max().unwrap_or(0);
        // The first window opens the clients' connections to the sink while the rate is
        // already full: the machine's settled floor is the worst window after it.
        let settled = per_window
            .iter()
            .filter(|(from_s, _)| *from_s >= 10)
            .map(|(_, l)| l.p99_ms)
            .max()
            .unwrap_or(worst);
        let clients_cpu = total_but_sink(&cpu);
        lateness_row(&mut o, &format!("at {rate}/s, lateness"), &all, "");
        o.row(
            &format!("at {rate}/s, worst 10 s window p99"),
            format!("{worst} ms ({settled} ms after the first)"),
            "",
        );
        o.row(
            &format!("at {rate}/s, cpu"),
            format!("{clients_cpu:.3} s / 1,000 callbacks"),
            "",
        );
        figures.insert(
            format!("at_{rate}"),
            json!({
                "rate_per_second": rate,
                "callbacks": n,
                "delivered": delivered,
                "failed": failed,
                "lateness": all,
                "worst_window_p99_ms": worst,
                "settled_worst_window_p99_ms": settled,
                "windows": per_window
                    .iter()
                    .map(|(from_s, l)| json!({"from_second": from_s, "lateness": l}))
                    .collect::<Vec<_>>(),
                "cpu_seconds_per_1000": cpu,
                "cpu_total_per_1000": clients_cpu,
            }),
        );
    }
    figures.insert("clients".into(), json!(clients));
    figures.insert("seconds".into(), json!(args.floor_duration));
    o.figures = serde_json::Value::Object(figures);
    Ok(o)
}

/// Client `c`'s share of `n` callbacks among `clients`: the first `n % clients` take one more.
fn client_share(n: usize, clients: usize, c: usize) -> usize {
    n / clients + usize::from(c < n % clients)
}

/// The `chime-bench-callbacks` processes of one floor run, with the CPU they have used.
struct Clients {
    children: Vec<tokio::process::Child>,
    pids: Vec<(String, u32)>,
    cpu0: CpuSample,
    /// Recording in PostgreSQL: its CPU is the floor's too.
    recording: bool,
}

impl Clients {
    /// Starts `clients` processes sharing `n` callbacks to `url` from `start_ms`, each with
    /// `concurrency` in flight at most, all at once or (`rate`) paced per client, each
    /// delivered callback recorded in the database at `record` if given.
    fn start(
        url: &str,
        n: usize,
        clients: usize,
        concurrency: usize,
        start_ms: i64,
        rate: Option<f64>,
        record: Option<&str>,
    ) -> anyhow::Result<Self> {
        // Beside this binary: the executor's client with the executor's allocator.
        let exe = std::env::current_exe()?.with_file_name("chime-bench-callbacks");
        let mut children = Vec::new();
        for c in 0..clients {
            let count = client_share(n, clients, c);
            let mut command = tokio::process::Command::new(&exe);
            command
                .args(["--url", url])
                .args(["--count", &count.to_string()])
                .args(["--concurrency", &concurrency.to_string()])
                .args(["--start-ms", &start_ms.to_string()])
                .args(["--client", &c.to_string()]);
            if let Some(rate) = rate {
                command.args(["--rate", &rate.to_string()]);
            }
            if let Some(db) = record {
                command.args(["--record", db]);
            }
            let child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| {
                    format!(
                        "cannot start {} (built with chime-bench: cargo build -p chime-bench)",
                        exe.display()
                    )
                })?;
            children.push(child);
        }
        let pids: Vec<(String, u32)> = children
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((format!("callbacks-{i}"), c.id()?)))
            .collect();
        Ok(Self {
            children,
            pids,
            // Set by `mark`, once the clients are up.
            cpu0: CpuSample::default(),
            recording: record.is_some(),
        })
    }

    /// Marks where the CPU counted starts: call it once the clients are up, just before the
    /// first callback is due, so that starting a process is not a callback's cost.
    fn mark(&mut self) {
        self.cpu0 = CpuSample::take(&self.pids);
    }

    /// Waits up to `deadline` for each client's `done {failed}`, then lets them exit.
    /// Returns the callbacks that failed and the clients' CPU seconds per 1,000 of `n`.
    async fn finish(
        mut self,
        deadline: Duration,
        n: usize,
    ) -> anyhow::Result<(usize, BTreeMap<String, f64>)> {
        let mut failed = 0;
        for child in &mut self.children {
            let out = child
                .stdout
                .take()
                .context("a callback client has no stdout")?;
            let mut line = String::new();
            tokio::time::timeout(deadline, BufReader::new(out).read_line(&mut line))
                .await
                .context("a callback client did not finish in time")??;
            failed += line
                .trim()
                .strip_prefix("done ")
                .and_then(|f| f.parse::<usize>().ok())
                .with_context(|| format!("a callback client said {line:?}"))?;
        }
        let cpu1 = CpuSample::take(&self.pids);
        for mut child in self.children {
            drop(child.stdin.take());
            let _ = child.wait().await;
        }
        let cpu = self
            .cpu0
            .per_thousand(&cpu1, n)
            .into_iter()
            .filter(|(label, _)| {
                label.starts_with("callbacks-")
                    || label == "chime-bench"
                    || (self.recording && label == "postgres")
            })
            .collect();
        Ok((failed, cpu))
    }
}

/// Steady's and every-second's figures beside the paced floor's at the same rate, when they
/// ran in one invocation on PostgreSQL + Redis: Chime's CPU per firing as a multiple of the
/// callbacks' own, and the worst windows side by side (the floor's after its first).
pub(super) fn beside_paced_floor(
    outcomes: &[Outcome],
    rate: usize,
    fast_rate: usize,
) -> Option<Value> {
    let of = |scenario: &str| figures_of(outcomes, scenario);
    let floor = of("paced-floor")?;
    let cpu_total = |f: &Value| -> Option<f64> {
        f["cpu_total_per_1000"].as_f64().or_else(|| {
            let per: BTreeMap<String, f64> =
                serde_json::from_value(f["cpu_seconds_per_1000"].clone()).ok()?;
            Some(total_but_sink(&per))
        })
    };
    let mut out = serde_json::Map::new();
    for (scenario, rate) in [("steady", rate), ("every-second", fast_rate)] {
        let (Some(run), base) = (of(scenario), &floor[format!("at_{rate}")]) else {
            continue;
        };
        if base.is_null() {
            continue;
        }
        let (chime, alone) = (cpu_total(run), cpu_total(base));
        out.insert(
            scenario.into(),
            json!({
                "rate_per_second": rate,
                "cpu_total_per_1000": chime,
                "floor_cpu_total_per_1000": alone,
                "cpu_over_floor": chime.zip(alone).filter(|(_, a)| *a > 0.0).map(|(c, a)| c / a),
                "worst_window_p99_ms": run["worst_window_p99_ms"],
                "floor_worst_window_p99_ms": base["settled_worst_window_p99_ms"],
            }),
        );
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// `scenario`'s figures, when it ran on PostgreSQL + Redis.
pub(super) fn figures_of<'a>(outcomes: &'a [Outcome], scenario: &str) -> Option<&'a Value> {
    outcomes
        .iter()
        .find(|o| o.scenario == scenario && o.setup == Setup::PostgresRedis)
        .map(|o| &o.figures)
}

/// `scenario`'s rate (its figure `rate`) over `floor`'s callbacks per second, when both ran
/// on PostgreSQL + Redis.
fn share_of(outcomes: &[Outcome], scenario: &str, rate: &str, floor: &str) -> Option<f64> {
    let rate = figures_of(outcomes, scenario)?.get(rate)?.as_f64()?;
    let floor = figures_of(outcomes, floor)?
        .get("callbacks_per_second")?
        .as_f64()?;
    (floor > 0.0).then(|| rate / floor)
}

/// The burst's drain rate over a floor's (`callback-floor` or `durable-floor`): how much of
/// what this machine can deliver Chime drains, a figure that holds from one day's machine
/// to another's better than either rate.
pub(super) fn burst_share_of(outcomes: &[Outcome], floor: &str) -> Option<f64> {
    share_of(outcomes, "burst", "drain_per_second", floor)
}

/// The durable floor's rate over the callback floor's: what recording each callback by one
/// row update leaves of the callbacks alone, the most a durable burst can drain as a share of
/// the callback floor.
pub(super) fn durable_share_of_callback_floor(outcomes: &[Outcome]) -> Option<f64> {
    share_of(
        outcomes,
        "durable-floor",
        "callbacks_per_second",
        "callback-floor",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(scenario: &'static str, figures: Value) -> Outcome {
        let mut o = Outcome::new(scenario);
        o.figures = figures;
        o
    }

    fn floor(rate: usize, cpu: f64, settled: i64) -> Value {
        json!({"cpu_total_per_1000": cpu, "worst_window_p99_ms": 300,
               "settled_worst_window_p99_ms": settled, "rate_per_second": rate})
    }

    #[test]
    fn steady_and_every_second_are_set_beside_the_floor_at_their_rate() {
        let outcomes = [
            outcome(
                "paced-floor",
                json!({"at_5000": floor(5000, 0.1, 8), "at_10000": floor(10000, 0.08, 7)}),
            ),
            outcome(
                "steady",
                json!({"cpu_total_per_1000": 0.25, "worst_window_p99_ms": 37}),
            ),
            // every-second reports CPU per process only: its total leaves the bench out.
            outcome(
                "every-second",
                json!({"cpu_seconds_per_1000": {"chime-bench": 0.05, "executor-0": 0.2,
                                                "postgres": 0.2}, "worst_window_p99_ms": 900}),
            ),
        ];
        let v = beside_paced_floor(&outcomes, 5_000, 10_000).unwrap();
        assert!((v["steady"]["cpu_over_floor"].as_f64().unwrap() - 2.5).abs() < 1e-9);
        assert_eq!(v["steady"]["floor_worst_window_p99_ms"], 8);
        assert_eq!(v["steady"]["worst_window_p99_ms"], 37);
        assert!((v["every-second"]["cpu_over_floor"].as_f64().unwrap() - 5.0).abs() < 1e-9);
        assert_eq!(v["every-second"]["floor_worst_window_p99_ms"], 7);
    }

    #[test]
    fn without_the_floor_or_at_another_rate_there_is_nothing_beside_it() {
        let steady = outcome("steady", json!({"cpu_total_per_1000": 0.25}));
        assert!(beside_paced_floor(std::slice::from_ref(&steady), 300, 200).is_none());
        let other_rate = outcome("paced-floor", json!({"at_5000": floor(5000, 0.1, 8)}));
        assert!(beside_paced_floor(&[other_rate, steady], 300, 200).is_none());
    }

    #[test]
    fn the_burst_is_set_against_each_floor_and_the_durable_floor_against_the_callbacks() {
        let outcomes = [
            outcome("burst", json!({"drain_per_second": 20_000.0})),
            outcome("callback-floor", json!({"callbacks_per_second": 50_000.0})),
            outcome("durable-floor", json!({"callbacks_per_second": 40_000.0})),
        ];
        let share = |f: Option<f64>| (f.unwrap() * 1_000.0).round() / 1_000.0;
        assert_eq!(share(burst_share_of(&outcomes, "callback-floor")), 0.4);
        assert_eq!(share(burst_share_of(&outcomes, "durable-floor")), 0.5);
        assert_eq!(share(durable_share_of_callback_floor(&outcomes)), 0.8);
    }

    #[test]
    fn without_a_floor_or_on_another_setup_there_is_no_share() {
        let burst = || outcome("burst", json!({"drain_per_second": 20_000.0}));
        let floor = || outcome("callback-floor", json!({"callbacks_per_second": 5e4}));
        let elsewhere = || {
            let mut o = outcome("durable-floor", json!({"callbacks_per_second": 4e4}));
            o.setup = Setup::MariadbRedis;
            o
        };
        assert!(burst_share_of(&[burst()], "durable-floor").is_none());
        assert!(burst_share_of(&[burst(), elsewhere(), floor()], "durable-floor").is_none());
        assert!(durable_share_of_callback_floor(&[elsewhere(), floor()]).is_none());
    }
}
