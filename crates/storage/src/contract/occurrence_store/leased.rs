//! First attempts taken under run leases: read, not claimed, and recorded over `pending`.

use super::*;

pub async fn first_attempts_are_read_not_claimed(store: Arc<dyn OccurrenceStore>) {
    let (waiting, claimed, backfilled) = (key(61, T0), key(61, T0 + 1_000), key(61, T0 + 2_000));
    store
        .insert_occurrences(&[occ(61, T0, 3, 5), occ(61, T0 + 1_000, 3, 5)])
        .await
        .unwrap();
    store
        .backfill(
            &[NewOccurrence {
                due: Some(Timestamp::from_millis(T0 + 9_000)),
                ..occ(61, T0 + 2_000, 3, 5)
            }],
            OverlapPolicy::Skip,
        )
        .await
        .unwrap();
    store.claim(&[claimed], claim_at(T0, 30_000)).await.unwrap();
    let first = store
        .first_attempts(&[waiting, claimed, backfilled, key(61, T0 + 3_000)])
        .await
        .unwrap();
    assert_eq!(
        first.iter().map(|c| c.key).collect::<Vec<_>>(),
        vec![waiting],
        "only a row waiting for its first attempt, not one under a policy of its own"
    );
    let c = first[0];
    assert!(c.leased);
    assert_eq!(c.attempt, 1);
    assert_eq!(c.due, waiting.run_at);
    assert_eq!((c.timer_version, c.bucket), (3, Bucket::from_stored(5)));
    let row = store.get_occurrence(waiting).await.unwrap().unwrap();
    assert_eq!(
        (row.status, row.attempt, row.lease_until),
        (OccurrenceStatus::Pending, 0, None),
        "reading it changed nothing"
    );
    assert!(store.first_attempts(&[]).await.unwrap().is_empty());
}

pub async fn a_leased_outcome_moves_the_pending_row_on_once(store: Arc<dyn OccurrenceStore>) {
    let (k, retried, taken_over) = (key(62, T0), key(62, T0 + 1_000), key(62, T0 + 2_000));
    store
        .insert_occurrences(&[
            occ(62, T0, 1, 0),
            occ(62, T0 + 1_000, 1, 0),
            occ(62, T0 + 2_000, 1, 0),
        ])
        .await
        .unwrap();
    let leased = |k, status, at| Outcome {
        leased: true,
        ..outcome(k, 1, status, at)
    };
    let retrying = Outcome {
        next_attempt_at: Some(Timestamp::from_millis(T0 + 60_000)),
        ..leased(retried, OccurrenceStatus::Retrying, T0 + 1_005)
    };
    // A row claimed meanwhile (the lease lapsed, say) is the claimer's: the leased outcome
    // is ignored.
    store
        .claim(&[taken_over], claim_at(T0 + 2_000, 30_000))
        .await
        .unwrap();
    let recorded = store
        .record_outcomes(&[
            leased(k, OccurrenceStatus::Succeeded, T0 + 7),
            retrying,
            leased(taken_over, OccurrenceStatus::Succeeded, T0 + 2_003),
        ])
        .await
        .unwrap();
    assert_eq!(recorded, 2);
    let done = store.get_occurrence(k).await.unwrap().unwrap();
    assert_eq!(
        (
            done.status,
            done.attempt,
            done.lateness_ms,
            done.lease_until
        ),
        (OccurrenceStatus::Succeeded, 1, Some(7), None)
    );
    let again = store.get_occurrence(retried).await.unwrap().unwrap();
    assert_eq!(
        (again.status, again.attempt),
        (OccurrenceStatus::Retrying, 1)
    );
    assert_eq!(again.due_at(), Timestamp::from_millis(T0 + 60_000));
    let running = store.get_occurrence(taken_over).await.unwrap().unwrap();
    assert_eq!(
        (running.status, running.attempt),
        (OccurrenceStatus::Running, 1)
    );
    // The retry is claimed on its row at attempt 2; a repeated leased outcome is ignored.
    let next = store
        .claim(&[retried], claim_at(T0 + 60_000, 30_000))
        .await
        .unwrap();
    assert_eq!(next[0].attempt, 2);
    assert_eq!(
        store
            .record_outcomes(&[leased(k, OccurrenceStatus::Failed, T0 + 9)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Succeeded);
}
