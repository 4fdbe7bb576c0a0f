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

/// Records every key handed to it, with when, and when each call came; refuses the first
/// `refuse` calls.
#[derive(Default)]
pub(crate) struct Recorder {
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
    calls: Mutex<Vec<Timestamp>>,
    refuse: AtomicUsize,
}

#[async_trait]
impl Handoff for Recorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        self.calls.lock().unwrap().push(SystemClock.now());
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
    pub(crate) fn got(&self) -> Vec<(TaskKey, Timestamp)> {
        self.got.lock().unwrap().clone()
    }
}

pub(crate) struct Setup {
    pub(crate) db: PgFixture,
    pub(crate) redis: RedisFixture,
    pub(crate) recorder: Arc<Recorder>,
}

const BUCKETS: u32 = 4;

pub(crate) async fn setup() -> Setup {
    Setup {
        db: testkit::pg().await,
        redis: testkit::redis().await,
        recorder: Arc::default(),
    }
}

pub(crate) fn settings() -> SchedulerSettings {
    let mut s = SchedulerSettings::new(
        BucketCount::new(BUCKETS).unwrap(),
        Duration::from_secs(2),
        Duration::from_secs(1),
    );
    s.tick = Duration::from_millis(200);
    s.poll = Duration::from_millis(100);
    s.dispatch_ahead = AHEAD;
    // The hot-path tests use keys no executor claims: keep the sweeper off them.
    s.sweep_after = Duration::from_secs(600);
    s.misfire_threshold = Duration::from_secs(600);
    s
}

pub(crate) fn scheduler(s: &Setup) -> Arc<Scheduler> {
    scheduler_with(s, settings())
}

pub(crate) fn scheduler_with(s: &Setup, settings: SchedulerSettings) -> Arc<Scheduler> {
    Scheduler::new(
        s.db.store(),
        s.redis.hot_index(),
        s.redis.leases(),
        s.db.store(),
        s.recorder.clone(),
        Arc::new(SystemClock),
        settings,
    )
}

pub(crate) fn start(sched: Arc<Scheduler>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let run = tokio::spawn(sched.run(stop.clone(), Duration::from_secs(5)));
    (stop, run)
}

/// `n` keys due from `first_ms` after now on, 37 ms apart, spread over the buckets.
pub(crate) fn keys(n: i64, first_ms: i64) -> Vec<(TaskKey, Bucket)> {
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

pub(crate) async fn index(s: &Setup, keys: &[(TaskKey, Bucket)]) {
    let entries: Vec<HotEntry> = keys
        .iter()
        .map(|(k, b)| HotEntry::new(*k, k.run_at, *b))
        .collect();
    s.redis.hot_index().add(&entries).await.unwrap();
    // As the migrator leaves them: built, so the scheduler reads them from the index; the
    // next minute's too, as the migrator builds the lead window ahead (a retry indexed just
    // before a minute ends falls into the next one).
    let shards: Vec<ShardKey> = entries
        .iter()
        .flat_map(|e| {
            let next = ShardKey::new(e.shard.minute_end(), e.shard.bucket);
            [e.shard, next]
        })
        .collect();
    s.redis.hot_index().touch(&shards).await.unwrap();
}

/// Writes `keys` as `pending` rows, first attempts not yet fired.
async fn rows(s: &Setup, keys: &[(TaskKey, Bucket)]) {
    let rows: Vec<NewOccurrence> = keys
        .iter()
        .map(|(k, b)| NewOccurrence {
            key: *k,
            timer_version: 1,
            bucket: *b,
            due: None,
        })
        .collect();
    s.db.store.insert_occurrences(&rows).await.unwrap();
}

pub(crate) async fn wait_for_all(s: &Setup, n: usize) {
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

/// How far ahead of due the tests' schedulers hand keys off.
const AHEAD: Duration = Duration::from_millis(50);

/// Each key exactly once, never more than [`AHEAD`] before its due instant.
fn assert_once_on_time(got: &[(TaskKey, Timestamp)], keys: &[(TaskKey, Bucket)]) {
    let mut count: HashMap<TaskKey, usize> = HashMap::new();
    for (k, at) in got {
        *count.entry(*k).or_default() += 1;
        let early = k.run_at.as_millis() - at.as_millis();
        assert!(
            early <= AHEAD.as_millis() as i64,
            "{k} handed off {early} ms early"
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
    // Handed off ahead (so executors claim before the due instant), but within AHEAD.
    let early = s
        .recorder
        .got()
        .iter()
        .filter(|(k, at)| *at < k.run_at)
        .count();
    assert!(early > 0, "no key was handed off ahead of its due instant");
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

/// Keys due a few milliseconds apart (steady load spread over the second) travel together,
/// one hand-off per `handoff_every`, not one per due millisecond: each hand-off is a gRPC
/// call, a Redis removal and a claim statement.
#[tokio::test]
async fn keys_due_close_together_share_a_hand_off() {
    let s = setup().await;
    // 240 keys 2 ms apart over the 4 buckets: 60 per shard over ~480 ms.
    let now = SystemClock.now();
    let keys: Vec<(TaskKey, Bucket)> = (0..240)
        .map(|i| {
            let key = TaskKey::new(
                TimerId::new(5_000 + i).unwrap(),
                now.add_millis(400 + i * 2),
            );
            (
                key,
                Bucket::of(key.timer_id, BucketCount::new(BUCKETS).unwrap()),
            )
        })
        .collect();
    index(&s, &keys).await;
    let mut settings = settings();
    settings.handoff_every = Duration::from_millis(25);
    let (stop, run) = start(scheduler_with(&s, settings));
    wait_for_all(&s, keys.len()).await;
    stop.cancel();
    run.await.unwrap();
    assert_once_on_time(&s.recorder.got(), &keys);
    // ~480 ms / 25 ms, the four shards' keys of each tick in one call (they hand off on a
    // shared grid and the calls merge), plus the poll rounds and the ticks a loaded machine
    // lets slip past a merge (30 seen under `make test`). Unmerged, each shard would make a
    // call a tick (~76); off the grid, one per due instant (~240).
    let calls = s.recorder.calls.lock().unwrap().len();
    println!("{calls} hand-off calls for {} keys", keys.len());
    assert!(
        calls <= 2 * (480 / 25),
        "{calls} hand-offs for {} keys",
        keys.len()
    );
}

/// Executors free room as they record outcomes: a refused key is offered again within
/// `refused_retry`, not after the next poll.
#[tokio::test]
async fn refused_keys_are_offered_again_without_waiting_for_the_next_poll() {
    let s = setup().await;
    s.recorder.refuse.store(4, Ordering::SeqCst);
    let keys = keys(1, 200);
    index(&s, &keys).await;
    let mut settings = settings();
    settings.poll = Duration::from_secs(1);
    let (stop, run) = start(scheduler_with(&s, settings));
    wait_for_all(&s, 1).await;
    stop.cancel();
    run.await.unwrap();
    let calls = s.recorder.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 5, "four refused, then accepted");
    let longest = calls
        .windows(2)
        .map(|w| w[1].as_millis() - w[0].as_millis())
        .max()
        .unwrap();
    assert!(
        longest < 500,
        "{longest} ms between offers of a refused key (refused_retry is 20 ms, poll 1 s)"
    );
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
    rows(&s, &keys).await;
    // They stay pending in the database (no executor claims them), yet go only once.
    run_until_handed_off(&s, 1, &keys, Duration::from_millis(500)).await;
}

/// Redis lost the shards while first attempts were in flight under their run leases (the
/// rows still `pending`): what was due before the shards were read from the database is
/// left to the migrator's rebuild and the sweeper, not offered a second time at once.
#[tokio::test]
async fn a_lost_shards_rows_due_before_it_was_lost_are_not_offered_again() {
    let s = setup().await;
    let before: Vec<(TaskKey, Bucket)> = keys(10, -900)
        .into_iter()
        .map(|(k, _)| {
            let key = TaskKey::new(TimerId::new(k.timer_id.get() + 500).unwrap(), k.run_at);
            (
                key,
                Bucket::of(key.timer_id, BucketCount::new(BUCKETS).unwrap()),
            )
        })
        .collect();
    let after = keys(10, 300);
    rows(&s, &before).await;
    rows(&s, &after).await;
    // The sweeper is off here (`sweep_after` 600 s): only the shard reads could offer them.
    run_until_handed_off(&s, 1, &after, Duration::from_millis(500)).await;
}

/// Redis lost the shards, then a writer (a create, a retry) added a member to each: the
/// shards exist again but nothing built them, so they are read from the database, where
/// every row is.
#[tokio::test]
async fn a_shard_a_writer_recreated_is_still_read_from_the_database() {
    let s = setup().await;
    let keys = keys(20, 300);
    rows(&s, &keys).await;
    let written: Vec<HotEntry> = keys
        .iter()
        .step_by(5)
        .map(|(k, b)| HotEntry::new(*k, k.run_at, *b))
        .collect();
    s.redis.hot_index().add(&written).await.unwrap();
    run_until_handed_off(&s, 1, &keys, Duration::from_millis(500)).await;
}

/// A peer with a stale view of the group takes this replica's shard leases and gives them
/// up again (as at start-up, before its first heartbeat shows the new member). The replica
/// finds out at its next renewal and works the shards again at once, not at its next tick.
#[tokio::test]
async fn a_shard_lease_lost_to_a_peer_is_taken_back_at_once() {
    let s = setup().await;
    // The keys stay within one minute: only ticks lease a new minute's shards, and they are
    // ten seconds apart here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while SystemClock.now().as_millis() % 60_000 > 50_000 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys = keys(60, 1_000);
    index(&s, &keys).await;
    let mut set = settings();
    set.tick = Duration::from_secs(10);
    set.lease_ttl = Duration::from_millis(900);
    let (stop, run) = start(scheduler_with(&s, set));
    wait_for_all(&s, 1).await;
    let peer = LeaseToken::random();
    let leases = s.redis.leases();
    let mut names: Vec<String> = keys
        .iter()
        .map(|(k, b)| format!("shard:{}", ShardKey::new(k.run_at, *b)))
        .collect();
    names.sort();
    names.dedup();
    for name in &names {
        assert!(
            leases
                .take(name, &peer, Duration::from_secs(30), &[])
                .await
                .unwrap()
        );
        assert!(leases.release(name, &peer).await.unwrap());
    }
    wait_for_all(&s, keys.len()).await;
    stop.cancel();
    run.await.unwrap();
    let got = s.recorder.got();
    assert_once_on_time(&got, &keys);
    let worst = got
        .iter()
        .map(|(k, at)| at.as_millis() - k.run_at.as_millis())
        .max()
        .unwrap();
    assert!(
        worst <= 500,
        "a key went {worst} ms late after the leases were lost"
    );
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

/// Accepts keys and, like an executor whose callback failed at once, puts each back into the
/// hot index as a retry 400 ms later, before the hand-off even returns.
struct FailsOnceRecorder {
    index: Arc<dyn chime_storage::HotIndex>,
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
}

#[async_trait]
impl Handoff for FailsOnceRecorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let now = SystemClock.now();
        let mut got = self.got.lock().unwrap().clone();
        let retries: Vec<HotEntry> = keys
            .iter()
            .filter(|k| !got.iter().any(|(g, _)| g == *k))
            .map(|k| {
                HotEntry::new(
                    *k,
                    now.add_millis(400),
                    Bucket::of(k.timer_id, BucketCount::new(BUCKETS).unwrap()),
                )
            })
            .collect();
        self.index.add(&retries).await.unwrap();
        got.extend(keys.iter().map(|k| (*k, now)));
        *self.got.lock().unwrap() = got;
        keys.len()
    }
}

#[tokio::test]
async fn a_retry_indexed_during_the_hand_off_is_not_removed() {
    let s = setup().await;
    let keys = keys(5, 300);
    index(&s, &keys).await;
    let recorder = Arc::new(FailsOnceRecorder {
        index: s.redis.hot_index(),
        got: Mutex::new(Vec::new()),
    });
    let sched = Scheduler::new(
        s.db.store(),
        s.redis.hot_index(),
        s.redis.leases(),
        s.db.store(),
        recorder.clone(),
        Arc::new(SystemClock),
        settings(),
    );
    let (stop, run) = start(sched);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while recorder.got.lock().unwrap().len() < 2 * keys.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "retries lost: {:?}",
            recorder.got.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    let got = recorder.got.lock().unwrap().clone();
    for (k, _) in &keys {
        let times: Vec<i64> = got
            .iter()
            .filter(|(g, _)| g == k)
            .map(|(_, t)| t.as_millis())
            .collect();
        assert_eq!(times.len(), 2, "{k}: first attempt and its retry");
        assert!(
            times[1] - times[0] >= 400 - AHEAD.as_millis() as i64,
            "the retry waited for its due time (less the hand-off's head start)"
        );
    }
}
