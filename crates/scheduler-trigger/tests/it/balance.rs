//! Scheduler replicas in a group over real Redis: they split the buckets evenly, and when one
//! leaves the others take its buckets while every key is still handed off once, on time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{Bucket, BucketCount, Clock, SystemClock, TaskKey, TimerId, Timestamp};
use chime_runtime::{Roster, RosterSettings};
use chime_scheduler::{GROUP, Handoff, Scheduler, SchedulerSettings};
use chime_storage::HotEntry;
use chime_storage::testkit::{self, PgFixture, RedisFixture};
use tokio_util::sync::CancellationToken;

const BUCKETS: u32 = 16;

#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
}

#[async_trait]
impl Handoff for Recorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let now = SystemClock.now();
        self.got
            .lock()
            .unwrap()
            .extend(keys.iter().map(|k| (*k, now)));
        keys.len()
    }
}

struct Replica {
    scheduler: Arc<Scheduler>,
    stop: CancellationToken,
    run: tokio::task::JoinHandle<()>,
}

fn start(db: &PgFixture, redis: &RedisFixture, recorder: &Arc<Recorder>) -> Replica {
    let buckets = BucketCount::new(BUCKETS).unwrap();
    let mut settings =
        SchedulerSettings::new(buckets, Duration::from_secs(3), Duration::from_secs(1));
    settings.tick = Duration::from_millis(200);
    settings.poll = Duration::from_millis(100);
    settings.dispatch_ahead = Duration::from_millis(50);
    // Keys no executor claims: keep the sweeper off them.
    settings.sweep_after = Duration::from_secs(600);
    settings.misfire_threshold = Duration::from_secs(600);
    let scheduler = Scheduler::new(
        db.store(),
        redis.hot_index(),
        redis.leases(),
        db.store(),
        recorder.clone(),
        Arc::new(SystemClock),
        settings,
    );
    scheduler.join(Roster::new(
        redis.membership(),
        GROUP,
        scheduler.token().clone(),
        buckets,
        RosterSettings {
            heartbeat: Duration::from_millis(100),
            ttl: Duration::from_millis(500),
        },
        Arc::new(SystemClock),
    ));
    let stop = CancellationToken::new();
    let run = tokio::spawn(scheduler.clone().run(stop.clone(), Duration::from_secs(5)));
    Replica {
        scheduler,
        stop,
        run,
    }
}

fn owned(r: &Replica) -> (usize, usize) {
    let report = r.scheduler.ownership_report();
    (
        report["owned"].as_u64().unwrap() as usize,
        report["members"].as_array().unwrap().len(),
    )
}

/// Waits until every replica sees `n` members and owns its share.
async fn until_balanced(replicas: &[&Replica], n: usize) -> Vec<usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let views: Vec<(usize, usize)> = replicas.iter().map(|r| owned(r)).collect();
        let shares: Vec<usize> = views.iter().map(|(o, _)| *o).collect();
        if views.iter().all(|(_, m)| *m == n) && shares.iter().sum::<usize>() == BUCKETS as usize {
            return shares;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not balanced over {n}: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_buckets_and_take_over_from_one_that_leaves() {
    let db = testkit::pg().await;
    let redis = testkit::redis().await;
    let recorder = Arc::new(Recorder::default());
    // Keys due over the next 8 s, in every bucket.
    let now = SystemClock.now();
    let keys: Vec<(TaskKey, Bucket)> = (0..400)
        .map(|i| {
            let key = TaskKey::new(
                TimerId::new(1_000 + i).unwrap(),
                now.add_millis(1_500 + i * 20),
            );
            (
                key,
                Bucket::of(key.timer_id, BucketCount::new(BUCKETS).unwrap()),
            )
        })
        .collect();
    let entries: Vec<HotEntry> = keys
        .iter()
        .map(|(k, b)| HotEntry::new(*k, k.run_at, *b))
        .collect();
    redis.hot_index().add(&entries).await.unwrap();
    let shards: Vec<_> = entries.iter().map(|e| e.shard).collect();
    redis.hot_index().touch(&shards).await.unwrap();

    let a = start(&db, &redis, &recorder);
    let b = start(&db, &redis, &recorder);
    let c = start(&db, &redis, &recorder);
    let shares = until_balanced(&[&a, &b, &c], 3).await;
    assert!(shares.iter().all(|s| (5..=6).contains(s)), "{shares:?}");

    // One leaves mid-run: the others take its buckets at once.
    c.stop.cancel();
    c.run.await.unwrap();
    let shares = until_balanced(&[&a, &b], 2).await;
    assert_eq!(shares, vec![8, 8]);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while recorder.got.lock().unwrap().len() < keys.len() {
        assert!(tokio::time::Instant::now() < deadline, "not all handed off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for r in [a, b] {
        r.stop.cancel();
        r.run.await.unwrap();
    }
    let got = recorder.got.lock().unwrap().clone();
    let mut count: HashMap<TaskKey, usize> = HashMap::new();
    for (k, at) in &got {
        *count.entry(*k).or_default() += 1;
        assert!(
            at.as_millis() >= k.run_at.as_millis() - 50,
            "{k} handed off early"
        );
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handed off twice: {twice:?}");
    assert_eq!(count.len(), keys.len());
}
