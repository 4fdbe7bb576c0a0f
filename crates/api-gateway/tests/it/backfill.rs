//! Backfill (issue 19 item 4) over REST and gRPC: past run times added as runs marked as a
//! backfill, paced, added once, and bad ranges refused with problems naming their field.

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::assert_problem;
use chime_proto::v1 as pb;
use reqwest::Method;
use serde_json::{Value, json};

/// 2026-01-01T00:00:00Z: every-minute fire times from here are in the past for these tests.
const JAN_1: i64 = 1_767_225_600;

fn range(from: &str, to: &str, extra: Value) -> Value {
    let mut body = json!({"from": from, "to": to});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_adds_past_run_times_once_marked_and_paced() {
    let gw = support::start().await;
    let mut t = support::timer_json("bf", "every-minute");
    t["schedule"] = json!({"cron": "0 * * * * *"});
    let (status, _, created) = gw.send(Method::POST, "/v1/timers", Some(t)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    let path = format!("/v1/timers/{id}/backfill");

    // Ten minutes of January: ten run times, from 00:00 up to (not including) 00:10.
    let ten = range(
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:10:00Z",
        json!({"rate": 4}),
    );
    let (status, _, done) = gw.send(Method::POST, &path, Some(ten.clone())).await;
    assert_eq!(status, 202, "{done}");
    assert_eq!(done["added"], 10, "{done}");
    assert_eq!(done["existing"], 0, "{done}");
    assert_eq!(
        done["overlap"], "allow_all",
        "the timer's own policy: {done}"
    );
    // Four a second: the last starts 9 × 250 ms after the first.
    let at = |k: &str| chime_domain::Timestamp::parse_rfc3339(done[k].as_str().unwrap()).unwrap();
    assert_eq!(
        at("last_start").as_millis() - at("first_start").as_millis(),
        2_250
    );

    // Listed in the timer's runs with their nominal run times, marked.
    let (_, _, runs) = gw
        .send(Method::GET, &format!("/v1/timers/{id}/runs"), None)
        .await;
    let marked: Vec<(&str, &str)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["backfill"].is_string())
        .map(|r| {
            (
                r["run_at"].as_str().unwrap(),
                r["backfill"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(marked.len(), 10, "{runs}");
    assert_eq!(marked[0], ("2026-01-01T00:09:00.000Z", "allow_all"));
    assert_eq!(marked[9], ("2026-01-01T00:00:00.000Z", "allow_all"));

    // Again, over gRPC and wider: only the new run times are added.
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let again = g
        .backfill_timer(pb::BackfillTimerRequest {
            id,
            from: Some(prost_types::Timestamp {
                seconds: JAN_1,
                nanos: 0,
            }),
            to: Some(prost_types::Timestamp {
                seconds: JAN_1 + 12 * 60,
                nanos: 0,
            }),
            overlap: pb::OverlapPolicy::Skip as i32,
            rate: 100,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((again.added, again.existing), (2, 10));
    assert_eq!(again.overlap, pb::OverlapPolicy::Skip as i32);
    // The newest backfilled run, 00:11 in January. Not simply the newest run: the timer's
    // own first run (the next minute) joins the history if the test crosses a minute.
    let listed = g
        .list_runs(pb::ListRunsRequest {
            timer_id: id,
            page_size: 20,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let newest = listed.runs.iter().find(|r| !r.backfill.is_empty()).unwrap();
    assert_eq!(newest.backfill, "skip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_backfills_are_problems_naming_their_field() {
    let gw = support::start().await;
    let mut t = support::timer_json("bf", "bad");
    t["schedule"] = json!({"cron": "0 * * * * *"});
    let (_, _, created) = gw.send(Method::POST, "/v1/timers", Some(t)).await;
    let id = created["id"].as_i64().unwrap();
    let path = format!("/v1/timers/{id}/backfill");
    let (a, b) = ("2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z");
    let cases = [
        (range(b, a, json!({})), "to"),
        (range(a, a, json!({})), "to"),
        (range(a, "2999-01-01T00:00:00Z", json!({})), "to"),
        (range("yesterday", b, json!({})), "from"),
        (range("", b, json!({})), "from"),
        (range(a, b, json!({"rate": 0})), "rate"),
        (range(a, b, json!({"rate": 101})), "rate"),
    ];
    for (body, field) in cases {
        let resp = gw.send(Method::POST, &path, Some(body.clone())).await;
        assert_problem(&resp, 400, "INVALID_ARGUMENT", Some(field));
    }
    // More than 1,000 run times (a day of minutes): refused whole, nothing added.
    let resp = gw
        .send(
            Method::POST,
            &path,
            Some(range(a, "2026-01-02T00:00:00Z", json!({}))),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("to"));
    assert_eq!(resp.2["reason"], "BACKFILL_TOO_LARGE", "{}", resp.2);
    // Not an overlap policy, or no body at all.
    let resp = gw
        .send(
            Method::POST,
            &path,
            Some(range(a, b, json!({"overlap": "terminate"}))),
        )
        .await;
    assert_eq!(resp.0, 400, "{}", resp.2);
    let resp = gw.send(Method::POST, &path, None).await;
    assert!(resp.0 == 400 || resp.0 == 415, "{}", resp.2);
    let (_, _, runs) = gw
        .send(Method::GET, &format!("/v1/timers/{id}/runs"), None)
        .await;
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["backfill"].is_null()),
        "{runs}"
    );
    // gRPC names the field too.
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let err = g
        .backfill_timer(pb::BackfillTimerRequest {
            id,
            to: Some(prost_types::Timestamp {
                seconds: JAN_1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("from"), "{err:?}");
    // A paused timer takes no backfill; an unknown one is 404.
    gw.send(Method::POST, &format!("/v1/timers/{id}/disable"), None)
        .await;
    let resp = gw
        .send(Method::POST, &path, Some(range(a, b, json!({}))))
        .await;
    assert_problem(&resp, 409, "FAILED_PRECONDITION", None);
    let resp = gw
        .send(
            Method::POST,
            "/v1/timers/999999999/backfill",
            Some(range(a, b, json!({}))),
        )
        .await;
    assert_eq!(resp.0, 404, "{}", resp.2);
}
