//! What fires across DST transitions is what the preview shows. A manual clock walks the
//! migrator's materialization passes and a scheduler through six hours around each 2026
//! transition of five zones (Lord Howe's is 30 minutes; Kolkata has none), for wall-clock
//! crons under every gap and repeat policy; every key handed off is compared with
//! `next_runs`, the preview's source, and none is handed off before its instant.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Claim, Clock, DstPolicy, Horizon, ManualClock, NewTimer, ScheduleInput,
    TaskKey, TimerId, Timestamp,
};
use chime_migrator::Materializer;
use chime_scheduler::{Handoff, Scheduler, SchedulerSettings};
use chime_storage::memory::{MemoryHotIndex, MemoryLeases};
use chime_storage::testkit;
use chime_storage::{OccurrenceStore, TimerStore};
use tokio_util::sync::CancellationToken;

const HOUR: Duration = Duration::from_secs(3600);
const STEP: Duration = Duration::from_secs(60);
const DISPATCH_AHEAD: Duration = Duration::from_millis(50);

/// Claims each key handed to it, as an executor would (a key handed off again, by the
/// sweeper or another path, is not claimed twice), and records what it won with the clock's
/// reading then.
struct Recorder {
    clock: ManualClock,
    occurrences: Arc<dyn OccurrenceStore>,
    got: Mutex<Vec<(TaskKey, Timestamp)>>,
}

#[async_trait]
impl Handoff for Recorder {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let now = self.clock.now();
        let claim = Claim {
            now,
            lease_until: now.saturating_add(HOUR * 24),
        };
        let won = self.occurrences.claim(keys, claim).await.unwrap();
        let mut got = self.got.lock().unwrap();
        got.extend(won.iter().map(|c| (c.key, now)));
        keys.len()
    }
}

struct Case {
    zone: &'static str,
    /// The transition, UTC.
    at: &'static str,
    /// Local hour:minute crons that land in this transition's gap or repeated hour.
    local: &'static [&'static str],
}

const GAPS: &[&str] = &["next_instant", "shift", "skip"];
const REPEATS: &[&str] = &["first", "both"];

/// Walks the clock from three hours before the transition to three after, a minute at a
/// time, and checks the hand-offs of every timer against its preview.
async fn walk(case: Case) {
    let start = Timestamp::parse_rfc3339(case.at)
        .unwrap()
        .add_millis(-3 * 3_600_000 + 31_000);
    let end = start.add_millis(6 * 3_600_000);
    let clock = ManualClock::new(start);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let one = BucketCount::new(1).unwrap();
    let db = testkit::sqlite_on(shared.clone(), one).await;
    let index = Arc::new(MemoryHotIndex::new(shared.clone(), HOUR));
    let horizon = Horizon {
        lead: Duration::from_secs(600),
        max_rows: 100,
        spread: Duration::ZERO,
    };

    // Every cron under every policy: every ten minutes, and the zone's gap and repeat times.
    let mut crons = vec!["*/10 * * * *".to_owned()];
    crons.extend(case.local.iter().map(|t| {
        let (h, m) = t.split_once(':').unwrap();
        format!("{m} {h} * * *")
    }));
    let mut timers = BTreeMap::new();
    for (c, cron) in crons.iter().enumerate() {
        for gap in GAPS {
            for repeat in REPEATS {
                let dst: DstPolicy =
                    serde_json::from_value(serde_json::json!({"gap": gap, "repeat": repeat}))
                        .unwrap();
                let input = ScheduleInput {
                    cron: Some(cron.clone()),
                    time_zone: Some(case.zone.into()),
                    dst: Some(dst),
                    ..Default::default()
                };
                let name = format!("c{c}-{gap}-{repeat}").replace('_', "-");
                let spec = chime_storage::contract::spec_with("dst", &name, &input, start);
                let t = db
                    .store
                    .create_timer(
                        NewTimer {
                            spec,
                            enabled: true,
                            runs_unwritten: false,
                        },
                        horizon,
                    )
                    .await
                    .unwrap()
                    .timer;
                let preview: Vec<Timestamp> = t
                    .spec
                    .schedule
                    .next_runs(start, 1_000)
                    .into_iter()
                    .take_while(|r| *r <= end)
                    .collect();
                timers.insert(t.id, (format!("{cron} {gap}/{repeat}"), preview));
            }
        }
    }

    let recorder = Arc::new(Recorder {
        clock: clock.clone(),
        occurrences: db.store(),
        got: Mutex::default(),
    });
    let mut settings = SchedulerSettings::new(one, HOUR * 3, Duration::from_secs(50));
    settings.dispatch_ahead = DISPATCH_AHEAD;
    settings.misfire_threshold = HOUR * 24;
    let scheduler = Scheduler::new(
        db.store(),
        index.clone(),
        Arc::new(MemoryLeases::new(shared.clone())),
        db.store(),
        recorder.clone(),
        shared.clone(),
        settings,
    );
    let m = Materializer::new(db.store(), db.store(), index, shared, horizon);
    let stop = CancellationToken::new();
    let run = tokio::spawn(scheduler.run(stop.clone(), Duration::from_secs(5)));

    let expected: BTreeSet<(TimerId, Timestamp)> = timers
        .iter()
        .flat_map(|(id, (_, runs))| runs.iter().map(move |r| (*id, *r)))
        .collect();
    loop {
        m.bucket(Bucket::from_stored(0)).await.unwrap();
        // Everything due by now has been handed off before the clock moves on.
        let now = clock.now();
        let due: Vec<_> = expected.iter().filter(|(_, r)| *r <= now).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got: BTreeSet<(TimerId, Timestamp)> = {
                let got = recorder.got.lock().unwrap();
                got.iter().map(|(k, _)| (k.timer_id, k.run_at)).collect()
            };
            let missing: Vec<_> = due.iter().filter(|k| !got.contains(k)).collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: at {now}, not handed off: {missing:?}",
                case.zone
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if now >= end {
            break;
        }
        clock.advance(STEP);
    }
    stop.cancel();
    run.await.unwrap();

    let got = recorder.got.lock().unwrap().clone();
    let mut fired: BTreeMap<TimerId, Vec<Timestamp>> = BTreeMap::new();
    for (key, at) in &got {
        assert!(
            *at >= key.run_at.add_millis(-(DISPATCH_AHEAD.as_millis() as i64)),
            "{}: {key} handed off early, at {at}",
            case.zone
        );
        if key.run_at <= end {
            fired.entry(key.timer_id).or_default().push(key.run_at);
        }
    }
    for (id, (what, preview)) in &timers {
        let mut runs = fired.remove(id).unwrap_or_default();
        runs.sort();
        assert_eq!(
            &runs, preview,
            "{} {what}: fired (left) is not the preview (right)",
            case.zone
        );
    }
    // The policies were exercised: at a transition, some policy pair differs.
    if case.zone != "Asia/Kolkata" {
        let mut by_cron: BTreeMap<&str, BTreeSet<&Vec<Timestamp>>> = BTreeMap::new();
        for (what, preview) in timers.values() {
            by_cron
                .entry(what.split_once(' ').unwrap().0)
                .or_default()
                .insert(preview);
        }
        assert!(
            by_cron.values().any(|variants| variants.len() > 1),
            "{}: no policy changed a run; the window misses the transition",
            case.zone
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn europe_berlin_spring_and_fall() {
    walk(Case {
        zone: "Europe/Berlin",
        at: "2026-03-29T01:00:00Z",
        local: &["2:15", "2:45"],
    })
    .await;
    walk(Case {
        zone: "Europe/Berlin",
        at: "2026-10-25T01:00:00Z",
        local: &["2:15", "2:45"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn america_new_york_spring_and_fall() {
    walk(Case {
        zone: "America/New_York",
        at: "2026-03-08T07:00:00Z",
        local: &["2:15", "1:45"],
    })
    .await;
    walk(Case {
        zone: "America/New_York",
        at: "2026-11-01T06:00:00Z",
        local: &["2:15", "1:45"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn america_santiago_fall_and_spring_at_midnight() {
    walk(Case {
        zone: "America/Santiago",
        at: "2026-04-05T03:00:00Z",
        local: &["0:15", "23:45"],
    })
    .await;
    walk(Case {
        zone: "America/Santiago",
        at: "2026-09-06T04:00:00Z",
        local: &["0:15", "23:45"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn australia_lord_howe_half_hour_shifts() {
    walk(Case {
        zone: "Australia/Lord_Howe",
        at: "2026-04-04T15:00:00Z",
        local: &["2:15", "1:45"],
    })
    .await;
    walk(Case {
        zone: "Australia/Lord_Howe",
        at: "2026-10-03T15:30:00Z",
        local: &["2:15", "1:45"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asia_kolkata_without_dst() {
    walk(Case {
        zone: "Asia/Kolkata",
        at: "2026-03-29T01:00:00Z",
        local: &["2:15", "2:45"],
    })
    .await;
}
