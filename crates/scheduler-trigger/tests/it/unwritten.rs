//! Unwritten runs ([`chime_domain::UnwrittenRun`]) the hot index does not bring, against
//! real Redis and PostgreSQL: the sweeper finds those lost on their way by their missing
//! rows, and a shard read from the database computes them from their timers.

use std::time::Duration;

use chime_domain::{
    BucketCount, Clock, DeliveryMode, MisfirePolicy, NewTimer, OccurrenceStatus, ScheduleInput,
    ShardKey, SystemClock, TaskKey, Timer, Timestamp,
};
use chime_storage::{OccurrenceStore, TimerStore};

use crate::scheduler::{Setup, scheduler_with, settings, setup, start};

async fn unwritten_timer(s: &Setup, name: &str, every: &str) -> Timer {
    let now = SystemClock.now();
    let schedule = ScheduleInput {
        every: Some(every.into()),
        ..Default::default()
    };
    let t =
        s.db.store
            .create_timer(
                NewTimer {
                    spec: chime_domain::TimerSpec {
                        misfire: MisfirePolicy::FireOnce,
                        delivery: DeliveryMode::AtLeastOnce,
                        ..chime_storage::contract::spec_with("ops", name, &schedule, now)
                    },
                    enabled: true,
                    runs_unwritten: true,
                },
                chime_domain::Horizon::DEFAULT,
            )
            .await
            .unwrap()
            .timer;
    assert!(!t.written_ahead);
    t
}

/// Every shard (of the store's 16 buckets) of the next few minutes marked built, empty: as if the hot index lost
/// every member of them and kept the markers.
async fn built_and_empty(s: &Setup) {
    let now = SystemClock.now();
    let mut shards = Vec::new();
    for minute in -1..4 {
        for bucket in BucketCount::DEFAULT.all() {
            shards.push(ShardKey::new(now.add_millis(minute * 60_000), bucket));
        }
    }
    s.redis.hot_index().touch(&shards).await.unwrap();
}

async fn wait_until<F, Fut>(what: &str, secs: u64, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The hot index holds none of two unwritten timers' runs (lost with Redis's last writes,
/// say). The sweeper's check finds them `sweep_after` late: the every-5-s timer's are
/// handed off (its next run is not due yet), except one whose lease an executor holds,
/// which is looked at until its lease is freed (and then, its next run due, written
/// skipped); the every-second timer's are written skipped, their next runs due already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_finds_unwritten_runs_lost_on_their_way() {
    let s = setup().await;
    built_and_empty(&s).await;
    let slow = unwritten_timer(&s, "every-5s", "5s").await;
    let fast = unwritten_timer(&s, "every-1s", "1s").await;
    let leases = s.redis.hot_index().run_leases().unwrap();
    let first_slow = slow
        .spec
        .schedule
        .next_runs(SystemClock.now(), 1)
        .pop()
        .unwrap();
    let held = TaskKey::new(slow.id, first_slow);
    // An executor has this one, its callback still running.
    assert_eq!(
        leases
            .take_runs(&[held], Duration::from_secs(60))
            .await
            .unwrap(),
        vec![true]
    );
    // The store's bucket count, so the sweeper reads every timer's bucket.
    let mut settings = settings();
    settings.buckets = BucketCount::DEFAULT;
    settings.sweep_after = Duration::from_secs(2);
    settings.sweep_interval = Duration::from_millis(500);
    let (stop, run) = start(scheduler_with(&s, settings));
    let begun = SystemClock.now();
    // Two of the slow timer's runs come due.
    wait_until("two slow runs handed off", 20, || async {
        s.recorder
            .got()
            .iter()
            .filter(|(k, _)| k.timer_id == slow.id)
            .count()
            >= 1
            && SystemClock.now() > first_slow.add_millis(8_000)
    })
    .await;
    let got = s.recorder.got();
    let slow_got: Vec<&(TaskKey, Timestamp)> =
        got.iter().filter(|(k, _)| k.timer_id == slow.id).collect();
    assert!(
        slow_got.iter().all(|(k, _)| *k != held),
        "a held run is not offered: {slow_got:?}"
    );
    for (k, at) in &slow_got {
        let late = at.as_millis() - k.run_at.as_millis();
        assert!((2_000..4_000).contains(&late), "{k} offered {late} ms late");
    }
    // Its executor is gone without writing it: once its lease is freed it is looked at
    // again, and by now its next run is due already, so it is written skipped.
    leases.free_runs(&[held]).await.unwrap();
    wait_until("the held run written once free", 10, || async {
        s.db.store
            .get_occurrence(held)
            .await
            .unwrap()
            .is_some_and(|o| o.status == OccurrenceStatus::Skipped)
    })
    .await;
    assert!(s.recorder.got().iter().all(|(k, _)| *k != held));
    // The fast timer's runs were overtaken by the time they were found: written skipped.
    let fast_runs: Vec<TaskKey> = fast
        .spec
        .schedule
        .occurrences_between(
            begun,
            SystemClock.now().saturating_sub(Duration::from_secs(3)),
        )
        .map(|at| TaskKey::new(fast.id, at))
        .collect();
    assert!(fast_runs.len() >= 3, "{fast_runs:?}");
    for k in &fast_runs {
        let row = s.db.store.get_occurrence(*k).await.unwrap();
        let row = row.unwrap_or_else(|| panic!("{k}: no row"));
        assert_eq!(row.status, OccurrenceStatus::Skipped, "{row:?}");
        assert!(row.error.as_deref().unwrap().starts_with("misfired"));
    }
    assert!(
        s.recorder.got().iter().all(|(k, _)| k.timer_id != fast.id),
        "an overtaken run is not offered"
    );
    stop.cancel();
    run.await.unwrap();
}

/// No migrator built the shards (Redis lost them): the schedulers read them from the
/// database, and an unwritten timer's runs, which have no rows there, come from its plan,
/// on time, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_read_from_the_database_has_its_unwritten_runs() {
    let s = setup().await;
    let t = unwritten_timer(&s, "fallback", "1s").await;
    let mut settings = settings();
    settings.buckets = BucketCount::DEFAULT;
    let (stop, run) = start(scheduler_with(&s, settings));
    let from = SystemClock.now().add_millis(1_000);
    let to = from.add_millis(4_000);
    wait_until("four seconds of runs", 15, || async {
        SystemClock.now() > to.add_millis(500)
    })
    .await;
    stop.cancel();
    run.await.unwrap();
    let expected: Vec<TaskKey> = t
        .spec
        .schedule
        .occurrences_between(from, to)
        .map(|at| TaskKey::new(t.id, at))
        .collect();
    let got = s.recorder.got();
    for k in &expected {
        let offers: Vec<&(TaskKey, Timestamp)> = got.iter().filter(|(g, _)| g == k).collect();
        assert_eq!(offers.len(), 1, "{k}: {offers:?}");
        let early = k.run_at.as_millis() - offers[0].1.as_millis();
        assert!((0..=500).contains(&early), "{k} offered {early} ms ahead");
    }
}
