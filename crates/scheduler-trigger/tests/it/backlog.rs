//! A backlog delays only itself: with executors taking a few keys a call, keys falling due
//! while a backlog drains are handed off on time, ahead of it (real Redis and PostgreSQL).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Clock, ShardKey, SystemClock, TaskKey, TimerId, Timestamp,
};
use chime_scheduler::{Handoff, Scheduler, SchedulerSettings};
use chime_storage::HotEntry;
use chime_storage::testkit;
use tokio_util::sync::CancellationToken;

const BUCKETS: u32 = 4;

/// A saturated executor fleet: it refuses every offer until `opens`; then each call takes
/// `room` keys from the front and lasts `takes` (a gRPC round trip to executors that are
/// busy), and every key taken is noted with when, and how many keys were offered.
struct Saturated {
    opens: Timestamp,
    room: usize,
    takes: Duration,
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
    offered: Mutex<usize>,
}

#[async_trait]
impl Handoff for Saturated {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        if SystemClock.now() < self.opens {
            return 0;
        }
        tokio::time::sleep(self.takes).await;
        *self.offered.lock().unwrap() += keys.len();
        let n = keys.len().min(self.room);
        let now = SystemClock.now();
        self.got
            .lock()
            .unwrap()
            .extend(keys[..n].iter().map(|k| (*k, now)));
        n
    }
}

fn key(id: i64, due: Timestamp) -> (TaskKey, Bucket) {
    let key = TaskKey::new(TimerId::new(id).unwrap(), due);
    (
        key,
        Bucket::of(key.timer_id, BucketCount::new(BUCKETS).unwrap()),
    )
}

/// The keys' shards in the hot index, built as the migrator leaves them.
async fn built(redis: &testkit::RedisFixture, keys: impl Iterator<Item = &(TaskKey, Bucket)>) {
    let entries: Vec<HotEntry> = keys.map(|(k, b)| HotEntry::new(*k, k.run_at, *b)).collect();
    let index = redis.hot_index();
    index.add(&entries).await.unwrap();
    let shards: Vec<ShardKey> = entries.iter().map(|e| e.shard).collect();
    index.touch(&shards).await.unwrap();
}

/// Quick ticks; the sweeper and misfires kept off the keys these tests hand off.
fn settings() -> SchedulerSettings {
    let mut settings = SchedulerSettings::new(
        BucketCount::new(BUCKETS).unwrap(),
        Duration::from_secs(2),
        Duration::from_secs(1),
    );
    settings.tick = Duration::from_millis(100);
    settings.sweep_after = Duration::from_secs(600);
    settings.misfire_threshold = Duration::from_secs(600);
    settings
}

fn start(
    db: &testkit::PgFixture,
    redis: &testkit::RedisFixture,
    executors: Arc<dyn Handoff>,
    settings: SchedulerSettings,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let scheduler = Scheduler::new(
        db.store(),
        redis.hot_index(),
        redis.leases(),
        db.store(),
        executors,
        Arc::new(SystemClock),
        settings,
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(scheduler.run(stop.clone(), Duration::from_secs(5)));
    (stop, run)
}

/// Starts a scheduler handing off to a [`Saturated`] fleet that opens at `opens` and then
/// takes 5 keys a 15-ms call; once it took `all` keys, stops the scheduler and returns what
/// was taken, and when, and how many keys were offered.
async fn handed_off_slowly(
    db: &testkit::PgFixture,
    redis: &testkit::RedisFixture,
    opens: Timestamp,
    all: usize,
) -> (Vec<(TaskKey, Timestamp)>, usize) {
    let executors = Arc::new(Saturated {
        opens,
        room: 5,
        takes: Duration::from_millis(15),
        got: Mutex::new(Vec::new()),
        offered: Mutex::new(0),
    });
    let mut settings = settings();
    settings.poll = Duration::from_millis(100);
    let (stop, run) = start(db, redis, executors.clone(), settings);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while executors.got.lock().unwrap().len() < all {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {all} handed off",
            executors.got.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    let offered = *executors.offered.lock().unwrap();
    (executors.got.lock().unwrap().clone(), offered)
}

/// Asserts each of `keys` was handed off on time: up to `dispatch_ahead` before due; a call
/// in progress (15 ms) and the hand-off grid may put it a little after.
fn assert_on_time(got: &[(TaskKey, Timestamp)], keys: &[(TaskKey, Bucket)], beside: &str) {
    for (k, _) in keys {
        let (_, at) = got.iter().find(|(g, _)| g == k).unwrap();
        let late = at.as_millis() - k.run_at.as_millis();
        assert!(late <= 50, "{k} handed off {late} ms after due, {beside}");
    }
}

/// When the last key of a timer numbered below `id` was taken.
fn last_taken_below(got: &[(TaskKey, Timestamp)], id: i64) -> Timestamp {
    got.iter()
        .filter(|(k, _)| k.timer_id.get() < id)
        .map(|(_, at)| *at)
        .max()
        .unwrap()
}

#[tokio::test]
async fn keys_due_while_a_backlog_drains_are_handed_off_on_time() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    // A backlog: 400 keys two seconds overdue (within the misfire threshold).
    let backlog: Vec<_> = (0..400)
        .map(|i| key(1_000 + i, now.add_millis(-2_000 + i)))
        .collect();
    // Keys on time, due from 400 ms on, while the backlog is still draining.
    let on_time: Vec<_> = (0..12)
        .map(|i| key(5_000 + i, now.add_millis(400 + i * 50)))
        .collect();
    built(&redis, backlog.iter().chain(&on_time)).await;

    let (got, _) = handed_off_slowly(&db, &redis, now, backlog.len() + on_time.len()).await;
    let backlog_done = last_taken_below(&got, 5_000);
    let last_due = on_time.iter().map(|(k, _)| k.run_at).max().unwrap();
    assert!(
        backlog_done > last_due,
        "the backlog drained by {} ms, before the last key on time was due at {} ms: no \
         contention to test",
        backlog_done.as_millis() - now.as_millis(),
        last_due.as_millis() - now.as_millis()
    );
    assert_on_time(&got, &on_time, "while the backlog drained");
}

/// Refuses every offer until `until`, counting the calls; takes everything after.
struct FullUntil {
    until: Timestamp,
    calls: Mutex<usize>,
    got: Mutex<usize>,
}

#[async_trait]
impl Handoff for FullUntil {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        if SystemClock.now() < self.until {
            *self.calls.lock().unwrap() += 1;
            return 0;
        }
        *self.got.lock().unwrap() += keys.len();
        keys.len()
    }
}

#[tokio::test]
async fn more_keys_on_time_than_a_batch_do_not_flood_full_executors() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    // Four batches' worth of keys on time in each shard, due in 200 ms.
    let keys: Vec<_> = (0..160)
        .map(|i| key(1_000 + i, now.add_millis(200)))
        .collect();
    built(&redis, keys.iter()).await;
    // Full for 800 ms: past the keys' due and their quarter second on time.
    let executors = Arc::new(FullUntil {
        until: now.add_millis(800),
        calls: Mutex::new(0),
        got: Mutex::new(0),
    });
    let mut settings = settings();
    settings.batch = 10;
    let (stop, run) = start(&db, &redis, executors.clone(), settings);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while *executors.got.lock().unwrap() < keys.len() {
        assert!(tokio::time::Instant::now() < deadline, "not all handed off");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    // Each shard backs off (20 ms, doubling, up to the 200-ms poll): a few dozen offers in
    // all, not one per Redis round trip.
    let refused = *executors.calls.lock().unwrap();
    assert!(
        refused <= 100,
        "{refused} offers to full executors in 800 ms"
    );
}

#[tokio::test]
async fn keys_refused_beside_a_burst_stay_ahead_of_it_once_late() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    // A burst due at one instant, and keys due just after it: both on time at first.
    let burst_at = now.add_millis(500);
    let burst: Vec<_> = (0..400).map(|i| key(1_000 + i, burst_at)).collect();
    let after: Vec<_> = (0..12)
        .map(|i| key(5_000 + i, burst_at.add_millis(50 + i * 10)))
        .collect();
    built(&redis, burst.iter().chain(&after)).await;
    // The executors are full until the keys after the burst are over 250 ms late (as while
    // they fire the burst's first keys), then drain it slowly.
    let opens = burst_at.add_millis(700);
    let (got, _) = handed_off_slowly(&db, &redis, opens, burst.len() + after.len()).await;
    let burst_done = last_taken_below(&got, 5_000);
    assert!(
        burst_done.as_millis() - opens.as_millis() > 500,
        "the burst drained in {} ms: no contention to test",
        burst_done.as_millis() - opens.as_millis()
    );
    for (k, _) in &after {
        let (_, at) = got.iter().find(|(g, _)| g == k).unwrap();
        let waited = at.as_millis() - opens.as_millis();
        // The first calls after the executors open (15 ms each; refused shards back off
        // for up to a poll), not behind the burst.
        assert!(
            waited <= 300,
            "{k} handed off {waited} ms after the executors opened, behind the burst \
             (drained after {} ms)",
            burst_done.as_millis() - opens.as_millis()
        );
    }
}

#[tokio::test]
async fn keys_due_just_after_a_burst_are_handed_off_ahead_of_it_while_it_is_on_time() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    // A burst due at one instant and keys due just after it, within its first 250 ms,
    // before a burst that outlasts them would count as late.
    let burst_at = now.add_millis(600);
    let burst: Vec<_> = (0..400).map(|i| key(1_000 + i, burst_at)).collect();
    let after: Vec<_> = (0..12)
        .map(|i| key(5_000 + i, burst_at.add_millis(10 + i * 15)))
        .collect();
    built(&redis, burst.iter().chain(&after)).await;
    // Open from the start, but a few keys a call: the burst takes over a second.
    let (got, _) = handed_off_slowly(&db, &redis, now, burst.len() + after.len()).await;
    let burst_done = last_taken_below(&got, 5_000);
    let last_due = after.iter().map(|(k, _)| k.run_at).max().unwrap();
    assert!(
        burst_done > last_due.add_millis(300),
        "the burst was handed off {} ms after due: no contention to test",
        burst_done.as_millis() - burst_at.as_millis()
    );
    assert_on_time(&got, &after, "behind the burst's keys");
}

#[tokio::test]
async fn a_backlog_executors_take_a_few_keys_of_at_a_time_is_offered_a_few_at_a_time() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    let backlog: Vec<_> = (0..800)
        .map(|i| key(1_000 + i, now.add_millis(-2_000 + i)))
        .collect();
    built(&redis, backlog.iter()).await;
    let (_, offered) = handed_off_slowly(&db, &redis, now, backlog.len()).await;
    // Offering each shard's whole backlog again after every refusal (each time taken out of
    // Redis, sent, and put back) offered ~30 times the keys here; a window of at least 16
    // keys ~5 times (3,892-4,543); of at least 4, ~3.3 times (2,655-2,677).
    assert!(
        offered <= backlog.len() * 17 / 4,
        "{offered} keys offered to hand off {}",
        backlog.len()
    );
}

#[tokio::test]
async fn lag_is_how_late_the_oldest_key_not_handed_off_is() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let now = SystemClock.now();
    // Keys two seconds overdue, which executors refuse for three seconds.
    let keys: Vec<_> = (0..20)
        .map(|i| key(1_000 + i, now.add_millis(-2_000)))
        .collect();
    built(&redis, keys.iter()).await;
    let executors = Arc::new(FullUntil {
        until: now.add_millis(3_000),
        calls: Mutex::new(0),
        got: Mutex::new(0),
    });
    let scheduler = Scheduler::new(
        db.store(),
        redis.hot_index(),
        redis.leases(),
        db.store(),
        executors.clone(),
        Arc::new(SystemClock),
        settings(),
    );
    assert_eq!(scheduler.lag(), Duration::ZERO, "nothing read yet");
    let stop = CancellationToken::new();
    let run = tokio::spawn(scheduler.clone().run(stop.clone(), Duration::from_secs(5)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // While refused, the lag is the keys' lateness and grows with it.
    while scheduler.lag() < Duration::from_millis(2_500) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lag {:?} while keys 2 s late were refused",
            scheduler.lag()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*executors.got.lock().unwrap(), 0, "taken while full");
    // Once taken, nothing is behind.
    while *executors.got.lock().unwrap() < keys.len() || scheduler.lag() > Duration::ZERO {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} taken, lag {:?}",
            executors.got.lock().unwrap(),
            scheduler.lag()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
}
