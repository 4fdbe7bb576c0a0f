//! `chime-bench api`: create-timer throughput and latency over REST against a running
//! gateway (`make bench-api` starts one).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Gateway REST base URL.
    #[arg(
        long,
        env = "CHIME_GATEWAY_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// Creates per run.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Concurrent clients (each a keep-alive connection).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Runs; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value = "target/bench/api.json")]
    out: PathBuf,
}

#[derive(Debug, Serialize)]
struct RunReport {
    requests: usize,
    seconds: f64,
    per_second: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

async fn one_run(args: &Args, run: usize) -> anyhow::Result<RunReport> {
    let client = chime_runtime::http_client()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let tag = format!("{:08x}-{run}", rand::random::<u32>());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, next, tag) = (client.clone(), next.clone(), tag.clone());
        let url = format!("{}/v1/timers", args.url);
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(latencies);
                }
                let body = serde_json::json!({
                    "app": "bench",
                    "name": format!("t-{tag}-{i}"),
                    "schedule": {"every": "1h"},
                    "callback": {"url": "http://127.0.0.1:9/callback"},
                });
                let t0 = Instant::now();
                let resp = client.post(&url).json(&body).send().await?;
                let status = resp.status();
                resp.bytes().await?;
                latencies.push(t0.elapsed());
                anyhow::ensure!(status.as_u16() == 201, "create returned {status}");
            }
        }));
    }
    let mut latencies = Vec::with_capacity(args.requests);
    for t in tasks {
        latencies.extend(t.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    Ok(RunReport {
        requests: latencies.len(),
        seconds,
        per_second: latencies.len() as f64 / seconds,
        p50_ms: percentile(&latencies, 0.50),
        p90_ms: percentile(&latencies, 0.90),
        p99_ms: percentile(&latencies, 0.99),
        max_ms: percentile(&latencies, 1.0),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    reqwest::get(format!("{}/readyz", args.url))
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("gateway at {} is not ready", args.url))?;
    let mut runs = Vec::new();
    for r in 0..args.runs {
        let report = one_run(&args, r).await?;
        eprintln!(
            "  run {}: {:.0} creates/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            r + 1,
            report.per_second,
            report.p50_ms,
            report.p99_ms,
            report.max_ms
        );
        runs.push(report);
    }
    let rate = median(runs.iter().map(|r| r.per_second).collect());
    let p50 = median(runs.iter().map(|r| r.p50_ms).collect());
    let p99 = median(runs.iter().map(|r| r.p99_ms).collect());
    let met = rate >= 3_000.0 && p99 <= 30.0;
    println!(
        "{:<22} {:>10} {:>9} {:>9} {:>6}",
        "scenario", "median /s", "p50 ms", "p99 ms", "met"
    );
    println!(
        "{:<22} {:>10.0} {:>9.2} {:>9.2} {:>6}",
        "rest_create_timer",
        rate,
        p50,
        p99,
        if met { "yes" } else { "no" }
    );
    let report = serde_json::json!({
        "benchmark": "api",
        "scenario": "rest_create_timer",
        "concurrency": args.concurrency,
        "requests_per_run": args.requests,
        "runs": runs,
        "median_per_second": rate,
        "median_p50_ms": p50,
        "median_p99_ms": p99,
        "target": {"per_second": 3000, "p99_ms": 30},
        "met": met,
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("report written to {}", args.out.display());
    Ok(())
}
