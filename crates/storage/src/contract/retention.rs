//! Retention: old finished work goes, in bounded batches; live work never does.

use super::*;
use crate::{PurgeBefore, Purged, Retention};

/// Nothing is old enough: every instant at the epoch.
const KEEP_ALL: PurgeBefore = PurgeBefore {
    history: Timestamp::from_millis(0),
    dead: Timestamp::from_millis(0),
    idempotency_keys: Timestamp::from_millis(0),
    deleted_timers: Timestamp::from_millis(0),
};

/// Occurrences of timer 9 at `run_ats`, each taken to `status` the way the pipeline does.
async fn at_status<S: OccurrenceStore + ?Sized>(
    store: &S,
    run_ats: &[i64],
    status: OccurrenceStatus,
) {
    let rows: Vec<NewOccurrence> = run_ats.iter().map(|r| occ(9, *r, 1, 0)).collect();
    store.insert_occurrences(&rows).await.unwrap();
    let keys: Vec<TaskKey> = run_ats.iter().map(|r| key(9, *r)).collect();
    match status {
        OccurrenceStatus::Pending => {}
        OccurrenceStatus::Skipped => {
            store.skip_occurrences(&keys, "test").await.unwrap();
        }
        _ => {
            store.claim(&keys, claim_at(10, 60_000)).await.unwrap();
            let outcomes: Vec<Outcome> = keys
                .iter()
                .map(|k| {
                    let mut o = outcome(*k, 1, status, 20);
                    if status == OccurrenceStatus::Retrying {
                        o.next_attempt_at = Some(Timestamp::from_millis(T0));
                    }
                    o
                })
                .collect();
            store.record_outcomes(&outcomes).await.unwrap();
        }
    }
}

async fn statuses<S: OccurrenceStore + ?Sized>(
    store: &S,
    run_ats: &[i64],
) -> Vec<Option<OccurrenceStatus>> {
    let mut out = Vec::new();
    for r in run_ats {
        out.push(
            store
                .get_occurrence(key(9, *r))
                .await
                .unwrap()
                .map(|o| o.status),
        );
    }
    out
}

pub async fn finished_occurrences_go_after_their_retention<S>(store: Arc<S>)
where
    S: OccurrenceStore + Retention,
{
    at_status(&*store, &[1_000], OccurrenceStatus::Succeeded).await;
    at_status(&*store, &[2_000], OccurrenceStatus::Dead).await;
    at_status(&*store, &[3_000], OccurrenceStatus::Skipped).await;
    at_status(&*store, &[4_000], OccurrenceStatus::Failed).await;
    at_status(&*store, &[5_000], OccurrenceStatus::Pending).await;
    at_status(&*store, &[6_000], OccurrenceStatus::Retrying).await;
    at_status(&*store, &[7_000], OccurrenceStatus::Succeeded).await;
    let all = [1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000];

    assert_eq!(
        store.purge(&KEEP_ALL, 100).await.unwrap(),
        Purged::default()
    );
    // History before 6.5 s, dead letters kept longer (before 1.5 s only).
    let before = PurgeBefore {
        history: Timestamp::from_millis(6_500),
        dead: Timestamp::from_millis(1_500),
        ..KEEP_ALL
    };
    let purged = store.purge(&before, 100).await.unwrap();
    assert_eq!(purged.occurrences, 3);
    use OccurrenceStatus::*;
    assert_eq!(
        statuses(&*store, &all).await,
        vec![
            None,
            Some(Dead),
            None,
            None,
            Some(Pending),
            Some(Retrying),
            Some(Succeeded)
        ]
    );
    // Dead letters go after their own retention; live work never, however old.
    let everything = PurgeBefore {
        history: Timestamp::from_millis(T0),
        dead: Timestamp::from_millis(T0),
        ..KEEP_ALL
    };
    assert_eq!(store.purge(&everything, 100).await.unwrap().occurrences, 2);
    assert_eq!(
        statuses(&*store, &all).await,
        vec![None, None, None, None, Some(Pending), Some(Retrying), None]
    );
}

pub async fn purges_are_bounded_batches<S>(store: Arc<S>)
where
    S: OccurrenceStore + Retention,
{
    let runs: Vec<i64> = (1..=10).map(|i| i * 1_000).collect();
    at_status(&*store, &runs, OccurrenceStatus::Succeeded).await;
    let before = PurgeBefore {
        history: Timestamp::from_millis(T0),
        ..KEEP_ALL
    };
    let mut batches = Vec::new();
    loop {
        let n = store.purge(&before, 4).await.unwrap().occurrences;
        batches.push(n);
        if n < 4 {
            break;
        }
    }
    assert_eq!(batches, vec![4, 4, 2, 0][..batches.len()].to_vec());
    assert_eq!(batches.iter().sum::<u64>(), 10);
}

pub async fn old_idempotency_keys_and_deleted_timers_go<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + Retention + crate::Notifications,
{
    let req = || CreateTimer {
        timer: new_timer("billing", "keyed"),
        idempotency: Some(IdempotencyKey {
            key: "k".into(),
            fingerprint: "f".into(),
        }),
    };
    let first = store.create_timers(vec![req()], H).await.unwrap();
    let kept = store
        .create_timer(new_timer("billing", "kept"), H)
        .await
        .unwrap();
    let far = Timestamp::from_millis(i64::MAX / 2);
    // Keys older than a minute go: this one is younger.
    let young = PurgeBefore {
        idempotency_keys: first[0].timer.created_at.add_millis(-60_000),
        ..KEEP_ALL
    };
    assert_eq!(store.purge(&young, 100).await.unwrap().idempotency_keys, 0);
    let old = PurgeBefore {
        idempotency_keys: far,
        ..KEEP_ALL
    };
    assert_eq!(store.purge(&old, 100).await.unwrap().idempotency_keys, 1);
    store.delete_timer(first[0].timer.id).await.unwrap();
    let again = store.create_timers(vec![req()], H).await.unwrap();
    assert_ne!(
        again[0].timer.id, first[0].timer.id,
        "a purged key is free again"
    );

    // A deleted timer goes with its rows once deleted long enough, the failure streak it
    // was deleted in too; a live one stays whole.
    let (gone, live) = (first[0].timer.id, kept.timer.id);
    store.count_failures(&[gone, live]).await.unwrap();
    let deleted = PurgeBefore {
        deleted_timers: far,
        ..KEEP_ALL
    };
    let purged = store.purge(&deleted, 100).await.unwrap();
    assert_eq!(purged.timers, 1);
    assert_eq!(purged.occurrences, first[0].occurrences.len() as u64);
    for o in &first[0].occurrences {
        assert!(store.get_occurrence(o.key).await.unwrap().is_none());
    }
    for o in &kept.occurrences {
        assert!(store.get_occurrence(o.key).await.unwrap().is_some());
    }
    assert_eq!(store.get_timer(kept.timer.id).await.unwrap(), kept.timer);
    assert_eq!(
        store.end_streaks(&[gone, live]).await.unwrap(),
        vec![(live, 1)],
        "the deleted timer's streak went with it"
    );
}

const DAY: i64 = 86_400_000;

/// Rows due on different days (on PostgreSQL: in different partitions, each at the same
/// tuple id) are claimed one by one: a claim takes its own rows and no other.
pub async fn claims_take_only_their_rows_across_days<S>(store: Arc<S>)
where
    S: OccurrenceStore + Retention,
{
    let t0 = Timestamp::from_millis(T0);
    store
        .rotate(t0, t0.add_millis(3 * DAY), &KEEP_ALL)
        .await
        .unwrap();
    let rows: Vec<NewOccurrence> = (0..3).map(|d| occ(d + 1, T0 + d * DAY, 1, 0)).collect();
    store.insert_occurrences(&rows).await.unwrap();
    let claimed = store
        .claim(&[key(2, T0 + DAY)], claim_at(T0 + DAY, 60_000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].key, key(2, T0 + DAY));
    let status = |k| {
        let store = store.clone();
        async move { store.get_occurrence(k).await.unwrap().unwrap().status }
    };
    assert_eq!(status(key(1, T0)).await, OccurrenceStatus::Pending);
    assert_eq!(status(key(2, T0 + DAY)).await, OccurrenceStatus::Running);
    assert_eq!(
        status(key(3, T0 + 2 * DAY)).await,
        OccurrenceStatus::Pending
    );
}

/// Rotating and purging remove a day's finished rows and keep its live ones and the dead
/// letters still kept, whether the backend drops whole days or deletes rows; what is kept
/// stays claimable, and rows due after the prepared days are stored too.
pub async fn rotation_keeps_live_rows_and_dead_letters<S>(store: Arc<S>)
where
    S: OccurrenceStore + Retention,
{
    let t0 = Timestamp::from_millis(T0);
    store
        .rotate(t0, t0.add_millis(2 * DAY), &KEEP_ALL)
        .await
        .unwrap();
    use OccurrenceStatus::*;
    let day0 = [T0 + 1_000, T0 + 2_000, T0 + 3_000, T0 + 4_000, T0 + 5_000];
    at_status(&*store, &day0[..1], Succeeded).await;
    at_status(&*store, &day0[1..2], Dead).await;
    at_status(&*store, &day0[2..3], Skipped).await;
    at_status(&*store, &day0[3..4], Retrying).await;
    at_status(&*store, &day0[4..], Pending).await;
    // Beyond the prepared days (PostgreSQL: in the default partition).
    let later = T0 + 5 * DAY;
    at_status(&*store, &[later], Pending).await;

    // Ten days on, history kept for a week, dead letters for a month.
    let now = t0.add_millis(10 * DAY);
    let before = PurgeBefore {
        history: now.add_millis(-7 * DAY),
        dead: now.add_millis(-30 * DAY),
        ..KEEP_ALL
    };
    let rotated = store
        .rotate(now, now.add_millis(2 * DAY), &before)
        .await
        .unwrap();
    let mut removed = rotated.occurrences;
    loop {
        let n = store.purge(&before, 100).await.unwrap().occurrences;
        removed += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(removed, 2, "the succeeded and the skipped row");
    let mut all = day0.to_vec();
    all.push(later);
    assert_eq!(
        statuses(&*store, &all).await,
        vec![
            None,
            Some(Dead),
            None,
            Some(Retrying),
            Some(Pending),
            Some(Pending)
        ]
    );
    let claimed = store
        .claim(
            &[key(9, T0 + 5_000), key(9, later)],
            claim_at(later, 60_000),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2, "kept rows are still claimable");
    let again = store
        .rotate(now, now.add_millis(2 * DAY), &before)
        .await
        .unwrap();
    assert_eq!(
        again,
        crate::Rotated::default(),
        "a second rotation changes nothing"
    );
}
