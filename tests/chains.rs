//! Chains from real processes (issue 42 item 2): one scheduler, two executors and a
//! `chime worker`. A run that succeeds starts its `on_success` timers (an HTTP callee and a
//! worker), one that ends dead its `on_failure` timer; each step fires once, carrying its
//! parent run as `X-Chime-Parent-Run` (HTTP) and `CHIME_PARENT_RUN` (worker), counted from
//! the receivers' records. A step whose timer was deleted is recorded as skipped, and the
//! parent run lists its steps.

use std::time::Duration;

use chime_domain::Timestamp;
use chime_e2e::timers::{client, create, get_json, now, on, until};
use chime_e2e::workers::{Workers, connected, executor_url};
use chime_storage::testkit;
use chime_test_support::sink::Sink;
use serde_json::{Value, json};

/// Records each delivery's key and parent run.
const PARENTS: &str = r#"echo "$CHIME_IDEMPOTENCY_KEY $CHIME_PARENT_RUN" >> "$RECEIPTS""#;

fn at(ms: i64) -> Value {
    json!({"at": Timestamp::from_millis(ms).to_rfc3339()})
}

/// A timer of app `faults` that fires only when a chain starts it (its own run is a month
/// away), calling `callback`.
async fn step(rest: &str, name: &str, callback: Value) -> Value {
    create(
        rest,
        json!({"app": "faults", "name": name, "schedule": at(now() + 30 * 86_400_000),
               "callback": callback}),
    )
    .await
}

fn key(timer: &Value) -> String {
    format!(
        "{}:{}",
        timer["id"],
        chime_e2e::timers::ms(timer["schedule"]["at"].as_str().unwrap())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_start_their_chains_once_with_the_parent_run() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let cluster = chime_e2e::start_on("chains", &db, &redis, 1, 2, vec![]).await;
    let rest = cluster.rest.clone();
    let callee = Sink::start().await.unwrap();
    let pool = Workers::for_faults(&cluster, "chains-receipts").await;
    let _worker = pool.start(
        "chain-worker",
        &executor_url(&cluster.executors[1]),
        "chained",
        4,
        PARENTS,
    );
    until("the worker connected", Duration::from_secs(30), || async {
        connected(&cluster).await == 1.0
    })
    .await;

    step(&rest, "load", json!({"url": callee.url("/load")})).await;
    step(&rest, "page", json!({"url": callee.url("/page")})).await;
    step(&rest, "index", json!({"worker": {"group": "chained"}})).await;
    let gone = step(&rest, "gone", json!({"url": callee.url("/gone")})).await;
    let due = now() + 3_000;
    let extract = create(
        &rest,
        json!({"app": "faults", "name": "extract", "schedule": at(due),
               "callback": {"url": callee.url("/extract")},
               "then": {"on_success": ["load", "index"], "on_failure": ["page"]}}),
    )
    .await;
    // Nothing listens on port 9: the one attempt fails, the run is dead.
    let broken = create(
        &rest,
        json!({"app": "faults", "name": "broken", "schedule": at(due),
               "callback": {"url": "http://127.0.0.1:9/broken"},
               "retry": {"max_attempts": 1},
               "then": {"on_success": ["load"], "on_failure": ["page", "gone"]}}),
    )
    .await;
    // Deleted after it was named: its step is skipped.
    let deleted = client()
        .delete(format!("{rest}/v1/timers/{}", gone["id"]))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());

    let (extract_run, broken_run) = (key(&extract), key(&broken));
    let receipts = pool.receipts.clone();
    let worker_lines = move || {
        std::fs::read_to_string(&receipts)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    until("every step delivered", Duration::from_secs(60), || {
        let done = on(&callee, "/load").len() == 1
            && on(&callee, "/page").len() == 1
            && worker_lines().len() == 1;
        async move { done }
    })
    .await;

    let parent = |path: &str| {
        on(&callee, path)[0]
            .header("x-chime-parent-run")
            .map(str::to_owned)
    };
    assert_eq!(parent("/load"), Some(extract_run.clone()));
    assert_eq!(parent("/page"), Some(broken_run.clone()));
    assert_eq!(
        on(&callee, "/extract")[0].header("x-chime-parent-run"),
        None
    );
    let line = &worker_lines()[0];
    assert!(line.ends_with(&format!(" {extract_run}")), "{line}");

    // The parent runs list their steps: started with the run each started, or skipped.
    let steps_of = |run: String| {
        let rest = rest.clone();
        async move {
            let r = get_json(format!("{rest}/v1/runs/{run}")).await;
            r["chain"].as_array().cloned().unwrap_or_default()
        }
    };
    until("both parents ended", Duration::from_secs(30), || {
        let (a, b) = (steps_of(extract_run.clone()), steps_of(broken_run.clone()));
        async move { a.await.len() == 2 && b.await.len() == 2 }
    })
    .await;
    let extract_steps = steps_of(extract_run.clone()).await;
    let started: Vec<(&str, &str, &str)> = extract_steps
        .iter()
        .map(|s| {
            (
                s["timer"].as_str().unwrap(),
                s["on"].as_str().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        started,
        vec![
            ("index", "on_success", "started"),
            ("load", "on_success", "started"),
        ]
    );
    let load_run = extract_steps[1]["run"].as_str().unwrap().to_owned();
    assert_eq!(
        on(&callee, "/load")[0].header("idempotency-key"),
        Some(load_run.as_str())
    );
    let load_detail = get_json(format!("{rest}/v1/runs/{load_run}")).await;
    assert_eq!(
        load_detail["parent_run"],
        extract_run.as_str(),
        "{load_detail}"
    );
    let broken_steps = steps_of(broken_run.clone()).await;
    assert_eq!(broken_steps[0]["timer"], "gone");
    assert_eq!(broken_steps[0]["status"], "skipped");
    assert_eq!(broken_steps[0]["reason"], "no timer of that name");
    assert_eq!(broken_steps[1]["timer"], "page");
    assert_eq!(broken_steps[1]["on"], "on_failure");

    // Once each: watched for three more seconds of sweeps and claims.
    let watch_until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < watch_until {
        assert_eq!(on(&callee, "/load").len(), 1);
        assert_eq!(on(&callee, "/page").len(), 1);
        assert!(on(&callee, "/gone").is_empty());
        assert_eq!(worker_lines().len(), 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
