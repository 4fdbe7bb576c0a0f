//! The scheduler's waits run on its injected clock: a manual clock moved by hours drives
//! ticks, sweeps and due instants without that time passing. With tokio's timer in their
//! place these tests wait the real hour and fail at their deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Clock, ManualClock, NewOccurrence, NewTimer, ScheduleInput, SystemClock,
    TaskKey, Timer, Timestamp,
};
use chime_scheduler::{Handoff, Scheduler, SchedulerSettings};
use chime_storage::memory::{MemoryHotIndex, MemoryLeases};
use chime_storage::testkit::{self, SqliteFixture};
use chime_storage::{HotEntry, HotIndex, OccurrenceStore, TimerStore};
use tokio_util::sync::CancellationToken;

const HOUR: Duration = Duration::from_secs(3600);

/// Records each key handed to it with the manual clock's reading at the time.
struct Recorder {
    clock: ManualClock,
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
}

#[async_trait]
impl Handoff for Recorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let now = self.clock.now();
        let mut got = self.got.lock().unwrap();
        got.extend(keys.iter().map(|k| (*k, now)));
        keys.len()
    }
}

struct Setup {
    db: SqliteFixture,
    clock: ManualClock,
    index: Arc<dyn HotIndex>,
    recorder: Arc<Recorder>,
    scheduler: Arc<Scheduler>,
    stop: CancellationToken,
}

/// A scheduler on a manual clock that starts one second into a minute, its ticks, polls
/// and sweeps an hour apart.
async fn setup() -> Setup {
    let minute = SystemClock.now().as_millis() / 60_000 * 60_000;
    let clock = ManualClock::new(Timestamp::from_millis(minute + 1_000));
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let db = testkit::sqlite().await;
    let index: Arc<dyn HotIndex> = Arc::new(MemoryHotIndex::new(shared.clone(), HOUR));
    let recorder = Arc::new(Recorder {
        clock: clock.clone(),
        got: Mutex::default(),
    });
    let mut settings = SchedulerSettings::new(BucketCount::new(1).unwrap(), HOUR * 3, HOUR);
    settings.tick = HOUR;
    settings.poll = HOUR;
    settings.lookahead = Duration::from_secs(50);
    settings.dispatch_ahead = Duration::from_millis(50);
    settings.sweep_interval = HOUR;
    settings.sweep_after = Duration::from_secs(2);
    settings.misfire_threshold = HOUR * 24 * 30;
    let scheduler = Scheduler::new(
        db.store(),
        index.clone(),
        Arc::new(MemoryLeases::new(shared.clone())),
        db.store(),
        recorder.clone(),
        shared,
        settings,
    );
    Setup {
        db,
        clock,
        index,
        recorder,
        scheduler,
        stop: CancellationToken::new(),
    }
}

impl Setup {
    /// A timer whose own schedule stays out of the way (one shot a year ahead).
    async fn timer(&self) -> Timer {
        let now = self.clock.now();
        let once = ScheduleInput {
            at: Some(now.add_millis(365 * 86_400_000).to_rfc3339()),
            ..Default::default()
        };
        let spec = chime_storage::contract::spec_with("ops", "t", &once, now);
        let new = NewTimer {
            spec,
            enabled: true,
            runs_unwritten: false,
        };
        self.db
            .store
            .create_timer(new, chime_domain::Horizon::DEFAULT)
            .await
            .unwrap()
            .timer
    }

    /// A pending occurrence of `t` at `at`, in the database only.
    async fn occurrence(&self, t: &Timer, at: Timestamp) -> TaskKey {
        let key = TaskKey::new(t.id, at);
        let row = NewOccurrence {
            key,
            timer_version: t.version,
            bucket: t.bucket,
            due: None,
        };
        self.db.store.insert_occurrences(&[row]).await.unwrap();
        key
    }

    fn handed_off(&self, key: TaskKey) -> Option<Timestamp> {
        let got = self.recorder.got.lock().unwrap();
        got.iter().find(|(k, _)| *k == key).map(|(_, at)| *at)
    }

    fn start(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(
            self.scheduler
                .clone()
                .run(self.stop.clone(), Duration::from_secs(5)),
        )
    }

    async fn stop(&self, run: tokio::task::JoinHandle<()>) {
        self.stop.cancel();
        run.await.unwrap();
    }

    /// Moves the clock by `step` until `key` is handed off; the clock's reading then.
    async fn advance_until_handed_off(&self, key: TaskKey, step: Duration) -> Timestamp {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(at) = self.handed_off(key) {
                return at;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{key} not handed off; the clock reads {}",
                self.clock.now()
            );
            self.clock.advance(step);
            // Lets the scheduler's tasks run on the moved clock before the next check.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn the_sweeper_runs_on_the_injected_clock() {
    let s = setup().await;
    let t = s.timer().await;
    // Missed by the hot path (never indexed, in minutes no shard worker reads): one overdue
    // when the scheduler starts, one due ten minutes later.
    let start = s.clock.now();
    let first = s.occurrence(&t, start.add_millis(-600_000)).await;
    let key = s.occurrence(&t, start.add_millis(600_000)).await;
    let run = s.start();
    // The first sweep comes at once, the clock unmoved; the next when the clock reaches the
    // sweep interval.
    let first_at = s.advance_until_handed_off(first, Duration::ZERO).await;
    assert_eq!(first_at, start);
    let at = s.advance_until_handed_off(key, HOUR).await;
    assert!(at >= start.saturating_add(HOUR), "swept at {at}");
    s.stop(run).await;
}

#[tokio::test]
async fn a_held_shard_waits_for_the_due_instant_on_the_injected_clock() {
    let s = setup().await;
    let t = s.timer().await;
    // Due 40 s into the clock's minute: read at once (within the look-ahead), then waited
    // for by the clock alone, as no tick or poll comes within the hour.
    let key = s.occurrence(&t, s.clock.now().add_millis(40_000)).await;
    let bucket = Bucket::of(t.id, BucketCount::new(1).unwrap());
    let entry = HotEntry::new(key, key.run_at, bucket);
    s.index.add(&[entry]).await.unwrap();
    s.index.touch(&[entry.shard]).await.unwrap();
    let run = s.start();
    let at = s
        .advance_until_handed_off(key, Duration::from_secs(1))
        .await;
    s.stop(run).await;
    assert!(
        at >= key.run_at.add_millis(-50),
        "handed off at {at}, more than dispatch_ahead before {}",
        key.run_at
    );
    assert!(at <= key.run_at.add_millis(1_000), "handed off at {at}");
}
