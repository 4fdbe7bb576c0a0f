//! Backfilled occurrences: marked with the overlap policy they are claimed under, added once,
//! and left by the batch claim to the exclusive one when that policy is not `allow_all`.

use chime_domain::OverlapPolicy;

use super::*;

/// A backfill row of `timer` for the past run time `run_at`, due at `due`.
fn backfilled(timer: i64, run_at: i64, due: i64) -> NewOccurrence {
    NewOccurrence {
        due: Some(Timestamp::from_millis(due)),
        ..occ(timer, run_at, 1, 0)
    }
}

pub async fn backfilled_occurrences_are_marked_and_added_once<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    store
        .insert_occurrences(&[occ(51, T0, 1, 0)])
        .await
        .unwrap();
    // The run time that has a row already is left alone; the other is added, marked.
    let added = store
        .backfill(
            &[
                backfilled(51, T0, T0 + 50_000),
                backfilled(51, T0 + 1_000, T0 + 60_000),
            ],
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    assert_eq!(added, vec![key(51, T0 + 1_000)]);
    let scheduled = store.get_occurrence(key(51, T0)).await.unwrap().unwrap();
    assert_eq!(scheduled.backfill, None);
    assert_eq!(scheduled.due_at(), Timestamp::from_millis(T0));
    let run = store
        .get_occurrence(key(51, T0 + 1_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.backfill, Some(OverlapPolicy::AllowAll));
    assert_eq!(run.due_at(), Timestamp::from_millis(T0 + 60_000));
    // Again: nothing more.
    let again = store
        .backfill(
            &[backfilled(51, T0 + 1_000, T0 + 70_000)],
            OverlapPolicy::Skip,
        )
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    // Listed as runs, marked; claimed by the batch under `allow_all`, flagged.
    let runs = store
        .list_runs(
            &RunFilter {
                timer_id: id(51),
                status: None,
                due_by: None,
            },
            &PageRequest::default(),
        )
        .await
        .unwrap();
    let marks: Vec<_> = runs.items.iter().map(|o| o.backfill).collect();
    assert_eq!(marks, vec![Some(OverlapPolicy::AllowAll), None]);
    let claimed = store
        .claim(&[key(51, T0 + 1_000)], claim_at(T0 + 60_000, 60_000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(claimed[0].backfill);
    assert_eq!(claimed[0].due, Timestamp::from_millis(T0 + 60_000));
}

pub async fn backfilled_occurrences_are_claimed_under_their_own_policy<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    use crate::Exclusive;
    let at = |ms: i64| claim_at(ms, 60_000);
    // Timer 52 (allow_all) has a run in flight; its `skip` backfill is not claimed by the
    // batch but skipped by the exclusive claim the executor falls back to.
    store
        .insert_occurrences(&[occ(52, T0, 1, 0)])
        .await
        .unwrap();
    store.claim(&[key(52, T0)], at(T0)).await.unwrap();
    store
        .backfill(
            &[backfilled(52, T0 - 10_000, T0 + 1_000)],
            OverlapPolicy::Skip,
        )
        .await
        .unwrap();
    let batch = store
        .claim(&[key(52, T0 - 10_000)], at(T0 + 1_000))
        .await
        .unwrap();
    assert!(batch.is_empty(), "{batch:?}");
    assert_eq!(
        store
            .claim_exclusive(
                key(52, T0 - 10_000),
                at(T0 + 1_000),
                OverlapPolicy::AllowAll
            )
            .await
            .unwrap(),
        Exclusive::Skipped {
            beside: Timestamp::from_millis(T0)
        }
    );
    // A scheduled run of an allow_all timer that another claimer holds: not claimable.
    assert_eq!(
        store
            .claim_exclusive(key(52, T0), at(T0 + 1_000), OverlapPolicy::AllowAll)
            .await
            .unwrap(),
        Exclusive::NotClaimable
    );

    // Timer 53, `buffer_one` backfill: the first due waits for the run in flight, the next
    // is skipped, and the waiting one starts once the run in flight ended.
    store
        .insert_occurrences(&[occ(53, T0, 1, 0)])
        .await
        .unwrap();
    store.claim(&[key(53, T0)], at(T0)).await.unwrap();
    store
        .backfill(
            &[
                backfilled(53, T0 - 20_000, T0 + 1_000),
                backfilled(53, T0 - 10_000, T0 + 2_000),
            ],
            OverlapPolicy::BufferOne,
        )
        .await
        .unwrap();
    let first = store
        .claim_exclusive(
            key(53, T0 - 20_000),
            at(T0 + 1_000),
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    assert!(matches!(first, Exclusive::Waiting { .. }), "{first:?}");
    let second = store
        .claim_exclusive(
            key(53, T0 - 10_000),
            at(T0 + 2_000),
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    assert!(matches!(second, Exclusive::Skipped { .. }), "{second:?}");
    store
        .record_outcomes(&[outcome(
            key(53, T0),
            1,
            OccurrenceStatus::Succeeded,
            T0 + 2_500,
        )])
        .await
        .unwrap();
    let now_first = store
        .claim_exclusive(
            key(53, T0 - 20_000),
            at(T0 + 3_000),
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    assert!(
        matches!(now_first, Exclusive::Claimed(ref c) if c.backfill),
        "{now_first:?}"
    );

    // Timer 54 skips overlaps, but its `allow_all` backfill starts beside its run in flight.
    store
        .insert_occurrences(&[occ(54, T0, 1, 0)])
        .await
        .unwrap();
    store.claim(&[key(54, T0)], at(T0)).await.unwrap();
    store
        .backfill(
            &[backfilled(54, T0 - 10_000, T0 + 1_000)],
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    let beside = store
        .claim_exclusive(key(54, T0 - 10_000), at(T0 + 1_000), OverlapPolicy::Skip)
        .await
        .unwrap();
    assert!(matches!(beside, Exclusive::Claimed(_)), "{beside:?}");
}

pub async fn only_backfills_under_their_own_policy_are_held_for_exclusive_claims<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    let at = |ms: i64| claim_at(ms, 60_000);
    // Timer 55: a scheduled run in flight, a `skip` backfill and an `allow_all` backfill.
    store
        .insert_occurrences(&[occ(55, T0, 1, 0)])
        .await
        .unwrap();
    store.claim(&[key(55, T0)], at(T0)).await.unwrap();
    store
        .backfill(
            &[backfilled(55, T0 - 10_000, T0 + 1_000)],
            OverlapPolicy::Skip,
        )
        .await
        .unwrap();
    store
        .backfill(
            &[backfilled(55, T0 - 20_000, T0 + 1_000)],
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    // Timer 56: a `buffer_one` backfill claimed (its lease runs to T0 + 61 s), and one
    // finished.
    store
        .backfill(
            &[
                backfilled(56, T0 - 10_000, T0 + 1_000),
                backfilled(56, T0 - 5_000, T0 + 1_000),
            ],
            OverlapPolicy::BufferOne,
        )
        .await
        .unwrap();
    let first = store
        .claim_exclusive(
            key(56, T0 - 10_000),
            at(T0 + 1_000),
            OverlapPolicy::AllowAll,
        )
        .await
        .unwrap();
    assert!(matches!(first, crate::Exclusive::Claimed(_)), "{first:?}");
    store
        .record_outcomes(&[outcome(
            key(56, T0 - 10_000),
            1,
            OccurrenceStatus::Succeeded,
            T0 + 1_500,
        )])
        .await
        .unwrap();
    let second = store
        .claim_exclusive(key(56, T0 - 5_000), at(T0 + 2_000), OverlapPolicy::AllowAll)
        .await
        .unwrap();
    assert!(matches!(second, crate::Exclusive::Claimed(_)), "{second:?}");

    let asked = [
        key(55, T0),
        key(55, T0 - 10_000),
        key(55, T0 - 20_000),
        key(55, T0 + 5_000),
        key(56, T0 - 10_000),
        key(56, T0 - 5_000),
    ];
    let held = |now: i64| {
        let store = store.clone();
        async move {
            let mut held = store
                .held_for_exclusive(&asked, Timestamp::from_millis(now))
                .await
                .unwrap();
            held.sort();
            held
        }
    };
    // Only the pending `skip` backfill: not the claimed run, the `allow_all` backfill, the
    // unknown run time, the finished backfill or the one whose claim is live.
    assert_eq!(held(T0 + 3_000).await, vec![key(55, T0 - 10_000)]);
    // Once its claim lapsed, the claimed `buffer_one` backfill is claimable again.
    assert_eq!(
        held(T0 + 100_000).await,
        vec![key(55, T0 - 10_000), key(56, T0 - 5_000)]
    );
    assert!(
        store
            .held_for_exclusive(&[], Timestamp::from_millis(T0))
            .await
            .unwrap()
            .is_empty()
    );
}
