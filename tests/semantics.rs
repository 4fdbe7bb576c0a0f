//! Issue 19's scheduling semantics with real processes and a loopback sink: run limits and
//! self-deleting timers, the catch-up window after an executor outage, retry age limits,
//! flexible windows, backfill and pause (overlap policies: `overlap.rs`).
//! What fired is read from the sink, never from Chime's tables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Duration;

use chime_e2e::timers::{client, create, get_json, grpc, keys, ms, now, on, until};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use serde_json::{Value, json};

const APP: &str = "semantics";

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
                // Due after the kill: a run in flight then may still read `pending` (its
                // first attempt under a run lease), and would end the outage a second early.
                .map(|r| ms(r["run_at"].as_str().unwrap()))
                .filter(|at| *at > down_at && *at < now() - 1_500)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_fires_past_run_times_once_each_at_its_pace() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-backfill", &db, &redis, 1, 2, vec![]).await;
    let hourly = create(
        &c.rest,
        json!({"app": APP, "name": "hourly", "schedule": {"cron": "0 0 * * * *"},
               "callback": {"url": sink.url("/backfill")}}),
    )
    .await;
    let id = hourly["id"].as_i64().unwrap();
    let started = now();
    const HOUR: i64 = 3_600_000;
    let hour_marks = |from: i64| -> Vec<i64> {
        let first = from.div_euclid(HOUR) * HOUR + if from % HOUR == 0 { 0 } else { HOUR };
        (0..)
            .map(|i| first + i * HOUR)
            .take_while(|t| *t < started)
            .collect()
    };
    let rfc = |t: i64| chime_domain::Timestamp::from_millis(t).to_rfc3339();
    // What the backfills called: run times before the test began. (An hour may turn during
    // the test; its scheduled run is not part of a backfill.)
    let past = |sink: &Sink| -> Vec<Received> {
        on(sink, "/backfill")
            .into_iter()
            .filter(|r| ms(r.header("x-chime-scheduled-at").unwrap()) < started)
            .collect()
    };

    // REST: the last five hours, five runs a second.
    let five = hour_marks(started - 5 * HOUR);
    let requested = now();
    let r = client()
        .post(format!("{}/v1/timers/{id}/backfill", c.rest))
        .json(&json!({"from": rfc(started - 5 * HOUR), "to": rfc(started), "rate": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let done: Value = r.json().await.unwrap();
    assert_eq!(done["added"], five.len(), "{done}");
    until(
        "the backfilled runs are called",
        Duration::from_secs(30),
        || async { past(&sink).len() >= five.len() },
    )
    .await;
    let got = past(&sink);
    // Each past run time once, with its nominal time and key, spread at the pace asked.
    let mut scheduled: Vec<i64> = got
        .iter()
        .map(|r| ms(r.header("x-chime-scheduled-at").unwrap()))
        .collect();
    scheduled.sort_unstable();
    assert_eq!(scheduled, five);
    let expected: HashSet<String> = five.iter().map(|t| format!("{id}:{t}")).collect();
    assert_eq!(keys(&got), expected);
    // Paced: the n-th run time (oldest first) starts no sooner than n × 200 ms after the
    // request (a late start is the machine's; an early one would be a burst).
    let mut by_run: Vec<(i64, i64)> = got
        .iter()
        .map(|r| (ms(r.header("x-chime-scheduled-at").unwrap()), r.at_ms))
        .collect();
    by_run.sort_unstable();
    for (n, (_, arrived)) in by_run.iter().enumerate() {
        let slot = requested + n as i64 * 200;
        assert!(
            *arrived >= slot - 20,
            "run {n} arrived {} ms before its place in the pace",
            slot - arrived
        );
    }

    // gRPC: seven hours back; only the two run times without a run are added.
    let mut g = grpc(&c.grpc).await;
    let pb_ts = |t: i64| prost_types::Timestamp {
        seconds: t.div_euclid(1000),
        nanos: (t.rem_euclid(1000) * 1_000_000) as i32,
    };
    let seven = hour_marks(started - 7 * HOUR);
    let more = g
        .backfill_timer(chime_proto::v1::BackfillTimerRequest {
            id,
            from: Some(pb_ts(started - 7 * HOUR)),
            to: Some(pb_ts(started)),
            rate: 20,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (more.added as usize, more.existing as usize),
        (seven.len() - five.len(), five.len())
    );
    until(
        "every backfilled run is called",
        Duration::from_secs(30),
        || async { past(&sink).len() >= seven.len() },
    )
    .await;
    // Listed as succeeded backfill runs once their outcomes are written (the executor records
    // an outcome after the callback returns, so the sink can see a call before the list does);
    // and no run time called twice.
    let runs_url = format!("{}/v1/timers/{id}/runs?status=succeeded", c.rest);
    let backfilled = |runs: &Value| {
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["backfill"] == "allow_all")
            .count()
    };
    until(
        "every backfilled run is listed as succeeded",
        Duration::from_secs(10),
        || async { backfilled(&get_json(runs_url.clone()).await) >= seven.len() },
    )
    .await;
    let runs = get_json(runs_url.clone()).await;
    assert_eq!(backfilled(&runs), seven.len(), "{runs}");
    let got = past(&sink);
    assert_eq!(got.len(), seven.len(), "no duplicates");
    assert_eq!(keys(&got).len(), seven.len());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_timer_stops_firing_shows_its_note_and_resumes() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-pause", &db, &redis, 1, 1, vec![]).await;
    let t = create(
        &c.rest,
        json!({"app": APP, "name": "pausable", "schedule": {"every": "1s"},
               "callback": {"url": sink.url("/pausable")}}),
    )
    .await;
    let id = t["id"].as_i64().unwrap();
    until("two callbacks", Duration::from_secs(20), || async {
        on(&sink, "/pausable").len() >= 2
    })
    .await;
    // Pause over REST with a reason.
    let r = client()
        .post(format!("{}/v1/timers/{id}/disable", c.rest))
        .json(&json!({"reason": "billing freeze until Monday"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let paused_at = now();
    let shown = get_json(format!("{}/v1/timers/{id}", c.rest)).await;
    assert_eq!(shown["state"], "paused", "{shown}");
    assert_eq!(shown["paused"]["reason"], "billing freeze until Monday");
    assert_eq!(shown["paused"]["by"], "bootstrap");
    let listed = get_json(format!("{}/v1/timers?app={APP}&state=paused", c.rest)).await;
    assert_eq!(
        listed["timers"][0]["paused"]["reason"],
        "billing freeze until Monday"
    );
    // Nothing due after the pause is called: wait three intervals past it.
    until("three seconds paused", Duration::from_secs(10), || async {
        now() > paused_at + 3_000
    })
    .await;
    let after_pause = on(&sink, "/pausable")
        .iter()
        .filter(|r| ms(r.header("x-chime-scheduled-at").unwrap()) > paused_at + 100)
        .count();
    assert_eq!(after_pause, 0, "a paused timer fired");

    // Resume over gRPC: firing starts again and the note is gone.
    let mut g = grpc(&c.grpc).await;
    let resumed = g
        .enable_timer(chime_proto::v1::EnableTimerRequest { id })
        .await
        .unwrap()
        .into_inner();
    assert!(resumed.paused.is_none(), "{resumed:?}");
    let resumed_at = now();
    until(
        "a callback after resuming",
        Duration::from_secs(20),
        || async {
            on(&sink, "/pausable")
                .iter()
                .any(|r| ms(r.header("x-chime-scheduled-at").unwrap()) >= resumed_at)
        },
    )
    .await;
    c.stop().await;
}
