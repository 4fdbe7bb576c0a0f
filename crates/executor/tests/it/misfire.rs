//! Runs their timer's next run overtook: skipped before the claim, against real PostgreSQL.

use std::time::Duration;

use chime_domain::{Clock, OccurrenceStatus, SystemClock, TaskKey};
use chime_storage::TimerStore;

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
    chime_storage::contract::failed_once(s.db.store.as_ref(), retry, now).await;
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
    let claimed = counting.claimed_keys();
    assert!(late.iter().all(|k| !claimed.contains(k)), "{claimed:?}");
    assert!(claimed.contains(&retry), "{claimed:?}");
    assert_eq!(s.sink.count(), 2);
    wait_for("the permits back", || async { exec.in_flight() == 0 }).await;
}

/// Runs of a disabled or deleted timer are skipped before any claim, one write each, never
/// called back; a disabled timer's last run, when the timer deletes itself once done, is left
/// to the claim, whose skip deletes it.
#[tokio::test]
async fn a_stopped_timers_runs_are_skipped_without_a_claim() {
    let s = setup().await;
    let disabled = timer(&s, "disabled", s.sink.url("/disabled"), &[]).await;
    let deleted = timer(&s, "deleted", s.sink.url("/deleted"), &[]).await;
    let firing = timer(&s, "firing", s.sink.url("/firing"), &[]).await;
    let at = SystemClock.now().add_millis(50);
    let once = chime_domain::ScheduleInput {
        at: Some(at.to_rfc3339()),
        ..Default::default()
    }
    .resolve(SystemClock.now(), None, None)
    .unwrap();
    let mut last = timer_on(&s, "last", s.sink.url("/last"), &[], once).await;
    last.spec.on_complete = chime_domain::OnComplete::Delete;
    s.db.store
        .update_timer(
            last.id,
            None,
            last.spec.clone(),
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap();
    let mut keys = Vec::new();
    for t in [&disabled, &deleted] {
        keys.push(due_now(&s, t, 0).await);
        keys.push(due_now(&s, t, 1).await);
    }
    let last_run = TaskKey::new(last.id, at);
    for t in [&disabled, &last] {
        s.db.store
            .set_timer_enabled(t.id, false, chime_domain::Horizon::DEFAULT)
            .await
            .unwrap();
    }
    s.db.store.delete_timer(deleted.id).await.unwrap();
    let fires = due_now(&s, &firing, 0).await;
    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 16);
    let mut offered = keys.clone();
    offered.extend([fires, last_run]);
    assert_eq!(exec.offer(&offered).unwrap().accepted, offered.len());
    assert_eq!(
        finished(&s, fires).await.status,
        OccurrenceStatus::Succeeded
    );
    for key in &keys {
        let run = finished(&s, *key).await;
        assert_eq!(run.status, OccurrenceStatus::Skipped, "{key}");
        let why = if key.timer_id == disabled.id {
            "timer disabled"
        } else {
            "timer deleted"
        };
        assert_eq!(run.error.as_deref(), Some(why), "{run:?}");
        assert_eq!(run.attempt, 0, "claimed: {run:?}");
    }
    let run = finished(&s, last_run).await;
    assert_eq!(run.status, OccurrenceStatus::Skipped);
    assert_eq!(run.attempt, 1, "left to the claim: {run:?}");
    wait_for("the self-deleting timer gone", || async {
        s.db.store
            .get_timer(last.id)
            .await
            .map_or(true, |t| t.deleted_at.is_some())
    })
    .await;
    let claimed = counting.claimed_keys();
    assert!(keys.iter().all(|k| !claimed.contains(k)), "{claimed:?}");
    assert!(
        claimed.contains(&fires) && claimed.contains(&last_run),
        "{claimed:?}"
    );
    assert_eq!(s.sink.count(), 1);
    wait_for("the permits back", || async { exec.in_flight() == 0 }).await;
}
