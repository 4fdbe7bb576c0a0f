//! Unwritten runs ([`chime_domain::UnwrittenRun`]) through an executor, against real
//! PostgreSQL: taken under a run lease, fired once however often offered, and written once,
//! when they end.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{Clock, OccurrenceStatus, ScheduleInput, SystemClock, TaskKey, Timer};
use chime_storage::memory::MemoryHotIndex;
use chime_storage::{HotIndex, OccurrenceStore, TimerStore};

use crate::support::pg::*;

fn every_second(from_s_ago: u64) -> chime_domain::Schedule {
    let now = SystemClock.now();
    ScheduleInput {
        every: Some("1s".into()),
        ..Default::default()
    }
    .resolve(
        now.saturating_sub(Duration::from_secs(from_s_ago)),
        None,
        None,
    )
    .unwrap()
}

fn index() -> Arc<dyn HotIndex> {
    Arc::new(MemoryHotIndex::new(
        Arc::new(SystemClock),
        Duration::from_secs(300),
    ))
}

/// `t`'s fire times in the next `seconds`, from a little ahead (as schedulers hand off).
fn next_runs(t: &Timer, seconds: i64) -> Vec<TaskKey> {
    let from = SystemClock.now().add_millis(300);
    t.spec
        .schedule
        .occurrences_between(from, from.add_millis(seconds * 1_000))
        .map(|at| TaskKey::new(t.id, at))
        .collect()
}

/// Waits until the sink has seen `n` deliveries.
async fn delivered(s: &Setup, n: usize) {
    wait_for(&format!("{n} deliveries"), || async { s.sink.count() >= n }).await;
}

#[tokio::test]
async fn an_unwritten_run_fires_once_however_often_offered_and_is_written_when_it_ends() {
    let s = setup().await;
    let t = timer_with(&s, "lean", s.sink.url("/lean"), &[], every_second(0), true).await;
    assert!(!t.written_ahead);
    let runs = next_runs(&t, 2);
    assert!(!runs.is_empty());
    assert!(
        s.db.store.absent(&runs).await.unwrap().len() == runs.len(),
        "nothing written ahead"
    );
    let index = index();
    let leases = index.run_leases().unwrap();
    let a = executor_with(&s, s.db.store(), Some(index.clone()), 64);
    let b = executor_with(&s, s.db.store(), Some(index.clone()), 64);
    // Offered twice to one executor and once to another, as a hand-off the scheduler
    // thought refused and the sweeper both might.
    let mut twice = runs.clone();
    twice.extend(runs.iter().copied());
    assert_eq!(a.offer(&twice).unwrap().accepted, twice.len());
    assert_eq!(b.offer(&runs).unwrap().accepted, runs.len());
    for key in &runs {
        let run = finished(&s, *key).await;
        assert_eq!(run.status, OccurrenceStatus::Succeeded, "{run:?}");
        assert_eq!((run.attempt, run.timer_version), (1, t.version));
        assert!(run.lateness_ms.unwrap() < 1_000, "{run:?}");
    }
    delivered(&s, runs.len()).await;
    // Both executors are idle once every permit is back: nothing more is on its way.
    wait_for("both executors idle", || async {
        a.in_flight() == 0 && b.in_flight() == 0
    })
    .await;
    let got = s.sink.received();
    assert_eq!(got.len(), runs.len(), "each run called back once");
    for (r, key) in got.iter().zip(&runs) {
        assert_eq!(
            r.header("idempotency-key"),
            Some(format!("{}:{}", key.timer_id, key.run_at.as_millis()).as_str())
        );
        assert_eq!(r.header("x-chime-attempt"), Some("1"));
    }
    assert!(
        leases.runs_held(&runs).await.unwrap().iter().all(|h| !h),
        "each lease freed once its row was written"
    );
    // Offered again after it ended: the row is found, nothing fires.
    assert_eq!(a.offer(&runs).unwrap().accepted, runs.len());
    wait_for("the late offer settled", || async { a.in_flight() == 0 }).await;
    assert_eq!(s.sink.count(), runs.len());
}

#[tokio::test]
async fn a_failed_unwritten_run_is_written_retrying_and_its_retry_claimed_as_a_row() {
    let s = setup().await;
    s.sink.set_healthy(false);
    let t = timer_with(
        &s,
        "flaky",
        s.sink.url("/switch"),
        &[],
        every_second(0),
        true,
    )
    .await;
    let key = next_runs(&t, 1)[0];
    let index = index();
    let exec = executor_with(&s, s.db.store(), Some(index.clone()), 16);
    exec.offer(&[key]).unwrap();
    let retrying = occurrence_when(&s, key, "a retrying row", |o| {
        o.status == OccurrenceStatus::Retrying
    })
    .await;
    assert_eq!(retrying.attempt, 1);
    s.sink.set_healthy(true);
    // Offered again (as its retry is, at its next attempt): claimed as any row is.
    wait_for("the retry's time", || async {
        SystemClock.now() >= retrying.due_at()
    })
    .await;
    exec.offer(&[key]).unwrap();
    let done = finished(&s, key).await;
    assert_eq!(
        (done.status, done.attempt),
        (OccurrenceStatus::Succeeded, 2)
    );
    assert!(
        !index.run_leases().unwrap().runs_held(&[key]).await.unwrap()[0],
        "the lease taken for the retry was freed"
    );
}

#[tokio::test]
async fn an_unwritten_run_of_a_stopped_or_changed_timer_is_dropped_and_a_late_one_skipped() {
    let s = setup().await;
    let index = index();
    let exec = executor_with(&s, s.db.store(), Some(index.clone()), 16);
    // Disabled after its runs were indexed.
    let stopped = timer_with(
        &s,
        "stopped",
        s.sink.url("/stopped"),
        &[],
        every_second(0),
        true,
    )
    .await;
    let stopped_runs = next_runs(&stopped, 1);
    s.db.store
        .set_timer_enabled(stopped.id, false, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap();
    // Changed to every 7 s: a run of the old schedule the new one does not name.
    let changed = timer_with(
        &s,
        "changed",
        s.sink.url("/changed"),
        &[],
        every_second(0),
        true,
    )
    .await;
    let old = next_runs(&changed, 3);
    let mut spec = changed.spec.clone();
    spec.schedule = ScheduleInput {
        every: Some("7s".into()),
        ..Default::default()
    }
    .resolve(SystemClock.now().add_millis(60_000), None, None)
    .unwrap();
    s.db.store
        .update_timer(changed.id, None, spec, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap();
    // Two seconds late: its next run is due already, so it is skipped, and written so.
    let behind = timer_with(
        &s,
        "behind",
        s.sink.url("/behind"),
        &[],
        every_second(60),
        true,
    )
    .await;
    let late = TaskKey::new(
        behind.id,
        behind
            .spec
            .schedule
            .occurrences_between(
                SystemClock
                    .now()
                    .saturating_sub(Duration::from_millis(3_000)),
                SystemClock.now(),
            )
            .next()
            .unwrap(),
    );
    let mut offered = stopped_runs.clone();
    offered.extend(old.iter().copied());
    offered.push(late);
    exec.offer(&offered).unwrap();
    let skipped = finished(&s, late).await;
    assert_eq!(skipped.status, OccurrenceStatus::Skipped);
    assert!(skipped.error.unwrap().starts_with("misfired"));
    wait_for("every offer settled", || async { exec.in_flight() == 0 }).await;
    let none: Vec<TaskKey> = stopped_runs.iter().chain(&old).copied().collect();
    assert_eq!(
        s.db.store.absent(&none).await.unwrap().len(),
        none.len(),
        "nothing written of runs that never were"
    );
    assert_eq!(s.sink.count(), 0);
    assert!(
        index
            .run_leases()
            .unwrap()
            .runs_held(&none)
            .await
            .unwrap()
            .iter()
            .all(|h| !h)
    );
}
