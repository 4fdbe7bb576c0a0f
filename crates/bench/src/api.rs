//! The api scenario: create-timer throughput over REST and gRPC, one timer per call and 100
//! per batch, each client a keep-alive connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_client::TimerServiceClient;
use chime_test_support::deploy::bearer;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;

/// Timers per batch call: the API's maximum.
const BATCH: usize = 100;

#[derive(Debug, Serialize)]
pub struct ApiReport {
    pub name: String,
    pub timers: usize,
    pub calls: usize,
    pub seconds: f64,
    pub timers_per_second: f64,
    /// Latency per call.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// CPU time per timer created (µs), by process (`measure::CpuSample`'s labels): where
    /// the machine's two cores go.
    pub cpu_us_per_timer: std::collections::BTreeMap<String, f64>,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    chime_bench::measure::nearest_rank(sorted, p).as_secs_f64() * 1000.0
}

/// One create call of `size` timers named from `first`.
type Call = Arc<dyn Fn(usize, usize) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// Runs `timers / size` calls from `concurrency` clients; `call` does one.
async fn drive(
    name: &str,
    timers: usize,
    size: usize,
    concurrency: usize,
    call: Call,
) -> anyhow::Result<ApiReport> {
    let calls = timers.div_ceil(size);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (next, call) = (next.clone(), call.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return anyhow::Ok(latencies);
                }
                let t0 = Instant::now();
                call(i * size, size).await?;
                latencies.push(t0.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(calls);
    for t in tasks {
        latencies.extend(t.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    Ok(ApiReport {
        name: name.to_owned(),
        timers: calls * size,
        calls,
        seconds,
        timers_per_second: (calls * size) as f64 / seconds,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        max_ms: percentile(&latencies, 1.0),
        cpu_us_per_timer: Default::default(),
    })
}

fn rest_body(tag: &str, i: usize) -> serde_json::Value {
    json!({
        "app": "bench",
        "name": format!("{tag}-{i}"),
        "schedule": {"every": "1h"},
        "callback": {"url": "http://127.0.0.1:9/callback"},
    })
}

fn grpc_request(tag: &str, i: usize) -> pb::CreateTimerRequest {
    pb::CreateTimerRequest {
        timer: Some(pb::TimerSpec {
            app: "bench".into(),
            name: format!("{tag}-{i}"),
            schedule: Some(pb::Schedule {
                kind: Some(pb::schedule::Kind::Every("1h".into())),
                anchor: None,
            }),
            callback: Some(pb::Callback {
                url: "http://127.0.0.1:9/callback".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// REST and gRPC, single and batch: `timers` each, from `concurrency` clients. `round`
/// keeps timer names of successive measurements apart; `processes` are the deployment's,
/// whose CPU time each measurement reports.
pub async fn measure(
    rest: &str,
    grpc: &str,
    round: &str,
    timers: usize,
    concurrency: usize,
    processes: &[(String, u32)],
) -> anyhow::Result<Vec<ApiReport>> {
    let measured = async |name: &str, size: usize, call: Call| {
        let before = chime_bench::measure::CpuSample::take(processes);
        let mut report = drive(name, timers, size, concurrency, call).await?;
        let after = chime_bench::measure::CpuSample::take(processes);
        // CPU seconds per 1,000 timers are milliseconds per timer.
        report.cpu_us_per_timer = before
            .per_thousand(&after, report.timers)
            .into_iter()
            .map(|(label, ms)| (label, (ms * 1000.0).round()))
            .collect();
        anyhow::Ok(report)
    };
    let http = chime_test_support::deploy::api_client()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    let channel = tonic::transport::Endpoint::from_shared(grpc.to_owned())?
        .connect()
        .await
        .context("gateway gRPC")?;
    let mut reports = Vec::new();
    for (name, size) in [("rest_single", 1), ("rest_batch", BATCH)] {
        let tag = format!("{round}-{name}");
        let (http, url) = (http.clone(), format!("{rest}/v1/timers"));
        let batch_url = format!("{rest}/v1/timers:batchCreate");
        let call: Call = Arc::new(move |first, size| {
            let (http, url, batch_url) = (http.clone(), url.clone(), batch_url.clone());
            let tag = tag.clone();
            Box::pin(async move {
                let resp = if size == 1 {
                    http.post(&url).json(&rest_body(&tag, first)).send().await?
                } else {
                    let requests: Vec<_> = (first..first + size)
                        .map(|i| json!({"timer": rest_body(&tag, i)}))
                        .collect();
                    http.post(&batch_url)
                        .json(&json!({ "requests": requests }))
                        .send()
                        .await?
                };
                let status = resp.status();
                let body = resp.bytes().await?;
                ensure!(
                    status.is_success(),
                    "create returned {status}: {}",
                    String::from_utf8_lossy(&body)
                );
                Ok(())
            })
        });
        reports.push(measured(name, size, call).await?);
    }
    for (name, size) in [("grpc_single", 1), ("grpc_batch", BATCH)] {
        let tag = format!("{round}-{name}");
        let client = TimerServiceClient::with_interceptor(channel.clone(), bearer());
        let call: Call = Arc::new(move |first, size| {
            let mut client = client.clone();
            let tag = tag.clone();
            Box::pin(async move {
                if size == 1 {
                    client.create_timer(grpc_request(&tag, first)).await?;
                } else {
                    let requests = (first..first + size)
                        .map(|i| grpc_request(&tag, i))
                        .collect();
                    client
                        .batch_create_timers(pb::BatchCreateTimersRequest { requests })
                        .await?;
                }
                Ok(())
            })
        });
        reports.push(measured(name, size, call).await?);
    }
    Ok(reports)
}
