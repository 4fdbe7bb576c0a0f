//! Issue 19's scheduling semantics with real processes and a loopback sink: run limits and
//! self-deleting timers, the catch-up window after an executor outage, and retry age limits.
//! What fired is read from the sink, never from Chime's tables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use chime_e2e::timers::{client, create, get_json, ms, now};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use serde_json::{Value, json};

const APP: &str = "semantics";

/// Polls `cond` until it holds, or fails with `what` after `within`.
async fn until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn on(sink: &Sink, path: &str) -> Vec<Received> {
    sink.received()
        .into_iter()
        .filter(|r| r.path == path)
        .collect()
}

fn keys(got: &[Received]) -> HashSet<String> {
    got.iter()
        .map(|r| r.header("idempotency-key").unwrap().to_owned())
        .collect()
}

async fn status_of(url: String) -> u16 {
    client().get(url).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_timers_fire_their_runs_then_finish_or_delete_themselves() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-limits", &db, &redis, 1, 2, vec![]).await;

    let gone = create(
        &c.rest,
        json!({"app": APP, "name": "three-then-gone", "schedule": {"every": "1s"},
               "max_runs": 3, "on_complete": "delete",
               "callback": {"url": sink.url("/gone")}}),
    )
    .await;
    let kept = create(
        &c.rest,
        json!({"app": APP, "name": "two-then-done", "schedule": {"every": "1s"},
               "max_runs": 2, "callback": {"url": sink.url("/kept")}}),
    )
    .await;
    assert_eq!(gone["remaining_runs"], 3);
    let last_run = ms(gone["next_runs"][2]["utc"].as_str().unwrap());
    let gone_url = format!("{}/v1/timers/{}", c.rest, gone["id"]);
    let kept_url = format!("{}/v1/timers/{}", c.rest, kept["id"]);

    until(
        "the self-deleting timer is gone",
        Duration::from_secs(30),
        || async { status_of(gone_url.clone()).await == 404 },
    )
    .await;
    // Nothing fires after the last run: look until two intervals past it.
    until(
        "two intervals past the last run",
        Duration::from_secs(10),
        || async { now() > last_run + 2_000 },
    )
    .await;
    let fired = on(&sink, "/gone");
    assert_eq!(fired.len(), 3, "exactly max_runs callbacks");
    assert_eq!(keys(&fired).len(), 3, "three distinct occurrences");

    until(
        "the kept timer is done",
        Duration::from_secs(30),
        || async { get_json(kept_url.clone()).await["state"] == "done" },
    )
    .await;
    let done = get_json(kept_url.clone()).await;
    assert_eq!(done["remaining_runs"], 0, "{done}");
    assert!(done["next_runs"].as_array().unwrap().is_empty(), "{done}");
    assert_eq!(on(&sink, "/kept").len(), 2);
    let listed = get_json(format!("{}/v1/timers?app={APP}&state=done", c.rest)).await;
    assert_eq!(listed["timers"].as_array().unwrap().len(), 1, "{listed}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catch_up_window_skips_what_an_outage_left_behind() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-catch-up", &db, &redis, 1, 1, vec![]).await;
    let windowed = create(
        &c.rest,
        json!({"app": APP, "name": "windowed", "schedule": {"every": "1s"},
               "misfire": "fire_all", "catch_up_window": "1s",
               "callback": {"url": sink.url("/windowed")}}),
    )
    .await;
    create(
        &c.rest,
        json!({"app": APP, "name": "catch-all", "schedule": {"every": "1s"},
               "misfire": "fire_all", "callback": {"url": sink.url("/all")}}),
    )
    .await;
    until("both timers fire", Duration::from_secs(30), || async {
        !on(&sink, "/windowed").is_empty() && !on(&sink, "/all").is_empty()
    })
    .await;

    // Every executor gone: occurrences pile up, overdue.
    c.executors[0].service.kill9();
    let down_at = now();
    let runs_url =
        |t: &Value, status: &str| format!("{}/v1/timers/{}/runs?status={status}", c.rest, t["id"]);
    until(
        "three occurrences overdue by more than the window",
        Duration::from_secs(30),
        || async {
            let pending = get_json(runs_url(&windowed, "pending")).await;
            pending["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| ms(r["run_at"].as_str().unwrap()) < now() - 1_500)
                .count()
                >= 3
        },
    )
    .await;
    let up_at = now();
    c.executors[0].restart().await;

    // The windowed timer's missed runs are skipped, the other's are all delivered late.
    until(
        "the missed runs are settled",
        Duration::from_secs(60),
        || async {
            let skipped = get_json(runs_url(&windowed, "skipped")).await;
            let all_fired = on(&sink, "/all")
                .iter()
                .filter(|r| {
                    let at = ms(r.header("x-chime-scheduled-at").unwrap());
                    at > down_at + 1_000 && at < up_at - 1_000
                })
                .count();
            skipped["runs"].as_array().unwrap().len() >= 2 && all_fired >= 2
        },
    )
    .await;
    let skipped = get_json(runs_url(&windowed, "skipped")).await;
    for r in skipped["runs"].as_array().unwrap() {
        assert!(
            r["error"].as_str().unwrap().contains("catch_up_window"),
            "{r}"
        );
    }
    // No windowed callback went out for a run more than the window older than its delivery.
    for r in on(&sink, "/windowed") {
        let scheduled = ms(r.header("x-chime-scheduled-at").unwrap());
        let attempt = r.header("x-chime-attempt").unwrap_or("1");
        assert!(
            attempt != "1" || r.at_ms - scheduled <= 1_500,
            "a run {} ms old was delivered",
            r.at_ms - scheduled
        );
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retry_starts_after_retry_max_age() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    sink.set_healthy(false);
    let mut c = chime_e2e::start_on("semantics-max-age", &db, &redis, 1, 1, vec![]).await;
    // Attempts at 0 s and 1 s fail; the next would start at 3 s, past the 2.5 s age limit.
    let t = create(
        &c.rest,
        json!({"app": APP, "name": "aged", "schedule": {"after": "1s"},
               "retry": {"max_attempts": 10, "initial_backoff": "1s", "jitter": false,
                         "max_age": "2500ms"},
               "callback": {"url": sink.url("/switch")}}),
    )
    .await;
    let runs = format!("{}/v1/timers/{}/runs?status=dead", c.rest, t["id"]);
    until(
        "the occurrence is dead",
        Duration::from_secs(30),
        || async {
            !get_json(runs.clone()).await["runs"]
                .as_array()
                .unwrap()
                .is_empty()
        },
    )
    .await;
    let dead = get_json(runs).await;
    let run = &dead["runs"][0];
    assert_eq!(run["attempt"], 2, "{run}");
    assert!(
        run["error"].as_str().unwrap().contains("retry.max_age"),
        "{run}"
    );
    assert_eq!(on(&sink, "/switch").len(), 2);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_and_buffer_one_keep_one_callback_in_flight_across_executors() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-overlap", &db, &redis, 1, 2, vec![]).await;
    // The callee takes 2.5 s; the timer fires every second.
    let skip = create(
        &c.rest,
        json!({"app": APP, "name": "no-overlap", "schedule": {"every": "1s"},
               "overlap": "skip", "callback": {"url": sink.url("/delay/2500")}}),
    )
    .await;
    create(
        &c.rest,
        json!({"app": APP, "name": "overlapping", "schedule": {"every": "1s"},
               "callback": {"url": sink.url("/delay/2501")}}),
    )
    .await;
    let buffered = create(
        &c.rest,
        json!({"app": APP, "name": "one-waits", "schedule": {"every": "1s"},
               "overlap": "buffer_one", "callback": {"url": sink.url("/delay/2502")}}),
    )
    .await;
    assert_eq!(buffered["overlap"], "buffer_one");
    until(
        "four callbacks of the skip and buffer_one timers",
        Duration::from_secs(40),
        || async { on(&sink, "/delay/2500").len() >= 4 && on(&sink, "/delay/2502").len() >= 4 },
    )
    .await;
    let mut starts: Vec<i64> = on(&sink, "/delay/2500").iter().map(|r| r.at_ms).collect();
    starts.sort_unstable();
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= 2_500,
            "a callback started {} ms after the previous one, which takes 2500 ms",
            pair[1] - pair[0]
        );
    }
    // The timer without the policy overlaps itself, as it should.
    let mut others: Vec<i64> = on(&sink, "/delay/2501").iter().map(|r| r.at_ms).collect();
    others.sort_unstable();
    assert!(others.windows(2).any(|p| p[1] - p[0] < 2_000), "{others:?}");
    // The skipped occurrences say why.
    let skipped = get_json(format!(
        "{}/v1/timers/{}/runs?status=skipped",
        c.rest, skip["id"]
    ))
    .await;
    let runs = skipped["runs"].as_array().unwrap();
    assert!(runs.len() >= 2, "{skipped}");
    assert!(
        runs.iter()
            .all(|r| r["error"].as_str().unwrap().starts_with("overlap:"))
    );

    // buffer_one: never two at once either, but the occurrence due during a callback waits
    // and starts as soon as it ends (a skip timer waits for its next due second instead).
    let mut calls: Vec<(i64, i64)> = on(&sink, "/delay/2502")
        .iter()
        .map(|r| (r.at_ms, ms(r.header("x-chime-scheduled-at").unwrap())))
        .collect();
    calls.sort_unstable();
    let mut waited = 0;
    for pair in calls.windows(2) {
        let ((prev, _), (start, nominal)) = (pair[0], pair[1]);
        assert!(
            start - prev >= 2_500,
            "buffer_one: a callback started {} ms after the previous one, which takes 2502 ms",
            start - prev
        );
        if start - nominal >= 1_000 {
            waited += 1;
            assert!(
                start - (prev + 2_502) <= 1_000,
                "the waiting occurrence started {} ms after the one before it ended",
                start - (prev + 2_502)
            );
        }
    }
    assert!(waited >= 2, "no occurrence waited its turn: {calls:?}");
    let skipped = get_json(format!(
        "{}/v1/timers/{}/runs?status=skipped",
        c.rest, buffered["id"]
    ))
    .await;
    let runs = skipped["runs"].as_array().unwrap();
    assert!(!runs.is_empty(), "{skipped}");
    assert!(
        runs.iter()
            .all(|r| r["error"].as_str().unwrap().contains("waits for it"))
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flexible_window_spreads_timers_due_together_at_fixed_offsets() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-window", &db, &redis, 1, 1, vec![]).await;
    // 30 one-shots due at the same instant, each with a 3 s window.
    let due = now() + 2_000;
    let at = chime_domain::Timestamp::from_millis(due).to_rfc3339();
    let mut ids = Vec::new();
    for i in 0..30 {
        let t = create(
            &c.rest,
            json!({"app": APP, "name": format!("spread-{i}"), "schedule": {"at": at},
                   "window": "3s", "callback": {"url": sink.url("/spread")}}),
        )
        .await;
        assert_eq!(t["window"], "3s");
        ids.push(t["id"].as_i64().unwrap());
    }
    until("every one-shot fired", Duration::from_secs(30), || async {
        on(&sink, "/spread").len() >= 30
    })
    .await;
    let window = chime_domain::Window::parse("3s").unwrap();
    let mut arrivals = Vec::new();
    for r in on(&sink, "/spread") {
        // The header keeps the nominal time; the callback comes at the occurrence's offset.
        assert_eq!(ms(r.header("x-chime-scheduled-at").unwrap()), due);
        let id: i64 = r.header("x-chime-timer-id").unwrap().parse().unwrap();
        let key = chime_domain::TaskKey::new(
            chime_domain::TimerId::new(id).unwrap(),
            chime_domain::Timestamp::from_millis(due),
        );
        let expected = due + window.offset(key).as_millis() as i64;
        assert!(
            (r.at_ms - expected).abs() <= 250,
            "timer {id}: arrived at {} ms, its place in the window is {} ms",
            r.at_ms - due,
            expected - due
        );
        arrivals.push(r.at_ms - due);
    }
    arrivals.sort_unstable();
    assert!(
        arrivals[29] - arrivals[0] >= 1_500,
        "spread over the window: {arrivals:?}"
    );
    c.stop().await;
}
