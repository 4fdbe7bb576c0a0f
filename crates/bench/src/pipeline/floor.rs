//! callback-floor: an executor's HTTP callbacks alone, with no scheduler, claim, outcome
//! or database. As many client processes as executors each send their share of a burst
//! with an executor's own client and request (`HttpTarget::deliver`), as many at once as an
//! executor lets one host have, to the same sink the other scenarios use. The rate is the
//! most this machine delivers over HTTP whatever Chime does around each callback: the
//! ceiling a burst's drain is judged against.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

pub(super) async fn callback_floor(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("callback-floor");
    let n = args.burst;
    let clients = args.executors.max(1);
    let concurrency = chime_runtime::Config::default().executor.max_per_host;
    let sink = Sink::start_lean().await?;
    let url = sink.url("/floor");
    // Beside this binary: the executor's client with the executor's allocator.
    let exe = std::env::current_exe()?.with_file_name("chime-bench-callbacks");
    // Time for the clients to start and build their HTTP client.
    let start_ms = now_ms() + 2_000;
    let mut children = Vec::new();
    for c in 0..clients {
        let count = n / clients + usize::from(c < n % clients);
        let child = tokio::process::Command::new(&exe)
            .args(["--url", &url])
            .args(["--count", &count.to_string()])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--start-ms", &start_ms.to_string()])
            .args(["--client", &c.to_string()])
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
    until(start_ms - 200).await;
    let pids: Vec<(String, u32)> = children
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((format!("callbacks-{i}"), c.id()?)))
        .collect();
    let cpu0 = CpuSample::take(&pids);
    let mut failed = 0;
    for child in &mut children {
        let out = child
            .stdout
            .take()
            .context("a callback client has no stdout")?;
        let mut line = String::new();
        let deadline = Duration::from_secs(60 + n as u64 / 1_000);
        tokio::time::timeout(deadline, BufReader::new(out).read_line(&mut line))
            .await
            .context("a callback client did not finish in time")??;
        failed += line
            .trim()
            .strip_prefix("done ")
            .and_then(|f| f.parse::<usize>().ok())
            .with_context(|| format!("a callback client said {line:?}"))?;
    }
    let cpu1 = CpuSample::take(&pids);
    for mut child in children {
        drop(child.stdin.take());
        let _ = child.wait().await;
    }
    let received = sink.received();
    let delivered = received.len();
    if delivered < n || failed > 0 {
        o.failed.push(format!(
            "{delivered} of {n} callbacks received, {failed} failed"
        ));
    }
    let last = received.iter().map(|r| r.at_ms).max().unwrap_or(start_ms);
    let rate = delivered as f64 / ((last - start_ms).max(1) as f64 / 1000.0);
    let cpu: BTreeMap<String, f64> = cpu0
        .per_thousand(&cpu1, delivered)
        .into_iter()
        .filter(|(label, _)| label.starts_with("callbacks-") || label == "chime-bench")
        .collect();
    let clients_cpu = total_but_sink(&cpu);
    let with_sink: f64 = cpu.values().sum();
    let cores = with_sink * rate / 1_000.0;
    o.row(
        "callbacks alone",
        format!("{rate:.0}/s ({clients} clients, {concurrency} in flight each)"),
        "",
    );
    o.row(
        "cpu",
        format!(
            "{clients_cpu:.3} s / 1,000 callbacks, {with_sink:.3} with the sink: {cores:.2} cores busy"
        ),
        "",
    );
    o.figures = json!({
        "callbacks": n,
        "delivered": delivered,
        "failed": failed,
        "clients": clients,
        "in_flight_per_client": concurrency,
        "callbacks_per_second": rate,
        "cores_busy": cores,
        "cpu_seconds_per_1000": cpu,
    });
    Ok(o)
}
