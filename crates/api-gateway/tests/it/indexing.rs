//! What a change writes ahead and puts in the hot index, and what a stop takes out of both.

// Helpers outside #[test] functions panic on purpose: a bad fixture is a test bug.
#![allow(clippy::unwrap_used)]

use crate::support;

use reqwest::Method;
use serde_json::json;

/// The timer's stored occurrences (newest first) and which of them the hot index holds.
async fn stored_and_indexed(gw: &support::TestGateway, id: i64) -> (Vec<(i64, i64)>, usize) {
    use chime_storage::{OccurrenceStore, PageRequest, RunFilter};
    let timer_id = chime_domain::TimerId::new(id).unwrap();
    let runs = gw
        .db
        .store
        .list_runs(
            &RunFilter {
                timer_id,
                status: None,
                due_by: None,
            },
            &PageRequest::default(),
        )
        .await
        .unwrap()
        .items;
    let mut indexed = 0;
    if let Some(redis) = &gw.redis {
        let index = redis.hot_index();
        for o in &runs {
            let shard = chime_domain::ShardKey::new(o.key.run_at, o.bucket);
            let due = index.due(shard, o.key.run_at, 10_000).await.unwrap();
            indexed += usize::from(due.iter().any(|(k, _)| *k == o.key));
        }
    }
    let stored = runs
        .iter()
        .map(|o| (o.key.run_at.as_millis(), o.timer_version))
        .collect();
    (stored, indexed)
}

#[tokio::test]
async fn changes_write_their_first_occurrences_and_index_them() {
    let gw = support::start().await;
    // A daily timer holds its next run, however far ahead.
    let t = gw.create("billing", "nightly").await;
    let id = t["id"].as_i64().unwrap();
    let (stored, indexed) = stored_and_indexed(&gw, id).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(indexed, 1);
    let next =
        chime_domain::Timestamp::parse_rfc3339(t["next_runs"][0]["utc"].as_str().unwrap()).unwrap();
    assert_eq!(stored[0], (next.as_millis(), 1));

    let bucket = {
        use chime_storage::TimerStore;
        let timer_id = chime_domain::TimerId::new(id).unwrap();
        gw.db.store.get_timer(timer_id).await.unwrap().bucket
    };
    gw.send(Method::POST, &format!("/v1/timers/{id}/disable"), None)
        .await;
    // Disabled, its runs still to come leave the database and the hot index (just after
    // the answer): no executor claims each of them only to skip it.
    support::eventually("disable drops the runs to come", || async {
        let indexed = match &gw.redis {
            Some(redis) => {
                let shard = chime_domain::ShardKey::new(next, bucket);
                redis.hot_index().due(shard, next, 10).await.unwrap().len()
            }
            None => 0,
        };
        stored_and_indexed(&gw, id).await == (Vec::new(), 0) && indexed == 0
    })
    .await;
    gw.send(Method::POST, &format!("/v1/timers/{id}/enable"), None)
        .await;
    // Written again by version 3, and indexed.
    let (stored, indexed) = stored_and_indexed(&gw, id).await;
    assert_eq!(stored, vec![(next.as_millis(), 3)]);
    assert_eq!(indexed, usize::from(gw.redis.is_some()));

    let (status, _, body) = gw
        .send(
            Method::PATCH,
            &format!("/v1/timers/{id}"),
            Some(json!({"schedule": {"every": "5s"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The default lead is a minute: 12 fire times every 5 s (13 when the anchor, taken
    // while parsing, is a hair before the store's now), all at version 4.
    let (stored, indexed) = stored_and_indexed(&gw, id).await;
    let v4: Vec<_> = stored.iter().filter(|(_, v)| *v == 4).collect();
    assert!((11..=13).contains(&v4.len()), "{stored:?}");
    assert_eq!(indexed, stored.len());
}

#[tokio::test]
async fn a_batch_create_writes_and_indexes_every_timers_first_occurrences() {
    let gw = support::start().await;
    let item = |name: &str| {
        json!({"timer": {"app": "billing", "name": name, "schedule": {"every": "10s"},
                         "callback": {"url": "http://127.0.0.1:9/cb"}}})
    };
    let (status, _, body) = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": [item("a"), item("b"), item("c")]})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    for t in body["timers"].as_array().unwrap() {
        let (stored, indexed) = stored_and_indexed(&gw, t["id"].as_i64().unwrap()).await;
        // +10 s … +50 s inside the minute's lead, and +60 s when the anchor (taken while
        // parsing) is a hair before the store's now.
        assert!((5..=6).contains(&stored.len()), "{stored:?}");
        assert_eq!(indexed, stored.len());
    }
}

#[tokio::test]
async fn a_hot_index_that_is_down_does_not_fail_or_slow_requests() {
    let gw = support::start_with_index_down().await;
    let t = gw.create("billing", "nightly").await;
    assert_eq!(t["enabled"], true);
    // Stored all the same: the schedulers find it in the database.
    let (stored, _) = stored_and_indexed(&gw, t["id"].as_i64().unwrap()).await;
    assert_eq!(stored.len(), 1);
    // Due hours from now, so the request did not wait for the write; the writer counts
    // its failure and backs off.
    let metrics = || async {
        let r = gw.client.get(gw.url("/metrics")).send().await.unwrap();
        r.text().await.unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !metrics()
        .await
        .contains("chime_gateway_index_write_failures_total 1")
    {
        assert!(std::time::Instant::now() < deadline, "{}", metrics().await);
        tokio::task::yield_now().await;
    }
    // The next request does not try the index again.
    gw.create("billing", "weekly").await;
    let after = metrics().await;
    assert!(
        after.contains("chime_gateway_index_write_failures_total 1"),
        "{after}"
    );
    assert!(
        after.contains("chime_gateway_index_writes_skipped_total 1"),
        "{after}"
    );
}
