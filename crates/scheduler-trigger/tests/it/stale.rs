//! A lagging shard's stale runs are skipped where they lie, not handed off to be skipped:
//! runs a whole interval late whose timer's next run is due already, and runs of a stopped
//! timer (real Redis and PostgreSQL).

use chime_domain::{
    Bucket, BucketCount, Clock, MisfirePolicy, OccurrenceStatus, ShardKey, SystemClock, TaskKey,
    Timer, Timestamp,
};
use chime_storage::{HotEntry, OccurrenceStore, TimerStore};

use crate::scheduler::{Setup, scheduler, setup, start, wait_for_all};
use crate::sweeper::{every_second_timer, status, write_runs};

/// `t`'s scheduled runs from `from` to `to`, written and in the hot index, as the migrator
/// leaves them (the tests' schedulers work 4 buckets).
async fn late_runs(s: &Setup, t: &Timer, from: Timestamp, to: Timestamp) -> Vec<TaskKey> {
    let keys: Vec<TaskKey> = t
        .spec
        .schedule
        .occurrences_between(from, to)
        .map(|at| TaskKey::new(t.id, at))
        .collect();
    write_runs(s, t, &keys).await;
    let bucket = Bucket::of(t.id, BucketCount::new(4).unwrap());
    let entries: Vec<HotEntry> = keys
        .iter()
        .map(|k| HotEntry::new(*k, k.run_at, bucket))
        .collect();
    let index = s.redis.hot_index();
    index.add(&entries).await.unwrap();
    let shards: Vec<ShardKey> = entries.iter().map(|e| e.shard).collect();
    index.touch(&shards).await.unwrap();
    keys
}

/// Four runs a second apart, 2.5 to 6.5 s late, all in one minute's shard.
fn late_span() -> (Timestamp, Timestamp) {
    let mut to = SystemClock.now().add_millis(-2_500);
    let mut from = to.add_millis(-4_000);
    if from.as_millis().div_euclid(60_000) != to.as_millis().div_euclid(60_000) {
        to = Timestamp::from_millis(to.as_millis().div_euclid(60_000) * 60_000 - 1);
        from = to.add_millis(-4_000);
    }
    (from, to)
}

#[tokio::test]
async fn a_lagging_shards_stale_runs_are_skipped_without_a_hand_off() {
    let s = setup().await;
    let (from, to) = late_span();
    let behind = every_second_timer(&s, "behind", MisfirePolicy::FireOnce).await;
    let fire_all = every_second_timer(&s, "fire-all", MisfirePolicy::FireAll).await;
    let stopped = every_second_timer(&s, "stopped", MisfirePolicy::FireOnce).await;
    let mut overtaken = late_runs(&s, &behind, from, to).await;
    let every_one = late_runs(&s, &fire_all, from, to).await;
    let mut disabled = late_runs(&s, &stopped, from, to).await;
    assert!(overtaken.len() >= 4, "{overtaken:?}");
    // Each timer's latest late run goes on at once, for the executors to judge.
    let latest = [overtaken.pop().unwrap(), disabled.pop().unwrap()];
    s.db.store
        .set_timer_enabled(stopped.id, false, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap();
    // The earliest overtaken run failed once and waits for its retry: not the skip's.
    let (retry, overtaken) = (overtaken[0], overtaken[1..].to_vec());
    chime_storage::contract::failed_once(s.db.store.as_ref(), retry, SystemClock.now()).await;

    let (stop, run) = start(scheduler(&s));
    let mut expected: Vec<TaskKey> = every_one.clone();
    expected.push(retry);
    expected.extend(latest);
    // Exactly these are handed off: one more would reach the count without all of them.
    wait_for_all(&s, expected.len()).await;
    stop.cancel();
    run.await.unwrap();

    let got: Vec<TaskKey> = s.recorder.got().iter().map(|(k, _)| *k).collect();
    assert!(
        expected.iter().all(|k| got.contains(k)),
        "handed off {got:?}, expected {expected:?}"
    );
    for key in overtaken.iter().chain(&disabled) {
        assert!(!got.contains(key), "{key} handed off");
        let row = s.db.store.get_occurrence(*key).await.unwrap().unwrap();
        assert_eq!(row.status, OccurrenceStatus::Skipped, "{row:?}");
        assert_eq!(row.attempt, 0, "claimed: {row:?}");
        let why = if key.timer_id == stopped.id {
            "timer disabled"
        } else {
            "misfired"
        };
        assert!(row.error.as_deref().unwrap().starts_with(why), "{row:?}");
    }
    assert_eq!(status(&s, retry).await, OccurrenceStatus::Retrying);
    for key in &every_one {
        assert_eq!(status(&s, *key).await, OccurrenceStatus::Pending);
    }
    // Nothing of them is left in the shard.
    for t in [&behind, &stopped] {
        let b = Bucket::of(t.id, BucketCount::new(4).unwrap());
        let left = s
            .redis
            .hot_index()
            .due(ShardKey::new(from, b), SystemClock.now(), 100)
            .await
            .unwrap();
        assert!(left.iter().all(|(k, _)| k.timer_id != t.id), "{left:?}");
    }
}
