//! Skips: runs marked skipped by the misfire policy, stopped timers' runs, and pending runs
//! dropped with their timer.

use super::*;

pub async fn skipping_touches_claimable_occurrences_only(store: Arc<dyn OccurrenceStore>) {
    store
        .insert_occurrences(&[occ(21, T0, 1, 0), occ(21, T0 + 1_000, 1, 0)])
        .await
        .unwrap();
    let running = key(21, T0 + 1_000);
    store.claim(&[running], claim_at(T0, 30_000)).await.unwrap();
    let skipped = store
        .skip_occurrences(&[key(21, T0), running, key(99, T0)], "misfired")
        .await
        .unwrap();
    assert_eq!(skipped, 1);
    let o = store.get_occurrence(key(21, T0)).await.unwrap().unwrap();
    assert_eq!(o.status, OccurrenceStatus::Skipped);
    assert_eq!(o.error.as_deref(), Some("misfired"));
    assert_eq!(
        status_of(store.as_ref(), running).await,
        OccurrenceStatus::Running
    );
    assert_eq!(store.skip_occurrences(&[], "x").await.unwrap(), 0);
}

/// Claims `running` (so it is running) and `retrying` (which then fails once and waits for
/// its retry, due at `T0` + 60 s): the rows a skip before the claim must leave alone.
async fn one_running_one_retrying(
    store: &dyn OccurrenceStore,
    running: TaskKey,
    retrying: TaskKey,
) {
    store
        .claim(&[running, retrying], claim_at(T0, 30_000))
        .await
        .unwrap();
    let fired = retrying.run_at.as_millis() + 1;
    let mut failed = outcome(retrying, 1, OccurrenceStatus::Retrying, fired);
    failed.next_attempt_at = Some(Timestamp::from_millis(T0 + 60_000));
    store.record_outcomes(&[failed]).await.unwrap();
}

pub async fn overtaken_runs_are_skipped_only_while_waiting_for_a_first_attempt(
    store: Arc<dyn OccurrenceStore>,
) {
    let mut windowed = occ(31, T0 + 5_000, 1, 0);
    windowed.due = Some(Timestamp::from_millis(T0 + 5_500));
    let backfilled = occ(32, T0, 1, 0);
    store
        .insert_occurrences(&[
            occ(31, T0, 1, 0),
            occ(31, T0 + 1_000, 1, 0),
            occ(31, T0 + 2_000, 1, 0),
            occ(31, T0 + 3_000, 1, 0),
            occ(31, T0 + 4_000, 2, 0),
            windowed,
        ])
        .await
        .unwrap();
    store
        .backfill(&[backfilled], OverlapPolicy::AllowAll)
        .await
        .unwrap();
    let running = key(31, T0 + 1_000);
    let retrying = key(31, T0 + 2_000);
    one_running_one_retrying(store.as_ref(), running, retrying).await;
    let run = |k: TaskKey, version: i64, due: i64| EarlySkip {
        key: k,
        timer_version: version,
        kind: EarlySkipKind::Overtaken {
            due: Timestamp::from_millis(due),
        },
        reason: format!("misfired at {}", k.run_at.as_millis()),
        unwritten: None,
    };
    let mut skipped = store
        .skip_before_claim(&[
            run(key(31, T0), 1, T0),
            run(running, 1, T0 + 1_000),
            run(retrying, 1, T0 + 2_000),
            // Of another version than the row's, and a row of a newer version than asked.
            run(key(31, T0 + 3_000), 2, T0 + 3_000),
            run(key(31, T0 + 4_000), 1, T0 + 4_000),
            // Due later than its run time: skipped at that due only.
            run(key(31, T0 + 5_000), 1, T0 + 5_500),
            run(key(32, T0), 1, T0),
            run(key(99, T0), 1, T0),
        ])
        .await
        .unwrap();
    skipped.sort_by_key(|k| k.run_at);
    assert_eq!(skipped, vec![key(31, T0), key(31, T0 + 5_000)]);
    let o = store.get_occurrence(key(31, T0)).await.unwrap().unwrap();
    assert_eq!(o.status, OccurrenceStatus::Skipped);
    assert_eq!(o.error.as_deref(), Some(&*format!("misfired at {T0}")));
    for (k, status) in [
        (running, OccurrenceStatus::Running),
        (retrying, OccurrenceStatus::Retrying),
        (key(31, T0 + 3_000), OccurrenceStatus::Pending),
        (key(31, T0 + 4_000), OccurrenceStatus::Pending),
        (key(32, T0), OccurrenceStatus::Pending),
    ] {
        assert_eq!(status_of(store.as_ref(), k).await, status, "{k}");
    }
    // The windowed run asked at its run time rather than its due: left alone.
    let mut late = occ(33, T0 + 5_000, 1, 0);
    late.due = Some(Timestamp::from_millis(T0 + 5_500));
    store.insert_occurrences(&[late]).await.unwrap();
    let none = store
        .skip_before_claim(&[run(key(33, T0 + 5_000), 1, T0 + 5_000)])
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(store.skip_before_claim(&[]).await.unwrap().is_empty());
}

pub async fn a_stopped_timers_runs_are_skipped_up_to_its_version(store: Arc<dyn OccurrenceStore>) {
    // Timer 41, disabled at version 3: runs written at versions 1 to 3 (a backfill and one
    // due later by its window among them), one running and one retrying, and one of version
    // 4 (written after it was enabled again). Timer 42, gone.
    let mut windowed = occ(41, T0 + 4_000, 3, 0);
    windowed.due = Some(Timestamp::from_millis(T0 + 4_500));
    store
        .insert_occurrences(&[
            occ(41, T0, 1, 0),
            occ(41, T0 + 1_000, 2, 0),
            occ(41, T0 + 2_000, 3, 0),
            occ(41, T0 + 3_000, 3, 0),
            windowed,
            occ(41, T0 + 5_000, 3, 0),
            occ(41, T0 + 6_000, 3, 0),
            occ(41, T0 + 7_000, 4, 0),
            occ(42, T0, 1, 0),
        ])
        .await
        .unwrap();
    store
        .backfill(&[occ(41, T0 - 60_000, 3, 0)], OverlapPolicy::AllowAll)
        .await
        .unwrap();
    let (running, retrying) = (key(41, T0 + 5_000), key(41, T0 + 6_000));
    one_running_one_retrying(store.as_ref(), running, retrying).await;
    let stopped = |k: TaskKey, version: i64, reason: &str| EarlySkip {
        key: k,
        timer_version: version,
        kind: EarlySkipKind::Stopped,
        reason: reason.into(),
        unwritten: None,
    };
    let mut asked: Vec<EarlySkip> = [
        T0 - 60_000,
        T0,
        T0 + 1_000,
        T0 + 2_000,
        T0 + 3_000,
        T0 + 4_000,
        T0 + 5_000,
        T0 + 6_000,
        T0 + 7_000,
    ]
    .into_iter()
    .map(|at| stopped(key(41, at), 3, "timer disabled"))
    .collect();
    asked.push(stopped(key(42, T0), i64::MAX, "timer deleted"));
    asked.push(stopped(key(43, T0), 1, "no such run"));
    let mut skipped = store.skip_before_claim(&asked).await.unwrap();
    skipped.sort();
    let mut expected: Vec<TaskKey> = [
        T0 - 60_000,
        T0,
        T0 + 1_000,
        T0 + 2_000,
        T0 + 3_000,
        T0 + 4_000,
    ]
    .into_iter()
    .map(|at| key(41, at))
    .collect();
    expected.push(key(42, T0));
    expected.sort();
    assert_eq!(skipped, expected);
    for k in &expected {
        let o = store.get_occurrence(*k).await.unwrap().unwrap();
        assert_eq!(o.status, OccurrenceStatus::Skipped, "{k}");
        assert_eq!(o.attempt, 0, "{k}");
    }
    let o = store.get_occurrence(key(42, T0)).await.unwrap().unwrap();
    assert_eq!(o.error.as_deref(), Some("timer deleted"));
    let o = store.get_occurrence(key(41, T0)).await.unwrap().unwrap();
    assert_eq!(o.error.as_deref(), Some("timer disabled"));
    for (k, status) in [
        (running, OccurrenceStatus::Running),
        (retrying, OccurrenceStatus::Retrying),
        (key(41, T0 + 7_000), OccurrenceStatus::Pending),
    ] {
        assert_eq!(status_of(store.as_ref(), k).await, status, "{k}");
    }
}

pub async fn dropping_pending_leaves_what_is_due_under_way_or_newer(
    store: Arc<dyn OccurrenceStore>,
) {
    // Timer 22, stopped at version 2: due before the cut, pending after it (one due later
    // by its window), running after it. Timer 24 stopped at version 1; timer 25 stopped at
    // version 2 and started again at version 3; timer 23 is not named.
    let mut windowed = occ(22, T0 + 3_000, 1, 2);
    windowed.due = Some(Timestamp::from_millis(T0 + 3_500));
    store
        .insert_occurrences(&[
            occ(22, T0 - 1_000, 1, 2),
            occ(22, T0 + 1_000, 1, 2),
            occ(22, T0 + 2_000, 1, 2),
            windowed,
            occ(23, T0 + 1_000, 1, 5),
            occ(24, T0 + 1_500, 1, 7),
            occ(25, T0 + 1_000, 3, 1),
        ])
        .await
        .unwrap();
    let running = key(22, T0 + 2_000);
    store.claim(&[running], claim_at(T0, 30_000)).await.unwrap();
    let stopped = |id: i64, version: i64| StoppedTimer {
        id: TimerId::new(id).unwrap(),
        version,
    };
    let cut = Timestamp::from_millis(T0);
    let timers = [stopped(22, 2), stopped(24, 1), stopped(25, 2)];
    let mut dropped = store.drop_pending(&timers, cut).await.unwrap();
    assert!(store.drop_pending(&[], cut).await.unwrap().is_empty());
    dropped.sort_by_key(|e| e.key);
    let entry = |timer: i64, at: i64, due: i64, bucket: u32| {
        HotEntry::new(
            key(timer, at),
            Timestamp::from_millis(due),
            Bucket::from_stored(bucket),
        )
    };
    assert_eq!(
        dropped,
        vec![
            entry(22, T0 + 1_000, T0 + 1_000, 2),
            entry(22, T0 + 3_000, T0 + 3_500, 2),
            entry(24, T0 + 1_500, T0 + 1_500, 7),
        ]
    );
    for gone in [
        key(22, T0 + 1_000),
        key(22, T0 + 3_000),
        key(24, T0 + 1_500),
    ] {
        assert_eq!(store.get_occurrence(gone).await.unwrap(), None, "{gone}");
    }
    for (k, status, why) in [
        (
            key(22, T0 - 1_000),
            OccurrenceStatus::Pending,
            "due already: skipped when claimed",
        ),
        (running, OccurrenceStatus::Running, "under way"),
        (key(23, T0 + 1_000), OccurrenceStatus::Pending, "not named"),
        (
            key(25, T0 + 1_000),
            OccurrenceStatus::Pending,
            "a later version",
        ),
    ] {
        assert_eq!(status_of(store.as_ref(), k).await, status, "{k}: {why}");
    }
    // Written again when the timer is enabled again.
    assert_eq!(
        store
            .insert_occurrences(&[occ(22, T0 + 1_000, 3, 2)])
            .await
            .unwrap(),
        1
    );
}
