//! Keys over their host's cap: they wait in the executor, unclaimed, and join a later claim.

use std::sync::atomic::Ordering;

use chime_domain::{Clock, OccurrenceStatus, SystemClock, TaskKey};

use crate::support::pg::*;
use crate::support::timers::CountingTimers;

#[tokio::test]
async fn keys_that_waited_for_their_host_are_claimed_without_reading_their_timer_again() {
    let s = setup().await;
    // Hourly: not a timer the executor caches between claims.
    let t = timer(&s, "capped", s.sink.url("/capped"), &[]).await;
    let now = SystemClock.now();
    let keys: Vec<TaskKey> = (0..5)
        .map(|i| TaskKey::new(t.id, now.add_millis(-i)))
        .collect();
    insert(&s, &t, &keys).await;
    let timers = CountingTimers::new(s.db.store());
    let mut config = chime_runtime::Config::default();
    config.executor.max_per_host = 1;
    let exec = executor_from(timers.clone(), s.db.store(), None, config);
    // One claim round reads the timer once. Its host is not measured yet, so one callback
    // goes and four keys wait for it, then join the next claim.
    assert_eq!(exec.offer(&keys).unwrap().accepted, 5);
    for key in &keys {
        assert_eq!(finished(&s, *key).await.status, OccurrenceStatus::Succeeded);
    }
    assert_eq!(s.sink.count(), 5);
    assert_eq!(
        timers.read.load(Ordering::SeqCst),
        1,
        "the keys that waited brought their timer to their claim"
    );
}
