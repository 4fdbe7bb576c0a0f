//! Failure notifications from real processes (issue 42 item 5): two executors fire a timer
//! whose callback fails, and the app's notification URL (a second loopback receiver) gets
//! `run.dead` for each dead run, `timer.failing` once when `failing_after` runs in a row
//! failed, whichever executor ran them, and `timer.recovered` once at the first success.
//! Each event is signed with the app's secret, verified by the `standardwebhooks` package
//! (PyPI); a POST the receiver fails is tried again; the app's settings read back what
//! was sent.

use std::time::{Duration, Instant};

use chime_e2e::timers::{client, create, get_json};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use serde_json::{Value, json};

use crate::security::{message, verify};

const APP: &str = "alerting";

/// The events received so far, parsed, in arrival order.
fn events(hooks: &Sink) -> Vec<(Value, Received)> {
    hooks
        .received()
        .into_iter()
        .filter(|r| r.path == "/switch")
        .filter_map(|r| Some((serde_json::from_str(&r.body).ok()?, r)))
        .collect()
}

/// The distinct events of `kind` (a retried POST is one event), first arrival each.
fn of_type<'a>(events: &'a [(Value, Received)], kind: &str) -> Vec<&'a (Value, Received)> {
    let mut seen = std::collections::HashSet::new();
    events
        .iter()
        .filter(|(e, _)| e["type"] == kind)
        .filter(|(_, r)| seen.insert(r.header("webhook-id").unwrap_or_default().to_owned()))
        .collect()
}

/// Waits until `done` holds of the events received, and returns them.
async fn wait_for(
    hooks: &Sink,
    what: &str,
    done: impl Fn(&[(Value, Received)]) -> bool,
) -> Vec<(Value, Received)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = events(hooks);
        if done(&got) {
            return got;
        }
        let kinds: Vec<&Value> = got.iter().map(|(e, _)| &e["type"]).collect();
        assert!(Instant::now() < deadline, "{what}: got {kinds:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_dead_and_recovered_runs_are_told_signed_with_retries() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let callee = Sink::start().await.unwrap();
    let hooks = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("notifications", &db, &redis, 1, 2, vec![]).await;

    let put = client()
        .put(format!("{}/v1/apps/{APP}/notifications", c.rest))
        .json(&json!({"url": hooks.url("/switch"), "failing_after": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201, "{}", put.text().await.unwrap());

    // The receiver fails its first POST: that event is tried again.
    hooks.set_healthy(false);
    callee.set_healthy(false);
    let timer = create(
        &c.rest,
        json!({"app": APP, "name": "flaky", "schedule": {"every": "1s"},
               "callback": {"url": callee.url("/switch")},
               "retry": {"max_attempts": 1}}),
    )
    .await;
    let id = timer["id"].as_i64().unwrap();
    let first = wait_for(&hooks, "a first POST", |e| !e.is_empty()).await;
    hooks.set_healthy(true);
    let failing = wait_for(&hooks, "timer.failing", |e| {
        !of_type(e, "timer.failing").is_empty() && of_type(e, "run.dead").len() >= 3
    })
    .await;
    assert_eq!(first[0].0["type"], "run.dead");

    // The callee comes back: recovered, once, and nothing more of failing.
    callee.set_healthy(true);
    wait_for(&hooks, "timer.recovered", |e| {
        !of_type(e, "timer.recovered").is_empty()
    })
    .await;
    let succeeded = callee
        .received()
        .iter()
        .filter(|r| r.path == "/switch")
        .count();
    let deadline = Instant::now() + Duration::from_secs(30);
    while callee
        .received()
        .iter()
        .filter(|r| r.path == "/switch")
        .count()
        < succeeded + 3
    {
        assert!(Instant::now() < deadline, "the timer stopped firing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = events(&hooks);
    assert_eq!(
        of_type(&all, "timer.failing").len(),
        1,
        "failing once per streak"
    );
    assert_eq!(of_type(&all, "timer.recovered").len(), 1, "recovered once");

    // What an event says.
    let (f, _) = of_type(&failing, "timer.failing")[0];
    assert_eq!(f["app"], APP);
    assert_eq!(f["timer_id"], id);
    assert_eq!(f["timer_name"], "flaky");
    assert_eq!(f["attempt"], 1);
    assert!(f["error"].as_str().unwrap().contains("HTTP 500"), "{f}");
    assert!(f["run_at"].as_str().unwrap().ends_with('Z'), "{f}");
    let dead_ids: Vec<&str> = of_type(&all, "run.dead")
        .iter()
        .map(|(_, r)| r.header("webhook-id").unwrap())
        .collect();
    assert!(
        dead_ids
            .iter()
            .all(|w| w.starts_with(&format!("run.dead:{id}:"))),
        "{dead_ids:?}"
    );
    // The first event's retry carries the same webhook-id, so a receiver can drop repeats.
    let first_id = first[0].1.header("webhook-id");
    let tries: Vec<&Value> = all
        .iter()
        .filter(|(_, r)| r.header("webhook-id") == first_id)
        .map(|(e, _)| e)
        .collect();
    assert!(tries.len() >= 2, "the refused POST was not tried again");
    assert!(tries.iter().all(|e| **e == first[0].0), "{tries:?}");

    // Signed with the app's secret, as an independent implementation verifies.
    let secret = get_json(format!("{}/v1/apps/{APP}/signing-secret", c.rest)).await;
    let messages: Vec<Value> = all.iter().map(|(_, r)| message(r)).collect();
    let verdicts = verify(secret["secret"].as_str().unwrap(), &messages);
    assert!(verdicts.iter().all(|v| v == "ok"), "{verdicts:?}");

    // The settings read back what was sent: the retried POST took two attempts.
    let deadline = Instant::now() + Duration::from_secs(30);
    let read = loop {
        let read = get_json(format!("{}/v1/apps/{APP}/notifications", c.rest)).await;
        let recent = read["recent"].as_array().unwrap();
        if recent.iter().any(|s| s["type"] == "timer.recovered")
            && recent.iter().any(|s| s["attempts"].as_u64() >= Some(2))
        {
            break read;
        }
        assert!(Instant::now() < deadline, "{read}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let recent = read["recent"].as_array().unwrap();
    assert!(recent.iter().all(|s| s["delivered"] == true), "{read}");
    let mut delivered = 0.0;
    for e in &c.executors {
        delivered += e
            .metrics()
            .await
            .lines()
            .filter(|l| l.starts_with("chime_executor_notifications_total{"))
            .filter(|l| l.contains("result=\"delivered\""))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    // One per distinct event: the failed first POST is not counted apart from its retry.
    let distinct: std::collections::HashSet<&str> = all
        .iter()
        .filter_map(|(_, r)| r.header("webhook-id"))
        .collect();
    assert_eq!(delivered as usize, distinct.len(), "{distinct:?}");
    c.stop().await;
}
