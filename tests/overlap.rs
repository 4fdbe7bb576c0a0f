//! Overlap policies with real processes and a loopback sink: `skip` and `buffer_one` keep one
//! callback in flight across executors, `cancel_other` aborts the one in flight.
//! What fired is read from the sink, never from Chime's tables.

use std::time::Duration;

use chime_e2e::timers::{create, get_json, ms, on, until};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use serde_json::json;

const APP: &str = "semantics";

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
async fn overlap_cancel_other_aborts_the_callback_in_flight_across_executors() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("semantics-cancel", &db, &redis, 1, 2, vec![]).await;
    // The callee takes 2.5 s; the timer fires every second and each run ends the one before.
    let t = create(
        &c.rest,
        json!({"app": APP, "name": "latest-wins", "schedule": {"every": "1s"},
               "overlap": "cancel_other", "callback": {"url": sink.url("/delay/2503")}}),
    )
    .await;
    assert_eq!(t["overlap"], "cancel_other");
    let started = |sink: &Sink| -> Vec<Received> {
        sink.started()
            .into_iter()
            .filter(|r| r.path == "/delay/2503")
            .collect()
    };
    until("six callbacks started", Duration::from_secs(40), || async {
        started(&sink).len() >= 6
    })
    .await;
    // Each started on time, though the one before was still running...
    for r in started(&sink) {
        let late = r.at_ms - ms(r.header("x-chime-scheduled-at").unwrap());
        assert!(late < 1_000, "a callback started {late} ms after its time");
    }
    // ...and the one before was aborted: the callee saw its caller hang up before it
    // answered (answered ones are what the sink records), at most the last run may finish.
    let finished = on(&sink, "/delay/2503").len();
    assert!(
        finished <= 1,
        "{finished} callbacks ran to the end of their 2.5 s"
    );
    // The cancelled runs say so; no retry was made of them.
    let skipped = get_json(format!(
        "{}/v1/timers/{}/runs?status=skipped",
        c.rest, t["id"]
    ))
    .await;
    let runs = skipped["runs"].as_array().unwrap();
    assert!(runs.len() >= 4, "{skipped}");
    assert!(
        runs.iter().all(|r| r["error"]
            .as_str()
            .unwrap()
            .starts_with("overlap: cancelled by the occurrence at")),
        "{skipped}"
    );
    assert!(runs.iter().all(|r| r["attempt"] == 1), "{skipped}");
    c.stop().await;
}
