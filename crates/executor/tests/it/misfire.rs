//! Runs their timer's next run overtook: skipped before the claim, against real PostgreSQL.

use std::time::Duration;

use chime_domain::{Clock, OccurrenceStatus, Outcome, SystemClock, TaskKey};
use chime_storage::OccurrenceStore;

use crate::support::counting::Counting;
use crate::support::pg::*;

/// Runs a whole interval late are skipped before any claim (one write each, no claim and no
/// outcome of their own) and never called back; a run not overtaken is claimed and fires, and
/// so does a late retry (the skip leaves it alone, the claim after it takes it).
#[tokio::test]
async fn overtaken_runs_are_skipped_without_a_claim() {
    let s = setup().await;
    let now = SystemClock.now();
    let every_second = chime_domain::ScheduleInput {
        every: Some("1s".into()),
        ..Default::default()
    }
    .resolve(now.saturating_sub(Duration::from_secs(60)), None, None)
    .unwrap();
    let t = timer_on(&s, "behind", s.sink.url("/behind"), &[], every_second).await;
    // Scheduled runs 5 to 3 s ago: each one's next run was due by 2 s ago.
    let late: Vec<TaskKey> = t
        .spec
        .schedule
        .occurrences_between(
            now.saturating_sub(Duration::from_secs(5)),
            now.saturating_sub(Duration::from_millis(2_500)),
        )
        .map(|at| TaskKey::new(t.id, at))
        .collect();
    assert!(late.len() >= 3, "{late:?}");
    insert(&s, &t, &late).await;
    // The earliest failed once and waits for its retry, due now.
    let (retry, late) = (late[0], late[1..].to_vec());
    let first =
        s.db.store
            .claim(
                &[retry],
                chime_domain::Claim {
                    now,
                    lease_until: now.add_millis(30_000),
                },
            )
            .await
            .unwrap();
    assert_eq!(first.len(), 1);
    let mut failed = Outcome::ended(
        retry,
        1,
        OccurrenceStatus::Retrying,
        Some(now),
        Some("HTTP 503".into()),
    );
    failed.next_attempt_at = Some(now);
    s.db.store.record_outcomes(&[failed]).await.unwrap();
    // Not a scheduled run (a trigger's): never overtaken.
    let triggered = due_now(&s, &t, 0).await;
    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 16);
    let mut offered = late.clone();
    offered.extend([triggered, retry]);
    assert_eq!(exec.offer(&offered).unwrap().accepted, offered.len());
    for key in [triggered, retry] {
        assert_eq!(finished(&s, key).await.status, OccurrenceStatus::Succeeded);
    }
    assert_eq!(finished(&s, retry).await.attempt, 2);
    for key in &late {
        let run = finished(&s, *key).await;
        assert_eq!(run.status, OccurrenceStatus::Skipped, "{key}");
        assert!(
            run.error.as_deref().unwrap().starts_with("misfired"),
            "{run:?}"
        );
        assert_eq!(run.attempt, 0, "claimed: {run:?}");
    }
    let claimed: Vec<TaskKey> = counting
        .claimed
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .copied()
        .collect();
    assert!(late.iter().all(|k| !claimed.contains(k)), "{claimed:?}");
    assert!(claimed.contains(&retry), "{claimed:?}");
    assert_eq!(s.sink.count(), 2);
    wait_for("the permits back", || async { exec.in_flight() == 0 }).await;
}
