//! Retention on an injected clock: the janitor removes what `[retention]` no longer keeps,
//! and only one replica runs it at a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    BucketCount, Claim, Clock, Horizon, ManualClock, OccurrenceStatus, Outcome, SystemClock,
};
use chime_migrator::{Janitor, RetentionSettings};
use chime_storage::memory::MemoryLeases;
use chime_storage::postgres::PgStore;
use chime_storage::testkit;
use chime_storage::{OccurrenceStore, TimerStore};

const DAY: Duration = Duration::from_secs(86_400);

fn settings() -> RetentionSettings {
    RetentionSettings {
        history: 7 * DAY,
        dead_letters: 30 * DAY,
        idempotency_keys: DAY,
        interval: Duration::from_secs(60),
        batch: 2,
    }
}

#[tokio::test]
async fn old_rows_go_by_kind_and_one_replica_runs_it() {
    let db = testkit::pg().await;
    let clock = ManualClock::new(SystemClock.now());
    let store = Arc::new(PgStore::from_pool(
        db.store.pool().clone(),
        Arc::new(clock.clone()),
        BucketCount::DEFAULT,
    ));
    let leases = Arc::new(MemoryLeases::new(Arc::new(clock.clone())));
    let janitor = Janitor::new(
        store.clone(),
        leases.clone(),
        Arc::new(clock.clone()),
        settings(),
    );
    let other = Janitor::new(store.clone(), leases, Arc::new(clock.clone()), settings());

    let mut spec = chime_storage::contract::spec("billing", "every-10s");
    spec.schedule = chime_domain::ScheduleInput {
        every: Some("10s".into()),
        ..Default::default()
    }
    .resolve(clock.now(), None, None)
    .unwrap();
    let written = store
        .create_timer(
            chime_domain::NewTimer {
                spec,
                enabled: true,
            },
            Horizon::DEFAULT,
        )
        .await
        .unwrap();
    let gone = store
        .create_timer(
            chime_storage::contract::new_timer("billing", "gone"),
            Horizon::DEFAULT,
        )
        .await
        .unwrap();
    store.delete_timer(gone.timer.id).await.unwrap();
    let keys: Vec<_> = written.occurrences.iter().map(|o| o.key).collect();
    assert!(keys.len() >= 5);
    // First: succeeded; second: dead; the rest stay pending.
    let now = clock.now();
    store
        .claim(
            &keys[..2],
            Claim {
                now,
                lease_until: now.add_millis(60_000),
            },
        )
        .await
        .unwrap();
    let outcome = |i: usize, status| Outcome {
        key: keys[i],
        attempt: 1,
        status,
        fired_at: Some(now),
        http_status: Some(200),
        output: None,
        error: None,
        next_attempt_at: None,
    };
    store
        .record_outcomes(&[
            outcome(0, OccurrenceStatus::Succeeded),
            outcome(1, OccurrenceStatus::Dead),
        ])
        .await
        .unwrap();

    let exists = |i: usize| {
        let store = store.clone();
        let key = keys[i];
        async move { store.get_occurrence(key).await.unwrap().is_some() }
    };
    // A day on: nothing is old enough.
    clock.advance(DAY);
    let first = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(first.occurrences, 0);
    assert!(
        other.run_once().await.unwrap().is_none(),
        "one replica at a time"
    );

    // Eight days on: history goes, dead letters stay, pending work stays.
    clock.advance(7 * DAY);
    let week = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(week.timers, 1, "the timer deleted a week ago");
    assert!(week.occurrences > 1, "{week:?}");
    assert!(!exists(0).await);
    assert!(exists(1).await);
    assert!(exists(2).await);
    assert!(store.get_timer(written.timer.id).await.is_ok());

    // A month on: the dead letter goes too.
    clock.advance(23 * DAY);
    janitor.run_once().await.unwrap().unwrap();
    assert!(!exists(1).await);
    assert!(
        exists(2).await,
        "pending rows of a live timer are never purged"
    );
}
