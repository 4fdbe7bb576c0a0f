//! Dead letters over REST: listed per app and timer, redriven one by one or in bulk.

// Helpers outside #[test] functions panic on purpose: a bad fixture is a test bug.
#![allow(clippy::unwrap_used)]

use crate::support;
use crate::support::assert_problem;

use chime_storage::OccurrenceStore;
use reqwest::Method;

/// A dead run of timer `id`, made through the store as executors would.
async fn dead_run(gw: &support::TestGateway, id: i64, run_at: i64) -> chime_domain::TaskKey {
    use chime_domain::{
        Claim, NewOccurrence, OccurrenceStatus, Outcome, TaskKey, TimerId, Timestamp,
    };
    let key = TaskKey::new(TimerId::new(id).unwrap(), Timestamp::from_millis(run_at));
    let store = gw.db.store.clone();
    store
        .insert_occurrences(&[NewOccurrence {
            key,
            timer_version: 1,
            bucket: chime_domain::Bucket::of(key.timer_id, Default::default()),
            due: None,
        }])
        .await
        .unwrap();
    let claim = Claim {
        now: Timestamp::from_millis(run_at),
        lease_until: Timestamp::from_millis(run_at + 30_000),
    };
    let won = store.claim(&[key], claim).await.unwrap();
    store
        .record_outcomes(&[Outcome {
            key,
            attempt: won[0].attempt,
            status: OccurrenceStatus::Dead,
            fired_at: Some(Timestamp::from_millis(run_at + 1)),
            http_status: Some(500),
            output: None,
            error: Some("callback answered HTTP 500".into()),
            next_attempt_at: None,
            unwritten: None,
            leased: false,
        }])
        .await
        .unwrap();
    key
}

#[tokio::test]
async fn dead_letters_are_listed_and_redriven() {
    let gw = support::start().await;
    let t = gw.create("billing", "flaky").await;
    let id = t["id"].as_i64().unwrap();
    let other = gw.create("ops", "other").await["id"].as_i64().unwrap();
    let k1 = dead_run(&gw, id, 1_000_000).await;
    let k2 = dead_run(&gw, id, 2_000_000).await;
    dead_run(&gw, other, 1_000_000).await;

    let (status, _, all) = gw
        .send(Method::GET, "/v1/dead-letters?page_size=2", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(all["runs"].as_array().unwrap().len(), 2);
    assert_eq!(all["runs"][0]["task_key"], k1.to_string().as_str());
    assert_eq!(all["runs"][0]["status"], "dead");
    assert!(all["next_page_token"].is_string());
    let (_, _, billing) = gw
        .send(Method::GET, "/v1/dead-letters?app=billing", None)
        .await;
    assert_eq!(billing["runs"].as_array().unwrap().len(), 2);
    let (_, _, of_other) = gw
        .send(
            Method::GET,
            &format!("/v1/dead-letters?timer_id={other}"),
            None,
        )
        .await;
    assert_eq!(of_other["runs"].as_array().unwrap().len(), 1);
    let bad = gw
        .send(Method::GET, "/v1/dead-letters?timer_id=0", None)
        .await;
    assert_problem(&bad, 400, "INVALID_ARGUMENT", None);

    // One run: malformed, unknown, not dead, then redriven.
    let bad = gw
        .send(Method::POST, "/v1/dead-letters/nonsense/redrive", None)
        .await;
    assert_problem(&bad, 400, "INVALID_ARGUMENT", Some("task_key"));
    let unknown = gw
        .send(
            Method::POST,
            &format!("/v1/dead-letters/{id}:5/redrive"),
            None,
        )
        .await;
    assert_problem(&unknown, 404, "NOT_FOUND", None);
    let (status, _, one) = gw
        .send(
            Method::POST,
            &format!("/v1/dead-letters/{k1}/redrive"),
            None,
        )
        .await;
    assert_eq!((status, one["redriven"].as_u64()), (200, Some(1)));
    let again = gw
        .send(
            Method::POST,
            &format!("/v1/dead-letters/{k1}/redrive"),
            None,
        )
        .await;
    assert_problem(&again, 409, "FAILED_PRECONDITION", None);
    let (_, _, runs) = gw
        .send(Method::GET, &format!("/v1/timers/{id}/runs"), None)
        .await;
    let redriven = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task_key"] == k1.to_string().as_str())
        .unwrap();
    assert_eq!(
        (redriven["status"].as_str(), redriven["attempt"].as_u64()),
        (Some("pending"), Some(0))
    );

    // All of a timer's.
    let (status, _, rest) = gw
        .send(Method::POST, &format!("/v1/timers/{id}/redrive"), None)
        .await;
    assert_eq!((status, rest["redriven"].as_u64()), (200, Some(1)));
    let (_, _, left) = gw.send(Method::GET, "/v1/dead-letters", None).await;
    assert_eq!(
        left["runs"].as_array().unwrap().len(),
        1,
        "only the other timer's"
    );
    let _ = k2;
    let missing = gw
        .send(Method::POST, "/v1/timers/999999/redrive", None)
        .await;
    assert_problem(&missing, 404, "NOT_FOUND", None);
}
