//! Keys on time are claimed apart from a backlog's: a burst that outruns the executor delays
//! only itself (real PostgreSQL, callbacks to a loopback sink).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;

use chime_domain::{Clock, OccurrenceStatus, SystemClock, TaskKey};

use crate::support::counting::Counting;
use crate::support::pg::*;

#[tokio::test]
async fn a_key_on_time_is_claimed_apart_from_a_backlog_queued_ahead_of_it() {
    let s = setup().await;
    let t = timer(&s, "lanes", s.sink.url("/lanes"), &[]).await;
    let now = SystemClock.now();
    // More backlog than one claim takes (512 keys), two seconds overdue, and one key due
    // in a moment.
    let first = TaskKey::new(t.id, now.add_millis(-3_000));
    let backlog: Vec<TaskKey> = (0..600)
        .map(|i| TaskKey::new(t.id, now.add_millis(-2_000 - i)))
        .collect();
    let on_time = TaskKey::new(t.id, now.add_millis(300));
    insert(&s, &t, &[vec![first, on_time], backlog.clone()].concat()).await;

    let counting = Counting::new(s.db.store());
    // Room for the whole backlog: it may hold a quarter of the permits.
    let exec = executor_over(&s, counting.clone(), 2_500);
    // One claim in progress, held, while the backlog and then the key on time queue up.
    let held = counting.gate.write().await;
    assert_eq!(exec.offer(&[first]).unwrap().accepted, 1);
    wait_for("the first claim to start", || async {
        counting.claims.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(exec.offer(&backlog).unwrap().accepted, 600);
    assert_eq!(exec.offer(&[on_time]).unwrap().accepted, 1);
    drop(held);

    assert_eq!(
        finished(&s, on_time).await.status,
        OccurrenceStatus::Succeeded
    );
    for key in &backlog {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
    let claimed = counting.claimed.lock().unwrap().clone();
    let with_it = claimed.iter().find(|c| c.contains(&on_time)).unwrap();
    assert!(
        with_it == &[on_time],
        "the key on time is claimed in a statement of its own, not with the backlog's \
         (claims: {:?})",
        claimed.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_key_on_time_is_claimed_while_a_backlog_claim_is_in_progress() {
    let s = setup().await;
    let t = timer(&s, "beside", s.sink.url("/beside"), &[]).await;
    let now = SystemClock.now();
    let backlog: Vec<TaskKey> = (0..20)
        .map(|i| TaskKey::new(t.id, now.add_millis(-2_000 - i)))
        .collect();
    let on_time = TaskKey::new(t.id, now.add_millis(200));
    insert(&s, &t, &[backlog.clone(), vec![on_time]].concat()).await;

    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 100);
    // The backlog's claim is held (a burst's claim on a busy database) ...
    *counting.held_key.lock().unwrap() = Some(backlog[0]);
    let held = counting.key_gate.write().await;
    assert_eq!(exec.offer(&backlog).unwrap().accepted, backlog.len());
    wait_for("the backlog's claim to start", || async {
        counting.claims.load(Ordering::SeqCst) == 1
    })
    .await;
    // ... and the key on time is claimed and fired meanwhile, not behind it.
    assert_eq!(exec.offer(&[on_time]).unwrap().accepted, 1);
    assert_eq!(
        finished(&s, on_time).await.status,
        OccurrenceStatus::Succeeded
    );
    drop(held);
    for key in &backlog {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
}

#[tokio::test]
async fn a_backlog_that_fills_an_executor_leaves_room_for_keys_on_time() {
    let s = setup().await;
    let t = timer(&s, "room", s.sink.url("/room"), &[]).await;
    // A backlog of more keys than the executor holds, two seconds overdue, and keys on
    // time.
    let (backlog, on_time) = backlog_and_on_time(&s, &t, 100, 30).await;

    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 40);
    // Claims held: nothing accepted finishes while the offers are made.
    let held = counting.gate.write().await;
    let taken = exec.offer(&backlog).unwrap().accepted;
    assert_eq!(
        taken, 30,
        "a backlog alone holds three quarters of the 40 permits"
    );
    let offered = exec.offer(&on_time).unwrap();
    assert_eq!(
        offered.accepted, 10,
        "the last quarter is kept for keys on time"
    );
    assert_eq!(offered.available, 0);
    assert_eq!(exec.offer(&backlog[taken..]).unwrap().accepted, 0);
    drop(held);

    for key in on_time[..10].iter().chain(&backlog[..taken]) {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
}

#[tokio::test]
async fn beside_keys_on_time_a_backlog_holds_a_quarter() {
    let s = setup().await;
    let t = timer(&s, "quarter", s.sink.url("/quarter"), &[]).await;
    let (backlog, on_time) = backlog_and_on_time(&s, &t, 100, 5).await;

    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 40);
    let held = counting.gate.write().await;
    assert_eq!(exec.offer(&on_time).unwrap().accepted, 5);
    // 35 permits are free, but beside keys on time a backlog holds a quarter of 40: it
    // delays only itself, not the keys falling due while it drains.
    assert_eq!(exec.offer(&backlog).unwrap().accepted, 10);
    drop(held);
    for key in on_time.iter().chain(&backlog[..10]) {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
}

#[tokio::test]
async fn a_burst_due_at_one_instant_leaves_room_for_keys_due_at_others() {
    let s = setup().await;
    let now = SystemClock.now();
    // Twelve timers due at one instant in a moment (a burst, on time), and thirty keys of
    // another timer due just after it.
    let at = now.add_millis(300);
    let mut burst = Vec::new();
    for i in 0..12 {
        let t = timer(&s, &format!("burst-{i}"), s.sink.url("/burst"), &[]).await;
        let key = TaskKey::new(t.id, at);
        insert(&s, &t, &[key]).await;
        burst.push(key);
    }
    let t = timer(&s, "after", s.sink.url("/after"), &[]).await;
    let after: Vec<TaskKey> = (1..=30)
        .map(|i| TaskKey::new(t.id, at.add_millis(i)))
        .collect();
    insert(&s, &t, &after).await;

    let counting = Counting::new(s.db.store());
    let exec = executor_over(&s, counting.clone(), 40);
    // Claims held: nothing accepted finishes while the offers are made.
    let held = counting.gate.write().await;
    let taken = exec.offer(&burst).unwrap().accepted;
    assert_eq!(taken, 10, "one instant holds a quarter of the 40 permits");
    let offered = exec.offer(&after).unwrap();
    assert_eq!(offered.accepted, 30, "keys due at other instants find room");
    drop(held);

    for key in after.iter().chain(&burst[..taken]) {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
    assert_eq!(
        exec.offer(&burst[taken..]).unwrap().accepted,
        2,
        "the rest once the first are done"
    );
    for key in &burst[taken..] {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
}

/// `backlog` keys of `t` two seconds overdue and `on_time` keys due in 200 ms, in the
/// database.
async fn backlog_and_on_time(
    s: &Setup,
    t: &chime_domain::Timer,
    backlog: i64,
    on_time: i64,
) -> (Vec<TaskKey>, Vec<TaskKey>) {
    let now = SystemClock.now();
    let late: Vec<TaskKey> = (0..backlog)
        .map(|i| TaskKey::new(t.id, now.add_millis(-2_000 - i)))
        .collect();
    let soon: Vec<TaskKey> = (0..on_time)
        .map(|i| TaskKey::new(t.id, now.add_millis(200 + i)))
        .collect();
    insert(s, t, &[late.clone(), soon.clone()].concat()).await;
    (late, soon)
}
