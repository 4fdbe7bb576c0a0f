//! The sweeper against real Redis and PostgreSQL: missed and abandoned runs handed off
//! again, misfire policies after an outage, stopped timers' runs skipped where they lie.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    Claim, Clock, DeliveryMode, MisfirePolicy, NewOccurrence, NewTimer, OccurrenceStatus,
    ScheduleInput, ShardKey, SystemClock, TaskKey, Timer, TimerId, TimerSpec, Timestamp,
};
use chime_scheduler::{Scheduler, Swept};
use chime_storage::{OccurrenceStore, TimerStore};
use tokio_util::sync::CancellationToken;

use crate::scheduler::{Setup, index, keys, scheduler_with, settings, setup, wait_for_all};

fn timer_spec(
    name: &str,
    schedule: ScheduleInput,
    misfire: MisfirePolicy,
    delivery: DeliveryMode,
) -> TimerSpec {
    let now = SystemClock.now();
    TimerSpec {
        misfire,
        delivery,
        ..chime_storage::contract::spec_with("ops", name, &schedule, now.add_millis(-3_600_000))
    }
}

pub(crate) async fn timer(
    s: &Setup,
    name: &str,
    schedule: ScheduleInput,
    misfire: MisfirePolicy,
    delivery: DeliveryMode,
) -> Timer {
    s.db.store
        .create_timer(
            NewTimer {
                spec: timer_spec(name, schedule, misfire, delivery),
                enabled: true,
                runs_unwritten: false,
            },
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap()
        .timer
}

/// An every-second timer under `misfire`, delivered at least once.
pub(crate) async fn every_second_timer(s: &Setup, name: &str, misfire: MisfirePolicy) -> Timer {
    timer(s, name, every_second(), misfire, DeliveryMode::AtLeastOnce).await
}

pub(crate) fn every_second() -> ScheduleInput {
    ScheduleInput {
        every: Some("1s".into()),
        ..Default::default()
    }
}

/// Occurrences of `t` due `ago_ms` before now.
async fn overdue(s: &Setup, t: &Timer, ago_ms: &[i64]) -> Vec<TaskKey> {
    let now = SystemClock.now();
    let keys: Vec<TaskKey> = ago_ms
        .iter()
        .map(|a| TaskKey::new(t.id, now.add_millis(-a)))
        .collect();
    write_runs(s, t, &keys).await;
    keys
}

/// Writes `keys` as pending runs of `t` at its version.
pub(crate) async fn write_runs(s: &Setup, t: &Timer, keys: &[TaskKey]) {
    let rows: Vec<NewOccurrence> = keys
        .iter()
        .map(|k| NewOccurrence {
            key: *k,
            timer_version: t.version,
            bucket: t.bucket,
            due: None,
        })
        .collect();
    s.db.store.insert_occurrences(&rows).await.unwrap();
}

fn sweeper(s: &Setup) -> Arc<Scheduler> {
    let mut settings = settings();
    settings.sweep_after = Duration::from_secs(2);
    settings.misfire_threshold = Duration::from_secs(10);
    scheduler_with(s, settings)
}

pub(crate) async fn status(s: &Setup, k: TaskKey) -> OccurrenceStatus {
    s.db.store.get_occurrence(k).await.unwrap().unwrap().status
}

#[tokio::test]
async fn the_sweeper_hands_off_missed_and_abandoned_work() {
    let s = setup().await;
    let t = timer(
        &s,
        "t",
        every_second(),
        MisfirePolicy::FireOnce,
        DeliveryMode::AtLeastOnce,
    )
    .await;
    let amo = timer(
        &s,
        "amo",
        every_second(),
        MisfirePolicy::FireOnce,
        DeliveryMode::AtMostOnce,
    )
    .await;
    // Missed by the hot path (3 s overdue), not yet overdue enough (1 s), and claimed by an
    // executor that died (its lease ended).
    let missed = overdue(&s, &t, &[3_000]).await[0];
    let recent = overdue(&s, &t, &[1_000]).await[0];
    let abandoned = overdue(&s, &t, &[4_000]).await[0];
    let abandoned_amo = overdue(&s, &amo, &[4_000]).await[0];
    let now = SystemClock.now();
    let lease = Claim {
        now,
        lease_until: now.add_millis(-1),
    };
    assert_eq!(
        s.db.store
            .claim(&[abandoned, abandoned_amo], lease)
            .await
            .unwrap()
            .len(),
        2
    );

    let swept = sweeper(&s).sweep().await.unwrap();
    assert_eq!(
        swept,
        Swept {
            handed_off: 2,
            skipped: 0,
            abandoned: 1
        }
    );
    let mut got: Vec<TaskKey> = s.recorder.got().iter().map(|(k, _)| *k).collect();
    got.sort();
    let mut want = vec![missed, abandoned];
    want.sort();
    assert_eq!(got, want, "not the recent one, not the at_most_once one");
    let lost =
        s.db.store
            .get_occurrence(abandoned_amo)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(lost.status, OccurrenceStatus::Failed);
    assert!(lost.error.unwrap().contains("at_most_once"));
    assert_eq!(status(&s, recent).await, OccurrenceStatus::Pending);
}

#[tokio::test]
async fn misfire_policies_decide_what_an_outage_fires() {
    let s = setup().await;
    let once = every_second_timer(&s, "once", MisfirePolicy::FireOnce).await;
    let all = every_second_timer(&s, "all", MisfirePolicy::FireAll).await;
    let skip = every_second_timer(&s, "skip", MisfirePolicy::Skip).await;
    let at = Timestamp::from_millis(SystemClock.now().as_millis() + 3_600_000).to_rfc3339();
    let one_shot = timer(
        &s,
        "one-shot",
        ScheduleInput {
            at: Some(at),
            ..Default::default()
        },
        MisfirePolicy::FireOnce,
        DeliveryMode::AtLeastOnce,
    )
    .await;
    let gap = [60_000, 50_000, 40_000, 30_000, 20_000];
    let once_keys = overdue(&s, &once, &gap).await;
    let all_keys = overdue(&s, &all, &gap).await;
    let skip_keys = overdue(&s, &skip, &gap).await;
    let one_shot_key = overdue(&s, &one_shot, &[60_000]).await[0];
    // Overdue, but within the threshold: fires as usual whatever the policy.
    let skip_recent = overdue(&s, &skip, &[5_000]).await[0];

    let swept = sweeper(&s).sweep().await.unwrap();
    let got: std::collections::HashSet<TaskKey> =
        s.recorder.got().iter().map(|(k, _)| *k).collect();
    // fire_once: the latest of the gap only.
    assert!(got.contains(&once_keys[4]));
    for k in &once_keys[..4] {
        assert!(!got.contains(k));
        assert_eq!(status(&s, *k).await, OccurrenceStatus::Skipped);
    }
    // fire_all: every one.
    assert!(all_keys.iter().all(|k| got.contains(k)));
    // skip: none of the gap, yet the recent one.
    assert!(skip_keys.iter().all(|k| !got.contains(k)));
    assert!(got.contains(&skip_recent));
    // one-shot under fire_once: fires.
    assert!(got.contains(&one_shot_key));
    assert_eq!(swept.handed_off, 1 + 5 + 1 + 1);
    assert_eq!(swept.skipped, 4 + 5);
    // No executor claimed them here, so a second sweep offers the same 8 again, and skips
    // nothing more: the policy's choice is stable.
    let again = sweeper(&s).sweep().await.unwrap();
    assert_eq!((again.handed_off, again.skipped), (8, 0));
}

#[tokio::test]
async fn the_sweeper_skips_runs_of_stopped_timers_itself() {
    let s = setup().await;
    let spec = |name| (name, every_second(), MisfirePolicy::FireOnce);
    let mut made = Vec::new();
    for (name, schedule, misfire) in [spec("paused"), spec("gone"), spec("changed")] {
        made.push(timer(&s, name, schedule, misfire, DeliveryMode::AtLeastOnce).await);
    }
    let live = timer(
        &s,
        "live",
        every_second(),
        MisfirePolicy::FireOnce,
        DeliveryMode::AtLeastOnce,
    )
    .await;
    let rows: Vec<Vec<TaskKey>> = {
        let mut rows = Vec::new();
        for t in &made {
            rows.push(overdue(&s, t, &[3_000, 4_000]).await);
        }
        rows
    };
    let live_key = overdue(&s, &live, &[3_000]).await[0];
    let (paused, gone, changed) = (&made[0], &made[1], &made[2]);
    s.db.store
        .set_timer_enabled(paused.id, false, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap();
    s.db.store.delete_timer(gone.id).await.unwrap();
    s.db.store
        .update_timer(
            changed.id,
            None,
            timer_spec(
                "changed",
                ScheduleInput {
                    every: Some("2s".into()),
                    ..Default::default()
                },
                MisfirePolicy::FireOnce,
                DeliveryMode::AtLeastOnce,
            ),
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap();

    let swept = sweeper(&s).sweep().await.unwrap();
    // Only the live timer's run goes to an executor; the six others are skipped here.
    let got: Vec<TaskKey> = s.recorder.got().iter().map(|(k, _)| *k).collect();
    assert_eq!(got, vec![live_key]);
    assert_eq!((swept.handed_off, swept.skipped), (1, 6));
    for (keys, why) in rows
        .iter()
        .zip(["timer disabled", "timer deleted", "timer changed"])
    {
        for k in keys {
            let o = s.db.store.get_occurrence(*k).await.unwrap().unwrap();
            assert_eq!(o.status, OccurrenceStatus::Skipped);
            assert!(
                o.error.as_deref().unwrap().starts_with(why),
                "{:?}",
                o.error
            );
        }
    }
}

#[tokio::test]
async fn shard_workers_leave_misfired_members_to_the_sweeper() {
    let s = setup().await;
    // Due 20 s ago (the shard was not worked: an outage) and due shortly.
    let mut stale = keys(1, -20_000);
    let fresh = keys(1, 300);
    stale[0].0 = TaskKey::new(TimerId::new(77).unwrap(), stale[0].0.run_at);
    index(&s, &stale).await;
    index(&s, &fresh).await;
    let sched = sweeper(&s);
    let stop = CancellationToken::new();
    let run = tokio::spawn(sched.run(stop.clone(), Duration::from_secs(5)));
    wait_for_all(&s, 1).await;
    // The stale member leaves the index without a hand-off (its row, if any, is the
    // sweeper's to judge by the timer's misfire policy).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (k, b) = stale[0];
    loop {
        let left = s
            .redis
            .hot_index()
            .due(ShardKey::new(k.run_at, b), SystemClock.now(), 10)
            .await
            .unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "misfired member never removed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap();
    let got: Vec<TaskKey> = s.recorder.got().iter().map(|(k, _)| *k).collect();
    assert_eq!(got, vec![fresh[0].0]);
}

#[tokio::test]
async fn the_sweeper_passes_over_first_attempts_in_flight_under_their_leases() {
    let s = setup().await;
    let t = every_second_timer(&s, "leased", MisfirePolicy::FireAll).await;
    // Both rows pending and overdue; an executor fires the first under its run lease (its
    // row stays pending while the callback runs), the second was lost on its way.
    let keys = overdue(&s, &t, &[4_000, 3_000]).await;
    let (in_flight, lost) = (keys[0], keys[1]);
    let leases = s.redis.hot_index().run_leases().unwrap();
    assert_eq!(
        leases
            .take_runs(&[in_flight], Duration::from_secs(30))
            .await
            .unwrap(),
        vec![true]
    );
    let swept = sweeper(&s).sweep().await.unwrap();
    assert_eq!(swept.handed_off, 1);
    let got: Vec<TaskKey> = s.recorder.got().iter().map(|(k, _)| *k).collect();
    assert_eq!(got, vec![lost], "not the one in flight");
    assert_eq!(status(&s, in_flight).await, OccurrenceStatus::Pending);
    // Its executor gone without an outcome, the lease lapses (freed here): offered again.
    leases.free_runs(&[in_flight]).await.unwrap();
    let again = sweeper(&s).sweep().await.unwrap();
    assert_eq!(again.handed_off, 2);
}

/// Starts a scheduler handing off to `executors` whose next sweep after the first is a
/// minute away: only the first can hand off what these tests look for in time.
fn first_sweep_only(
    s: &Setup,
    executors: Arc<dyn chime_scheduler::Handoff>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let mut settings = settings();
    settings.sweep_after = Duration::from_secs(2);
    settings.misfire_threshold = Duration::from_secs(600);
    settings.sweep_interval = Duration::from_secs(60);
    let sched = Scheduler::new(
        s.db.store(),
        s.redis.hot_index(),
        s.redis.leases(),
        s.db.store(),
        executors,
        Arc::new(SystemClock),
        settings,
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(sched.run(stop.clone(), Duration::from_secs(5)));
    (stop, run)
}

/// Waits up to 10 s for `done`, failing with `what`.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Executors with room for a few keys a call: each call takes at most `per_call`.
struct Trickle {
    per_call: usize,
    taken: std::sync::Mutex<usize>,
}

#[async_trait::async_trait]
impl chime_scheduler::Handoff for Trickle {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let n = keys.len().min(self.per_call);
        *self.taken.lock().unwrap() += n;
        n
    }
}

#[tokio::test]
async fn a_sweep_offers_what_full_executors_refused_again_as_they_free_room() {
    let s = setup().await;
    let t = every_second_timer(&s, "t", MisfirePolicy::FireAll).await;
    let ago: Vec<i64> = (0..60).map(|i| 3_000 + i).collect();
    overdue(&s, &t, &ago).await;
    let executors = Arc::new(Trickle {
        per_call: 5,
        taken: std::sync::Mutex::new(0),
    });
    let (stop, run) = first_sweep_only(&s, executors.clone());
    eventually("every row handed off by the first sweep", || {
        *executors.taken.lock().unwrap() >= ago.len()
    })
    .await;
    stop.cancel();
    run.await.unwrap();
}

/// Executors that claim what they take, as real ones do: claimed rows leave the overdue.
struct Claiming {
    store: Arc<dyn OccurrenceStore>,
    got: std::sync::Mutex<Vec<TaskKey>>,
}

#[async_trait::async_trait]
impl chime_scheduler::Handoff for Claiming {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        let now = SystemClock.now();
        let lease = Claim {
            now,
            lease_until: now.add_millis(60_000),
        };
        self.store.claim(keys, lease).await.unwrap();
        self.got.lock().unwrap().extend_from_slice(keys);
        keys.len()
    }
}

#[tokio::test]
async fn a_sweep_pages_on_past_rows_in_flight() {
    let s = setup().await;
    let t = every_second_timer(&s, "behind", MisfirePolicy::FireAll).await;
    // The oldest row lost on its way; most of a page in flight under run leases; and rows
    // behind them that no executor has.
    let ago: Vec<i64> = (0..2_050).map(|i| 9_000 - i).collect();
    let keys = overdue(&s, &t, &ago).await;
    let (lost, rest) = keys.split_at(1);
    let (in_flight, behind) = rest.split_at(1_999);
    let leases = s.redis.hot_index().run_leases().unwrap();
    let taken = leases
        .take_runs(in_flight, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(taken.iter().all(|t| *t));
    let executors = Arc::new(Claiming {
        store: s.db.store(),
        got: std::sync::Mutex::new(Vec::new()),
    });
    let (stop, run) = first_sweep_only(&s, executors.clone());
    let got = |k: &TaskKey| executors.got.lock().unwrap().contains(k);
    eventually("a sweep", || got(&lost[0])).await;
    // The first page read, the executor of the rows in flight is gone and their leases
    // lapse (freed here): the sweep offers them, and then the rows behind.
    leases.free_runs(in_flight).await.unwrap();
    eventually(
        "the rows behind a page of rows in flight, before the next sweep",
        || behind.iter().all(got),
    )
    .await;
    stop.cancel();
    run.await.unwrap();
}
