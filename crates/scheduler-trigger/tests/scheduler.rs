//! The scheduler against real Redis and PostgreSQL, handing off to a recording executor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Clock, NewOccurrence, ShardKey, SystemClock, TaskKey, TimerId, Timestamp,
};
use chime_scheduler::{Handoff, Scheduler, SchedulerSettings};
use chime_storage::testkit::{self, PgFixture, RedisFixture};
use chime_storage::{HotEntry, LeaseToken, OccurrenceStore};
use tokio_util::sync::CancellationToken;

/// Records every key handed to it, with when; refuses the first `refuse` calls.
#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
    refuse: AtomicUsize,
}

#[async_trait]
impl Handoff for Recorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        if self
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return 0;
        }
        let now = SystemClock.now();
        self.got
            .lock()
            .unwrap()
            .extend(keys.iter().map(|k| (*k, now)));
        keys.len()
    }
}

impl Recorder {
    fn got(&self) -> Vec<(TaskKey, Timestamp)> {
        self.got.lock().unwrap().clone()
    }
}

struct Setup {
    db: PgFixture,
    redis: RedisFixture,
    recorder: Arc<Recorder>,
}

const BUCKETS: u32 = 4;

async fn setup() -> Setup {
    Setup {
        db: testkit::pg().await,
        redis: testkit::redis().await,
        recorder: Arc::default(),
    }
}

fn settings() -> SchedulerSettings {
    let mut s = SchedulerSettings::new(
        BucketCount::new(BUCKETS).unwrap(),
        Duration::from_secs(2),
        Duration::from_secs(1),
    );
    s.tick = Duration::from_millis(200);
    s.poll = Duration::from_millis(100);
    s
}

fn scheduler(s: &Setup) -> Arc<Scheduler> {
    Scheduler::new(
        s.redis.hot_index(),
        s.redis.leases(),
        s.db.store(),
        s.recorder.clone(),
        Arc::new(SystemClock),
        settings(),
    )
}

fn start(sched: Arc<Scheduler>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let run = tokio::spawn(sched.run(stop.clone(), Duration::from_secs(5)));
    (stop, run)
}

/// `n` keys due from `first_ms` after now on, 37 ms apart, spread over the buckets.
fn keys(n: i64, first_ms: i64) -> Vec<(TaskKey, Bucket)> {
    let now = SystemClock.now();
    (0..n)
        .map(|i| {
            let key = TaskKey::new(
                TimerId::new(1_000 + i).unwrap(),
                now.add_millis(first_ms + i * 37),
            );
            (
                key,
                Bucket::of(key.timer_id, BucketCount::new(BUCKETS).unwrap()),
            )
        })
        .collect()
}

async fn index(s: &Setup, keys: &[(TaskKey, Bucket)]) {
    let entries: Vec<HotEntry> = keys
        .iter()
        .map(|(k, b)| HotEntry::new(*k, k.run_at, *b))
        .collect();
    s.redis.hot_index().add(&entries).await.unwrap();
}

async fn wait_for_all(s: &Setup, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while s.recorder.got().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} handed off",
            s.recorder.got().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `replicas` schedulers until every key was handed off, plus `linger` (to catch a
/// second hand-off), stops them, and checks each key went exactly once, on time.
async fn run_until_handed_off(
    s: &Setup,
    replicas: usize,
    keys: &[(TaskKey, Bucket)],
    linger: Duration,
) {
    let runs: Vec<_> = (0..replicas).map(|_| start(scheduler(s))).collect();
    wait_for_all(s, keys.len()).await;
    if !linger.is_zero() {
        tokio::time::timeout(linger, std::future::pending::<()>())
            .await
            .unwrap_err();
    }
    for (stop, run) in runs {
        stop.cancel();
        run.await.unwrap();
    }
    assert_once_on_time(&s.recorder.got(), keys);
}

/// Each key exactly once, never before its due instant.
fn assert_once_on_time(got: &[(TaskKey, Timestamp)], keys: &[(TaskKey, Bucket)]) {
    let mut count: HashMap<TaskKey, usize> = HashMap::new();
    for (k, at) in got {
        *count.entry(*k).or_default() += 1;
        assert!(
            *at >= k.run_at,
            "{k} handed off {} ms early",
            k.run_at.as_millis() - at.as_millis()
        );
    }
    for (k, _) in keys {
        assert_eq!(count.get(k), Some(&1), "{k}");
    }
    assert_eq!(count.len(), keys.len());
}

#[tokio::test]
async fn hands_each_member_off_at_its_due_instant_once_and_removes_it() {
    let s = setup().await;
    let keys = keys(40, 300);
    index(&s, &keys).await;
    run_until_handed_off(&s, 1, &keys, Duration::ZERO).await;
    let far = SystemClock.now().add_millis(600_000);
    for (k, b) in &keys {
        let left = s
            .redis
            .hot_index()
            .due(ShardKey::new(k.run_at, *b), far, 100)
            .await
            .unwrap();
        assert!(left.iter().all(|(m, _)| m != k), "{k} still indexed");
    }
}

#[tokio::test]
async fn replicas_share_shards_without_handing_off_twice() {
    let s = setup().await;
    let keys = keys(60, 300);
    index(&s, &keys).await;
    run_until_handed_off(&s, 2, &keys, Duration::ZERO).await;
}

#[tokio::test]
async fn refused_keys_stay_and_are_offered_again() {
    let s = setup().await;
    s.recorder.refuse.store(3, Ordering::SeqCst);
    let keys = keys(10, 200);
    index(&s, &keys).await;
    run_until_handed_off(&s, 1, &keys, Duration::ZERO).await;
}

#[tokio::test]
async fn a_dead_holders_shard_is_resumed_when_its_lease_lapses() {
    let s = setup().await;
    let keys = keys(10, 200);
    index(&s, &keys).await;
    // A "dead" replica holds every shard these keys are in, and never renews.
    let dead = LeaseToken::random();
    let leases = s.redis.leases();
    for (k, b) in &keys {
        let name = format!("shard:{}", ShardKey::new(k.run_at, *b));
        let _ = leases
            .acquire(&name, &dead, Duration::from_secs(2))
            .await
            .unwrap();
    }
    run_until_handed_off(&s, 1, &keys, Duration::ZERO).await;
}

#[tokio::test]
async fn a_shard_redis_lost_is_read_from_the_database() {
    let s = setup().await;
    let keys = keys(20, 300);
    // Rows only: no hot-index member and no shard, as after Redis lost its data.
    let rows: Vec<NewOccurrence> = keys
        .iter()
        .map(|(k, b)| NewOccurrence {
            key: *k,
            timer_version: 1,
            bucket: *b,
        })
        .collect();
    s.db.store.insert_occurrences(&rows).await.unwrap();
    // They stay pending in the database (no executor claims them), yet go only once.
    run_until_handed_off(&s, 1, &keys, Duration::from_millis(500)).await;
}

#[tokio::test]
async fn stopping_releases_every_lease() {
    let s = setup().await;
    let sched = scheduler(&s);
    let (stop, run) = start(sched);
    let now = SystemClock.now();
    let shard = ShardKey::new(
        now,
        Bucket::of(TimerId::new(1).unwrap(), BucketCount::new(BUCKETS).unwrap()),
    );
    let name = format!("shard:{shard}");
    let other = LeaseToken::random();
    let leases = s.redis.leases();
    // Wait until the scheduler holds the current shard…
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while leases
        .acquire(&name, &other, Duration::from_secs(30))
        .await
        .unwrap()
    {
        leases.release(&name, &other).await.unwrap();
        assert!(
            tokio::time::Instant::now() < deadline,
            "scheduler never leased {shard}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    // …and free it at once on stop, not after the lease lapses.
    assert!(
        leases
            .acquire(&name, &other, Duration::from_secs(30))
            .await
            .unwrap()
    );
}
