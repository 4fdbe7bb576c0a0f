//! workers: the same burst (one-shots due at one instant) delivered to registered workers
//! over gRPC streams, and as HTTP callbacks to the sink, each on a deployment of its own:
//! drain rate and lateness side by side. Then one-shots paced at an ordinary rate to workers:
//! the lateness a worker adds when nothing queues (target p99 ≤ 20 ms). The workers run in
//! this process (the `chime-worker` client, acking at once), two per executor, and record
//! what they receive as the sink does.

use std::sync::Mutex;

use chime_worker::{Answer, WorkerConfig};
use tokio_util::sync::CancellationToken;

use super::*;

/// Deliveries each worker takes at once.
const CREDITS: u32 = 256;

/// When the one-shots of a run fall due.
#[derive(Clone, Copy)]
enum Shape {
    /// `n` at one instant.
    Burst(usize),
    /// `rate` a second for `seconds`, evenly spaced.
    Paced { rate: usize, seconds: u64 },
}

impl Shape {
    fn count(self) -> usize {
        match self {
            Shape::Burst(n) => n,
            Shape::Paced { rate, seconds } => rate * seconds as usize,
        }
    }

    /// The due instant of the `i`-th one-shot, the first at `first`.
    fn due(self, first: i64, i: usize) -> i64 {
        match self {
            Shape::Burst(_) => first,
            Shape::Paced { rate, .. } => first + (i as i64) * 1_000 / rate.max(1) as i64,
        }
    }

    fn span_ms(self) -> i64 {
        match self {
            Shape::Burst(_) => 0,
            Shape::Paced { seconds, .. } => seconds as i64 * 1_000,
        }
    }
}

struct Burst {
    created: Duration,
    deliveries: Vec<Delivery>,
    cpu_per_1000: Value,
}

pub(super) async fn workers(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("workers");
    let n = args.burst;
    let http = burst_via(args, false, Shape::Burst(n)).await?;
    let worker = burst_via(args, true, Shape::Burst(n)).await?;
    let mut figures = serde_json::Map::new();
    let mut drains = Vec::new();
    for (label, run) in [("HTTP", &http), ("worker", &worker)] {
        let (delivered, duplicates) = distinct_and_duplicates(&run.deliveries);
        if delivered < n {
            o.failed
                .push(format!("{label}: {} of {n} not delivered", n - delivered));
        }
        o.target(
            duplicates == 0,
            format!("{label}: {duplicates} duplicates (target 0)"),
        );
        let lateness = Lateness::of(&run.deliveries);
        let due = run
            .deliveries
            .iter()
            .map(|d| d.scheduled_ms)
            .min()
            .unwrap_or_default();
        let drain = drain_per_second(&run.deliveries, due, delivered);
        drains.push(drain);
        o.row(
            &format!("{label}: drain"),
            format!("{drain:.0} firings/s ({delivered} of {n}, {duplicates} dup)"),
            "",
        );
        lateness_row(&mut o, &format!("{label}: lateness"), &lateness, "");
        figures.insert(
            label.to_lowercase(),
            json!({
                "timers": n,
                "create_seconds": run.created.as_secs_f64(),
                "delivered": delivered,
                "duplicates": duplicates,
                "drain_per_second": drain,
                "lateness": lateness,
                "cpu_seconds_per_1000": run.cpu_per_1000,
            }),
        );
    }
    let ratio = drains[1] / drains[0].max(1.0);
    o.row("worker / HTTP drain", format!("{ratio:.2}×"), "");
    figures.insert("worker_to_http_drain".into(), json!(ratio));

    let paced = Shape::Paced {
        rate: args.workers_rate,
        seconds: args.workers_duration,
    };
    let run = burst_via(args, true, paced).await?;
    let (delivered, duplicates) = distinct_and_duplicates(&run.deliveries);
    let want = paced.count();
    if delivered < want {
        o.failed.push(format!(
            "worker, paced: {} of {want} not delivered",
            want - delivered
        ));
    }
    let lateness = Lateness::of(&run.deliveries);
    o.row(
        "worker, paced",
        format!(
            "{} a second for {} s ({delivered} of {want}, {duplicates} dup)",
            args.workers_rate, args.workers_duration
        ),
        "",
    );
    lateness_row(&mut o, "worker, paced: lateness", &lateness, "p99 ≤ 20 ms");
    o.target(
        lateness.p99_ms <= 20,
        format!("worker, paced: p99 {} ms (target ≤ 20)", lateness.p99_ms),
    );
    figures.insert(
        "worker_paced".into(),
        json!({
            "rate": args.workers_rate,
            "seconds": args.workers_duration,
            "delivered": delivered,
            "duplicates": duplicates,
            "lateness": lateness,
            "cpu_seconds_per_1000": run.cpu_per_1000,
        }),
    );
    o.figures = Value::Object(figures);
    Ok(o)
}

/// One run of one-shots shaped by `shape` on a deployment of its own, to workers or to the
/// sink.
async fn burst_via(args: &Args, to_workers: bool, shape: Shape) -> anyhow::Result<Burst> {
    let n = shape.count();
    let name = match (to_workers, shape) {
        (false, _) => "bench-workers-http",
        (true, Shape::Burst(_)) => "bench-workers",
        (true, Shape::Paced { .. }) => "bench-workers-paced",
    };
    let d = Deployment::start(args, name, &[]).await?;
    let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let stop = CancellationToken::new();
    let callback = if to_workers {
        let executors: Vec<String> = d
            .cluster
            .executors
            .iter()
            .filter_map(|e| e.setting("CHIME_EXECUTOR_ADDR"))
            .map(|a| format!("http://{a}"))
            .collect();
        for (i, server) in executors.iter().chain(&executors).enumerate() {
            let config = WorkerConfig::new(server.clone(), "bench", "burst")
                .with_token(chime_test_support::deploy::BOOTSTRAP_TOKEN)
                .with_credits(CREDITS)
                .with_name(format!("bench-{i}"));
            let received = received.clone();
            let handler = move |delivery: chime_worker::Delivery| {
                let at_ms = now_ms();
                let scheduled_ms = Timestamp::parse_rfc3339(&delivery.scheduled_at)
                    .map(|t| t.as_millis())
                    .unwrap_or_default();
                received
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Delivery {
                        key: delivery.idempotency_key,
                        scheduled_ms,
                        at_ms,
                        sent_ms: None,
                    });
                async { Answer::Ack }
            };
            tokio::spawn(chime_worker::run(config, handler, stop.clone()));
        }
        let want = (executors.len() * 2) as f64;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut connected = 0.0;
            for e in &d.cluster.executors {
                connected += e.counter("chime_executor_workers_connected").await;
            }
            if connected >= want {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the bench's workers did not connect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pb::Callback {
            worker: Some(pb::WorkerTarget {
                group: "burst".into(),
                route: String::new(),
                broadcast: false,
            }),
            ..Default::default()
        }
    } else {
        pb::Callback {
            url: d.sink.url("/burst"),
            ..Default::default()
        }
    };
    let lead_ms = 3_000 + (n as i64) * 1_000 / 2_500;
    let due = now_ms() + lead_ms;
    let specs = (0..n)
        .map(|i| {
            spec_to(
                format!("burst-{i}"),
                callback.clone(),
                pb::schedule::Kind::At(pb_time(shape.due(due, i))),
            )
        })
        .collect();
    let created = create_all(&d, specs).await?;
    ensure!(
        now_ms() < due - 500,
        "creating {n} timers took {created:?}, past the due instant"
    );
    until(due - 200).await;
    let cpu0 = CpuSample::take(&d.processes());
    let deadline = Instant::now()
        + Duration::from_millis(shape.span_ms() as u64)
        + Duration::from_secs(60 + n as u64 / 1_000);
    let count = || {
        if to_workers {
            received.lock().unwrap_or_else(|p| p.into_inner()).len()
        } else {
            d.sink.count()
        }
    };
    while count() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Room for late duplicates.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu1 = CpuSample::take(&d.processes());
    let deliveries = if to_workers {
        received.lock().unwrap_or_else(|p| p.into_inner()).clone()
    } else {
        deliveries(&d.sink.received())
    };
    stop.cancel();
    d.stop().await;
    Ok(Burst {
        created,
        cpu_per_1000: json!(cpu0.per_thousand(&cpu1, deliveries.len())),
        deliveries,
    })
}
