//! What operators watch: every metric the Grafana dashboard and the Prometheus alert rules
//! (`deploy/`) name is exported by the running services, with HELP text, so the two cannot
//! drift apart; scraped from real processes that have fired timers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use chime_e2e::cluster::{Cluster, Spec};
use chime_e2e::timers::{due_over, now, one_shots, wait_delivered};
use chime_storage::testkit;
use chime_test_support::sink::Sink;

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

async fn scrape(admin: &str) -> String {
    chime_runtime::http_client()
        .build()
        .unwrap()
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `promtool check metrics` on one scrape (HELP, naming, types), when promtool is installed
/// (`make lint`'s k8s-check installs it; CI runs that first).
fn promtool_check(admin: &str, text: &str) {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool not installed: `promtool check metrics` skipped");
        return;
    };
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
    let mut c = Cluster::start(Spec {
        test: "observability",
        database_url: db.url(),
        redis_url: testkit::redis_url(),
        redis_prefix: redis.backend.prefix().to_owned(),
        schedulers: 1,
        executors: 1,
        env: Vec::new(),
    })
    .await;
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
    let admins: Vec<String> = [&c.gateway, &c.migrator]
        .into_iter()
        .chain(&c.schedulers)
        .chain(&c.executors)
        .map(|n| {
            if n.admin.is_empty() {
                c.rest.clone()
            } else {
                n.admin.clone()
            }
        })
        .collect();
    for admin in &admins {
        let text = scrape(admin).await;
        promtool_check(admin, &text);
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
