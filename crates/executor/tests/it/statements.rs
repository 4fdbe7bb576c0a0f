//! How many statements the executor spends: claims and outcome writes shared by the keys of
//! a batch, and keys handed off twice costing no statement of their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use chime_domain::{Clock, NewOccurrence, OccurrenceStatus, OverlapPolicy, SystemClock, TaskKey};
use chime_storage::OccurrenceStore;

use crate::support::counting::Counting;
use crate::support::pg::*;

/// The executor's default room.
fn max_in_flight() -> usize {
    chime_runtime::Config::default().executor.max_in_flight
}

#[tokio::test]
async fn keys_handed_off_ahead_one_at_a_time_share_claims_and_outcome_writes() {
    let s = setup().await;
    let t = timer(&s, "linger", s.sink.url("/linger"), &[]).await;
    // 60 keys due 1 ms apart, half a second ahead, offered one at a time as a steady rate's
    // hand-offs come: without waiting for each other, each would be a claim and an outcome
    // statement of its own.
    let first = SystemClock.now().add_millis(500);
    let keys: Vec<TaskKey> = (0..60)
        .map(|i| TaskKey::new(t.id, first.add_millis(i)))
        .collect();
    insert(&s, &t, &keys).await;
    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), max_in_flight());
    for key in &keys {
        assert_eq!(exec.offer(&[*key]).unwrap().accepted, 1);
        // Pacing the offers, as hand-offs arrive; nothing waits on it.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for key in &keys {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
    let got = s.sink.received();
    assert_eq!(got.len(), 60);
    let claims = counting.claims.load(Ordering::SeqCst);
    let records = counting.records.load(Ordering::SeqCst);
    assert!(claims <= 10, "{claims} claim statements for 60 keys");
    assert!(records <= 20, "{records} outcome statements for 60 keys");
}

#[tokio::test]
async fn keys_handed_off_again_after_they_ran_cost_no_statement_each() {
    let s = setup().await;
    let t = timer(&s, "again", s.sink.url("/again"), &[]).await;
    let mut keys = Vec::new();
    for i in 0..50 {
        keys.push(due_now(&s, &t, -i * 1_000).await);
    }
    // They run once, on one executor (overdue: a backlog, which holds a quarter of it).
    let first = executor(&s, 200);
    assert_eq!(first.offer(&keys).unwrap().accepted, 50);
    for key in &keys {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
    // A backfilled run under `skip` is left by the batch claim to the exclusive one.
    let backfilled = TaskKey::new(t.id, SystemClock.now().add_millis(-3_600_000));
    s.db.store
        .backfill(
            &[NewOccurrence {
                key: backfilled,
                timer_version: t.version,
                bucket: t.bucket,
                due: Some(SystemClock.now()),
            }],
            OverlapPolicy::Skip,
        )
        .await
        .unwrap();
    // Then all of them are handed off again, as the sweeper does with keys still queued in
    // a burst: the finished ones are not called back, and cost no statement of their own.
    let counting = Counting::new(s.db.store());
    let second = executor_over(&s, counting.clone(), max_in_flight());
    let again = [keys.clone(), vec![backfilled]].concat();
    assert_eq!(second.offer(&again).unwrap().accepted, 51);
    assert_eq!(
        finished(&s, backfilled).await.status,
        OccurrenceStatus::Succeeded
    );
    wait_for("the second executor to finish", || async {
        second.in_flight() == 0
    })
    .await;
    assert_eq!(s.sink.count(), 51);
    let claims = counting.claims.load(Ordering::SeqCst);
    let held = counting.held.load(Ordering::SeqCst);
    let exclusive = counting.exclusive.load(Ordering::SeqCst);
    assert_eq!(exclusive, 1, "exclusive claims: only the backfilled run's");
    assert!(
        held <= claims,
        "{held} look-ups for {claims} claim statements"
    );
}

#[tokio::test]
async fn a_burst_writes_its_outcomes_without_waiting_out_the_linger() {
    let s = setup().await;
    let t = timer(&s, "burst", s.sink.url("/burst"), &[]).await;
    let now = SystemClock.now();
    let keys: Vec<TaskKey> = (0..200)
        .map(|i| TaskKey::new(t.id, now.add_millis(-i)))
        .collect();
    insert(&s, &t, &keys).await;
    let mut config = chime_runtime::Config::default();
    config.callbacks.allow_networks = vec!["127.0.0.0/8".into()];
    let mut settings = chime_executor::ExecutorSettings::from_config(&config);
    settings.outcome_linger = Duration::from_secs(60);
    let exec = chime_executor::Executor::start(
        s.db.store(),
        s.db.store(),
        None,
        std::sync::Arc::new(SystemClock),
        chime_executor::Targets::new(
            chime_executor::HttpTarget::new(chime_executor::CallbackSettings::from_config(&config))
                .unwrap(),
        ),
        settings,
    );
    assert_eq!(exec.offer(&keys).unwrap().accepted, 200);
    // Most of them within the wait, though every batch short of an eighth would sit out the
    // linger (a minute).
    let store = s.db.store.clone();
    wait_for("128 of 200 outcomes written", || {
        let (store, keys) = (store.clone(), keys.clone());
        async move {
            let mut done = 0;
            for k in &keys {
                let o = store.get_occurrence(*k).await.unwrap().unwrap();
                done += usize::from(o.status.is_terminal());
            }
            done >= 128
        }
    })
    .await;
}

#[tokio::test]
async fn an_outcome_write_failing_with_an_unknown_error_is_tried_again_not_dropped() {
    let s = setup().await;
    let t = timer(&s, "odd", s.sink.url("/odd"), &[]).await;
    let key = due_now(&s, &t, 0).await;
    let counting = Counting::new(s.db.store());
    counting.failing_records.store(2, Ordering::SeqCst);
    let exec = executor_over(&s, counting.clone(), max_in_flight());
    assert_eq!(exec.offer(&[key]).unwrap().accepted, 1);
    // Dropped, it would stay running until the sweeper fired it again (a duplicate).
    assert_eq!(finished(&s, key).await.status, OccurrenceStatus::Succeeded);
    assert_eq!(s.sink.received().len(), 1);
    assert_eq!(counting.records.load(Ordering::SeqCst), 3);
}
