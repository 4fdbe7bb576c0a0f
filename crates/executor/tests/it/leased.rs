//! Written runs' first attempts under run leases, against real PostgreSQL: fired once
//! however often offered, with no claim statement, the row `pending` while in flight and
//! recorded from there; `at_most_once` runs are still claimed on their rows.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{OccurrenceStatus, SystemClock};
use chime_storage::memory::MemoryHotIndex;
use chime_storage::{HotIndex, OccurrenceStore};

use crate::support::counting::Counting;
use crate::support::pg::*;

fn index() -> Arc<dyn HotIndex> {
    Arc::new(MemoryHotIndex::new(
        Arc::new(SystemClock),
        Duration::from_secs(300),
    ))
}

#[tokio::test]
async fn a_first_attempt_fires_once_under_its_lease_without_a_claim() {
    let s = setup().await;
    let t = timer(&s, "leased", s.sink.url("/delay/700"), &[]).await;
    let key = due_now(&s, &t, 100).await;
    let index = index();
    let leases = index.run_leases().unwrap();
    let counting = Counting::new(s.db.store());
    let a = executor_configured(&s, counting.clone(), Some(index.clone()), 16, true);
    let b = executor_configured(&s, counting.clone(), Some(index.clone()), 16, true);
    // Offered twice to one executor and once to another.
    assert_eq!(a.offer(&[key, key]).unwrap().accepted, 2);
    assert_eq!(b.offer(&[key]).unwrap().accepted, 1);
    wait_for("the callback under way", || async {
        !s.sink.started().is_empty()
    })
    .await;
    let row = s.db.store.get_occurrence(key).await.unwrap().unwrap();
    assert_eq!(
        (row.status, row.attempt),
        (OccurrenceStatus::Pending, 0),
        "nothing written while it runs"
    );
    assert!(leases.runs_held(&[key]).await.unwrap()[0]);
    let done = finished(&s, key).await;
    assert_eq!(
        (done.status, done.attempt),
        (OccurrenceStatus::Succeeded, 1)
    );
    wait_for("both executors idle", || async {
        a.in_flight() == 0 && b.in_flight() == 0
    })
    .await;
    let got = s.sink.received();
    assert_eq!(got.len(), 1, "called back once");
    assert_eq!(got[0].header("x-chime-attempt"), Some("1"));
    assert_eq!(
        counting.claims.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no claim statement"
    );
    wait_for("the lease freed", || async {
        !leases.runs_held(&[key]).await.unwrap()[0]
    })
    .await;
    // Offered again after it ended: the row is no first attempt any more, nothing fires.
    a.offer(&[key]).unwrap();
    wait_for("the late offer settled", || async { a.in_flight() == 0 }).await;
    assert_eq!(s.sink.count(), 1);
}

#[tokio::test]
async fn an_at_most_once_run_is_claimed_on_its_row() {
    let s = setup().await;
    let t = timer(&s, "once", s.sink.url("/delay/700"), &[]).await;
    let t = with_policy(&s, t, 3, true).await;
    let key = due_now(&s, &t, 100).await;
    let index = index();
    let exec = executor_configured(&s, s.db.store(), Some(index.clone()), 16, true);
    exec.offer(&[key]).unwrap();
    // Its row says `running` while the callback is under way: the sweeper, finding such a
    // row lapsed, fails it rather than fires it again.
    let running = occurrence_when(&s, key, "a running row", |o| {
        o.status == OccurrenceStatus::Running
    })
    .await;
    assert_eq!(running.attempt, 1);
    assert!(!index.run_leases().unwrap().runs_held(&[key]).await.unwrap()[0]);
    let done = finished(&s, key).await;
    assert_eq!(
        (done.status, done.attempt),
        (OccurrenceStatus::Succeeded, 1)
    );
}
