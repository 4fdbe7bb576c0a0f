//! What operators watch: every metric the Grafana dashboard and the Prometheus alert rules
//! (`deploy/`) name is exported by the running services, with HELP text, so the two cannot
//! drift apart; scraped from real processes that have fired timers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use chime_e2e::timers::{due_over, get_json, now, one_shots, wait_delivered};
use chime_storage::testkit;
use chime_test_support::sink::Sink;

/// The commit the binaries were built from: what `make` exported to the build and passes
/// on to the tests, else `unknown` (a bare `cargo build`).
fn expected_commit() -> String {
    std::env::var("CHIME_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `--version` of every binary, and `/healthz` and `chime_build_info` of every running
/// service, name the package version and the commit.
async fn every_service_reports_its_build(c: &chime_e2e::cluster::Cluster) {
    let commit = expected_commit();
    let line = format!("{} (commit {commit})", env!("CARGO_PKG_VERSION"));
    for name in [
        "chime",
        "chime-gateway",
        "chime-scheduler",
        "chime-executor",
        "chime-migrator",
        "chime-bench",
    ] {
        let out = std::process::Command::new(chime_test_support::deploy::bin(name))
            .arg("--version")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} --version failed");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(printed.trim(), format!("{name} {line}"), "{name} --version");
    }
    for node in c.nodes() {
        let health = get_json(format!("{}/healthz", node.admin)).await;
        assert_eq!(health["status"], "ok", "{}: {health}", node.admin);
        assert_eq!(health["version"], env!("CARGO_PKG_VERSION"), "{health}");
        assert_eq!(
            health["commit"],
            commit.as_str(),
            "{}: {health}",
            node.admin
        );
        let gauge = format!(
            "chime_build_info{{version=\"{}\",commit=\"{commit}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            node.metrics().await.contains(&gauge),
            "{}: no {gauge}",
            node.admin
        );
    }
}

/// `chime_…` names in `text`, without the suffixes a histogram's series add.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("chime_") {
        let start = i + at;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .map_or(text.len(), |n| start + n);
        if boundary {
            let name = &text[start..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            names.insert(base.to_owned());
        }
        i = end;
    }
    names
}

/// `promtool check metrics` on one scrape (HELP, naming, types). `make test`
/// (scripts/with-test-services.sh) installs promtool; without it the test fails, saying so.
fn promtool_check(admin: &str, text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is missing: apt-get install prometheus (make test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics on {admin}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_alerts_name_only_metrics_the_services_export() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let used: BTreeSet<String> = [
        "deploy/grafana/chime.json",
        "deploy/prometheus/chime-alerts.yml",
    ]
    .iter()
    .flat_map(|f| metric_names(&std::fs::read_to_string(root.join(f)).unwrap()))
    .collect();
    assert!(
        used.len() >= 10,
        "too few metrics found in deploy/: {used:?}"
    );

    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("observability", &db, &redis, 1, 1, Vec::new()).await;
    // Fire something, so the histograms and labelled counters have series.
    let expected = one_shots(
        &c.rest,
        &sink.url("/hook"),
        &due_over(now() + 2_000, 1_000, 20),
    )
    .await;
    wait_delivered(&sink, &expected, Duration::from_secs(30)).await;

    let mut exported = BTreeSet::new();
    let mut helped = BTreeSet::new();
    for node in c.nodes() {
        let text = node.metrics().await;
        promtool_check(&node.admin, &text);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                helped.extend(metric_names(rest.split(' ').next().unwrap_or("")));
            } else if !line.starts_with('#') {
                exported.extend(metric_names(line.split(['{', ' ']).next().unwrap_or("")));
            }
        }
    }
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "named in deploy/ but exported by no service: {missing:?}"
    );
    every_service_reports_its_build(&c).await;
    let unhelped: Vec<&String> = exported.difference(&helped).collect();
    assert!(
        unhelped.is_empty(),
        "exported without HELP text: {unhelped:?}"
    );
    eprintln!(
        "{} metrics named in deploy/, all exported; {} exported in all, each with HELP",
        used.len(),
        exported.len()
    );
    c.stop().await;
}

/// Debian's `prometheus` scraping the given admin addresses every second, on a free port,
/// its data in a scratch directory; killed and removed when dropped.
struct Prometheus {
    child: std::process::Child,
    dir: std::path::PathBuf,
    url: String,
}

impl Prometheus {
    fn start(targets: &[String]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "chime-prometheus-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let hosts: Vec<String> = targets
            .iter()
            .map(|t| format!("'{}'", t.trim_start_matches("http://")))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: chime\n    static_configs:\n      - targets: [{}]\n",
            hosts.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = chime_e2e::free_port();
        let child = std::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (apt-get install prometheus; scripts/with-test-services.sh does)");
        Self {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The value of an instant query's first sample, if it has one.
    async fn query(&self, promql: &str) -> Option<f64> {
        let body: serde_json::Value = chime_runtime::http_client()
            .build()
            .unwrap()
            .get(format!(
                "{}/api/v1/query?query={}",
                self.url,
                encode(promql)
            ))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

/// Percent-encodes a query parameter.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_firing_rate_and_lateness() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("prometheus", &db, &redis, 2, 2, Vec::new()).await;
    let targets: Vec<String> = c.nodes().map(|n| n.admin.clone()).collect();
    let prometheus = Prometheus::start(&targets);
    // 100 firings a second for 20 s.
    let start = now() + 3_000;
    let expected = one_shots(&c.rest, &sink.url("/hook"), &due_over(start, 20_000, 2_000)).await;
    wait_delivered(&sink, &expected, Duration::from_secs(60)).await;

    // The last 10 s of the run, as Prometheus saw it, once it has scraped past the end.
    let at = (start + 18_000) as f64 / 1000.0;
    let rate =
        format!("sum(rate(chime_executor_outcomes_total{{status=\"succeeded\"}}[10s] @ {at}))");
    let p99 = format!(
        "histogram_quantile(0.99, sum by (le) \
         (rate(chime_executor_lateness_seconds_bucket[15s] @ {at})))"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (firing, late) = loop {
        let firing = prometheus.query(&rate).await;
        let late = prometheus.query(&p99).await;
        let up = prometheus.query("count(up == 1)").await;
        if let (Some(f), Some(l), Some(u)) = (firing, late, up)
            && u as usize == targets.len()
        {
            break (f, l);
        }
        if tokio::time::Instant::now() >= deadline {
            let total = prometheus.query("sum(chime_executor_outcomes_total)").await;
            panic!(
                "Prometheus has no answer: rate {firing:?}, p99 {late:?}, targets up {up:?}; \
                 outcomes now {total:?}, at {at}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "Prometheus over {} targets: firing rate {firing:.1}/s (100/s sent), lateness p99 {:.1} ms",
        targets.len(),
        late * 1000.0
    );
    assert!(
        (60.0..=140.0).contains(&firing),
        "firing rate {firing}/s, 100/s sent"
    );
    assert!(
        late > 0.0 && late * 1000.0 < chime_e2e::ON_TIME_MS as f64,
        "lateness p99 {late} s"
    );
    c.stop().await;
}

/// An OTLP trace receiver: the collector's `TraceService`, keeping every span it is sent
/// with the `service.name` of its resource.
#[derive(Clone, Default)]
struct Receiver {
    spans: std::sync::Arc<std::sync::Mutex<Vec<(String, OtlpSpan)>>>,
}

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span as OtlpSpan;

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                kept.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_firing_is_one_trace_from_the_hand_off_to_the_callee() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp),
        ("OTEL_TRACES_SAMPLER", "always_on".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
        ("CHIME_LOG_FORMAT", "json".into()),
        ("CHIME_LOG", "info,chime_executor=debug".into()),
    ];
    let mut c = chime_e2e::start_on("traces", &db, &redis, 1, 1, env).await;
    let expected = one_shots(&c.rest, &sink.url("/hook"), &[now() + 2_000]).await;
    wait_delivered(&sink, &expected, Duration::from_secs(30)).await;
    // The callee saw the callback span as its parent: traceparent 00-{trace}-{span}-{flags}.
    let got = sink.received();
    let traceparent = got[0]
        .header("traceparent")
        .expect("a traceparent header")
        .to_owned();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    let (trace, callback_id) = (parts[1].to_owned(), parts[2].to_owned());

    // callback (executor) → execute (executor) → hand_off (scheduler), one trace.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let chain = loop {
        let spans = receiver.spans.lock().unwrap().clone();
        let by_id = |id: &str| {
            spans
                .iter()
                .find(|(_, s)| hex(&s.span_id) == id && hex(&s.trace_id) == trace)
                .cloned()
        };
        let mut chain = Vec::new();
        let mut next = Some(callback_id.clone());
        while let Some(id) = next.take() {
            let Some((service, span)) = by_id(&id) else {
                break;
            };
            next = (!span.parent_span_id.is_empty()).then(|| hex(&span.parent_span_id));
            chain.push((service, span.name.clone()));
        }
        if chain.len() >= 3 {
            break chain;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "trace {trace} incomplete: {chain:?} of {} spans received",
            spans.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("one firing's trace {trace}: {chain:?}");
    // Every stage has its spans: the create, the materialization, the claim.
    let spans = receiver.spans.lock().unwrap().clone();
    for (service, name) in [
        ("chime-gateway", "create"),
        ("chime-migrator", "materialize"),
        ("chime-executor", "claim"),
    ] {
        assert!(
            spans
                .iter()
                .any(|(s, span)| s == service && span.name == name),
            "no {name} span from {service}"
        );
    }
    // JSON logs written inside the callback carry its trace and span ids.
    let logged = c.executors[0].service.log();
    let line = logged
        .lines()
        .find(|l| l.contains("callback done"))
        .expect("the executor logged the callback");
    assert!(
        line.contains(&format!("\"trace_id\":\"{trace}\""))
            && line.contains(&format!("\"span_id\":\"{callback_id}\"")),
        "{line}"
    );
    let names: Vec<(&str, &str)> = chain
        .iter()
        .map(|(s, n)| (s.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        names[..3],
        [
            ("chime-executor", "callback"),
            ("chime-executor", "execute"),
            ("chime-scheduler", "hand_off"),
        ]
    );
    c.stop().await;
    serving.abort();
}
