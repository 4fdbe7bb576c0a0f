//! Unwritten runs ([`chime_domain::UnwrittenRun`]): timers that leave their runs unwritten
//! get no rows ahead, each run's row is inserted when it ends or is skipped, and
//! [`RunLeases`] hold a run for one taker at a time.

use super::*;
use crate::RunLeases;
use chime_domain::{Clock as _, SystemClock, UnwrittenRun};

fn fast(app: &str, name: &str, unwritten: bool) -> NewTimer {
    NewTimer {
        spec: spec_every(app, name, "1s", SystemClock.now()),
        enabled: true,
        runs_unwritten: unwritten,
    }
}

/// An unwritten run of `t` ending with `status` at its `attempt`.
fn ended(t: &Timer, run_at: Timestamp, attempt: u32, status: OccurrenceStatus) -> Outcome {
    Outcome {
        unwritten: Some(t.unwritten()),
        ..Outcome::ended(
            TaskKey::new(t.id, run_at),
            attempt,
            status,
            Some(run_at.add_millis(3)),
            None,
        )
    }
}

pub async fn timers_that_leave_runs_unwritten_write_none_ahead<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let lean = store
        .create_timer(fast("u", "lean", true), H)
        .await
        .unwrap();
    assert!(!lean.timer.written_ahead);
    assert!(
        lean.occurrences.len() > 30,
        "the plan is still there to index: {}",
        lean.occurrences.len()
    );
    let keys: Vec<TaskKey> = lean.occurrences.iter().map(|o| o.key).collect();
    let absent = store.absent(&keys).await.unwrap();
    assert_eq!(absent.len(), keys.len(), "no row is written ahead");
    assert!(absent.iter().all(|a| a.timer_now == Some(1)));
    assert!(!store.get_timer(lean.timer.id).await.unwrap().written_ahead);
    let listed = store
        .unwritten_timers(lean.timer.bucket, None, 100)
        .await
        .unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|b| (b.timer.id, b.watermark))
            .collect::<Vec<_>>(),
        vec![(
            lean.timer.id,
            lean.occurrences
                .last()
                .unwrap()
                .key
                .run_at
                .add_millis(1_000)
        )]
    );

    // Slow, or not asked to: written ahead as before, and not listed.
    let hourly = NewTimer {
        spec: spec_every("u", "hourly", "1h", SystemClock.now()),
        ..fast("u", "hourly", true)
    };
    for new in [hourly, fast("u", "asked-not", false)] {
        let w = store.create_timer(new, H).await.unwrap();
        assert!(w.timer.written_ahead, "{}", w.timer.spec.name);
        let keys: Vec<TaskKey> = w.occurrences.iter().map(|o| o.key).collect();
        assert!(store.absent(&keys).await.unwrap().is_empty());
        let listed = store
            .unwritten_timers(w.timer.bucket, None, 100)
            .await
            .unwrap();
        assert!(listed.iter().all(|b| b.timer.id != w.timer.id));
    }
    // A deleted timer's runs are absent with no version.
    store.delete_timer(lean.timer.id).await.unwrap();
    let gone = store.absent(&keys[..1]).await.unwrap();
    assert_eq!(gone[0].timer_now, None);
}

pub async fn a_change_may_write_runs_ahead_but_never_leave_them_unwritten_again<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let w = store
        .create_timer(fast("u", "changing", true), H)
        .await
        .unwrap();
    let still = store
        .update_timer(
            w.timer.id,
            None,
            spec_every("u", "changing", "2s", SystemClock.now()),
            H,
        )
        .await
        .unwrap();
    assert!(!still.timer.written_ahead, "still fast and plain");
    let keys: Vec<TaskKey> = still.occurrences.iter().map(|o| o.key).collect();
    assert_eq!(store.absent(&keys).await.unwrap().len(), keys.len());

    let slow = store
        .update_timer(
            w.timer.id,
            None,
            spec_every("u", "changing", "1h", SystemClock.now()),
            H,
        )
        .await
        .unwrap();
    assert!(slow.timer.written_ahead);
    let keys: Vec<TaskKey> = slow.occurrences.iter().map(|o| o.key).collect();
    assert!(!keys.is_empty());
    assert!(store.absent(&keys).await.unwrap().is_empty(), "written now");

    let fast_again = store
        .update_timer(
            w.timer.id,
            None,
            spec_every("u", "changing", "1s", SystemClock.now()),
            H,
        )
        .await
        .unwrap();
    assert!(fast_again.timer.written_ahead, "rows ahead stay");
}

pub async fn an_unwritten_runs_row_is_written_when_it_ends<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let t = store
        .create_timer(fast("u", "ends", true), H)
        .await
        .unwrap()
        .timer;
    let runs: Vec<Timestamp> = (1..=3)
        .map(|i| t.created_at.add_millis(i * 1_000))
        .collect();
    // Beside a written run's outcome, in one batch.
    store
        .insert_occurrences(&[occ(999, T0, 1, 0)])
        .await
        .unwrap();
    store
        .claim(&[key(999, T0)], claim_at(T0, 30_000))
        .await
        .unwrap();
    let recorded = store
        .record_outcomes(&[
            ended(&t, runs[0], 1, OccurrenceStatus::Succeeded),
            outcome(key(999, T0), 1, OccurrenceStatus::Succeeded, T0 + 5),
            Outcome {
                next_attempt_at: Some(runs[1].add_millis(2_000)),
                ..ended(&t, runs[1], 1, OccurrenceStatus::Retrying)
            },
        ])
        .await
        .unwrap();
    assert_eq!(recorded, 3);
    let first = store
        .get_occurrence(TaskKey::new(t.id, runs[0]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.status, OccurrenceStatus::Succeeded);
    assert_eq!((first.attempt, first.timer_version), (1, 1));
    assert_eq!(first.bucket, t.bucket);
    assert_eq!(first.lateness_ms, Some(3));
    let retrying = store
        .get_occurrence(TaskKey::new(t.id, runs[1]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(retrying.status, OccurrenceStatus::Retrying);
    assert_eq!(retrying.due_at(), runs[1].add_millis(2_000));
    let keys: Vec<TaskKey> = runs.iter().map(|r| TaskKey::new(t.id, *r)).collect();
    let absent: Vec<TaskKey> = store
        .absent(&keys)
        .await
        .unwrap()
        .iter()
        .map(|a| a.key)
        .collect();
    assert_eq!(absent, vec![keys[2]]);
    // The retry is claimed as any row is.
    let retry = store
        .claim(&[keys[1]], claim_at(runs[1].as_millis() + 2_000, 30_000))
        .await
        .unwrap();
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].attempt, 2);
    // A second taker's outcome of a run written already changes nothing.
    let again = store
        .record_outcomes(&[ended(&t, runs[0], 1, OccurrenceStatus::Failed)])
        .await
        .unwrap();
    assert_eq!(again, 0);
    let first = store.get_occurrence(keys[0]).await.unwrap().unwrap();
    assert_eq!(first.status, OccurrenceStatus::Succeeded);
}

pub async fn a_skip_is_written_once_and_gives_way_to_a_real_attempt<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let t = store
        .create_timer(fast("u", "skips", true), H)
        .await
        .unwrap()
        .timer;
    let at = |i: i64| TaskKey::new(t.id, t.created_at.add_millis(i * 1_000));
    let skip = |k: TaskKey, kind: EarlySkipKind| EarlySkip {
        key: k,
        timer_version: t.version,
        kind,
        reason: "misfired: the next run was due".into(),
        unwritten: Some(UnwrittenRun {
            timer_version: t.version,
            bucket: t.bucket,
        }),
    };
    let overtaken = |k: TaskKey| skip(k, EarlySkipKind::Overtaken { due: k.run_at });
    let marked = store
        .skip_before_claim(&[
            overtaken(at(1)),
            overtaken(at(2)),
            skip(at(3), EarlySkipKind::Stopped),
        ])
        .await
        .unwrap();
    let marked: HashSet<TaskKey> = marked.into_iter().collect();
    assert_eq!(
        marked,
        [at(1), at(2)].into(),
        "a stopped timer's runs are not written"
    );
    assert_eq!(
        store.absent(&[at(3)]).await.unwrap().len(),
        1,
        "nothing of the stopped run is written"
    );
    let row = store.get_occurrence(at(1)).await.unwrap().unwrap();
    assert_eq!(row.status, OccurrenceStatus::Skipped);
    assert_eq!(
        (row.attempt, row.error.as_deref()),
        (0, Some("misfired: the next run was due"))
    );
    // Skipped again: nothing more.
    assert!(
        store
            .skip_before_claim(&[overtaken(at(1))])
            .await
            .unwrap()
            .is_empty()
    );
    // A delivery that raced the skip under its lease is what the row says.
    let recorded = store
        .record_outcomes(&[ended(&t, at(2).run_at, 1, OccurrenceStatus::Succeeded)])
        .await
        .unwrap();
    assert_eq!(recorded, 1);
    let row = store.get_occurrence(at(2)).await.unwrap().unwrap();
    assert_eq!((row.status, row.attempt), (OccurrenceStatus::Succeeded, 1));
    assert_eq!(row.error, None);
    // A skip after a delivery leaves it.
    store
        .record_outcomes(&[ended(&t, at(4).run_at, 1, OccurrenceStatus::Succeeded)])
        .await
        .unwrap();
    assert!(
        store
            .skip_before_claim(&[overtaken(at(4))])
            .await
            .unwrap()
            .is_empty()
    );
    let row = store.get_occurrence(at(4)).await.unwrap().unwrap();
    assert_eq!(row.status, OccurrenceStatus::Succeeded);
}

fn leases_of(index: &Arc<dyn HotIndex>) -> Arc<dyn RunLeases> {
    index.run_leases().expect("this hot index keeps run leases")
}

fn run(id: i64, i: i64) -> TaskKey {
    key(id, T0 + i * 1_000)
}

pub async fn a_run_is_held_by_one_taker_until_freed(index: Arc<dyn HotIndex>) {
    let leases = leases_of(&index);
    let id = rand::random::<u32>() as i64 + 1;
    let ttl = Duration::from_secs(30);
    let first = leases
        .take_runs(&[run(id, 1), run(id, 2)], ttl)
        .await
        .unwrap();
    assert_eq!(first, vec![true, true]);
    let second = leases
        .take_runs(&[run(id, 2), run(id, 3)], ttl)
        .await
        .unwrap();
    assert_eq!(second, vec![false, true]);
    assert_eq!(
        leases
            .runs_held(&[run(id, 1), run(id, 2), run(id, 4)])
            .await
            .unwrap(),
        vec![true, true, false]
    );
    leases.free_runs(&[run(id, 2)]).await.unwrap();
    assert_eq!(leases.runs_held(&[run(id, 2)]).await.unwrap(), vec![false]);
    assert_eq!(
        leases.take_runs(&[run(id, 2)], ttl).await.unwrap(),
        vec![true]
    );
    assert!(leases.take_runs(&[], ttl).await.unwrap().is_empty());
    leases.free_runs(&[]).await.unwrap();
}

pub async fn racing_takers_hold_each_run_once(index: Arc<dyn HotIndex>) {
    let leases = leases_of(&index);
    let id = rand::random::<u32>() as i64 + 1;
    let runs: Vec<TaskKey> = (0..50).map(|i| run(id, i)).collect();
    let takers: Vec<_> = (0..4)
        .map(|_| {
            let (leases, runs) = (leases.clone(), runs.clone());
            tokio::spawn(async move {
                leases
                    .take_runs(&runs, Duration::from_secs(30))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut held = vec![0; runs.len()];
    for taker in takers {
        for (i, took) in taker.await.unwrap().into_iter().enumerate() {
            held[i] += usize::from(took);
        }
    }
    assert!(held.iter().all(|n| *n == 1), "{held:?}");
}

pub async fn a_lapsed_run_lease_is_taken_over(
    index: Arc<dyn HotIndex>,
    time: Arc<dyn TimeControl>,
) {
    let leases = leases_of(&index);
    let id = rand::random::<u32>() as i64 + 1;
    let short = Duration::from_millis(300);
    assert_eq!(
        leases.take_runs(&[run(id, 1)], short).await.unwrap(),
        vec![true]
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        time.advance(Duration::from_millis(100));
        if leases
            .take_runs(&[run(id, 1)], Duration::from_secs(30))
            .await
            .unwrap()
            == vec![true]
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(leases.runs_held(&[run(id, 1)]).await.unwrap(), vec![true]);
}
