//! The `OccurrenceStore` contract.

use super::*;

mod dead_letters;
mod leased;
mod skips;
pub use dead_letters::*;
pub use leased::*;
pub use skips::*;

async fn status_of(store: &dyn OccurrenceStore, k: TaskKey) -> OccurrenceStatus {
    store
        .get_occurrence(k)
        .await
        .unwrap()
        .expect("occurrence exists")
        .status
}

pub async fn insert_is_idempotent(store: Arc<dyn OccurrenceStore>) {
    let batch: Vec<_> = (0..100).map(|i| occ(1, T0 + i * 1000, 1, 3)).collect();
    assert_eq!(store.insert_occurrences(&batch).await.unwrap(), 100);
    assert_eq!(store.insert_occurrences(&batch).await.unwrap(), 0);
    // Repeats inside one batch are fine too.
    let repeated = vec![occ(2, T0, 1, 0), occ(2, T0, 1, 0)];
    assert_eq!(store.insert_occurrences(&repeated).await.unwrap(), 1);
    assert_eq!(store.insert_occurrences(&[]).await.unwrap(), 0);
    let o = store
        .get_occurrence(key(1, T0 + 5000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.status, OccurrenceStatus::Pending);
    assert_eq!(o.attempt, 0);
    assert_eq!(o.timer_version, 1);
    assert_eq!(o.bucket, Bucket::from_stored(3));
    assert_eq!(store.get_occurrence(key(1, T0 + 500)).await.unwrap(), None);
}

pub async fn newer_version_adopts_pending_rows_only(store: Arc<dyn OccurrenceStore>) {
    store
        .insert_occurrences(&[occ(1, T0, 1, 0), occ(1, T0 + 1000, 1, 0)])
        .await
        .unwrap();
    store
        .claim(&[key(1, T0 + 1000)], claim_at(T0, 30_000))
        .await
        .unwrap();
    let adopted = store
        .insert_occurrences(&[occ(1, T0, 2, 0), occ(1, T0 + 1000, 2, 0)])
        .await
        .unwrap();
    assert_eq!(adopted, 1);
    let pending = store.get_occurrence(key(1, T0)).await.unwrap().unwrap();
    assert_eq!(pending.timer_version, 2);
    let running = store
        .get_occurrence(key(1, T0 + 1000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.timer_version, 1);
    // An older version never overwrites a newer one.
    assert_eq!(
        store.insert_occurrences(&[occ(1, T0, 1, 0)]).await.unwrap(),
        0
    );
}

pub async fn claim_then_record_outcome(store: Arc<dyn OccurrenceStore>) {
    let k = key(7, T0);
    store.insert_occurrences(&[occ(7, T0, 4, 2)]).await.unwrap();
    let won = store
        .claim(&[k, key(7, T0 + 1)], claim_at(T0, 30_000))
        .await
        .unwrap();
    assert_eq!(won.len(), 1, "only existing occurrences are claimed");
    assert_eq!(won[0].key, k);
    assert_eq!(won[0].attempt, 1);
    assert_eq!(
        won[0].due, k.run_at,
        "a first attempt is due at its run time"
    );
    assert_eq!(won[0].timer_version, 4);
    assert_eq!(won[0].bucket, Bucket::from_stored(2));
    let running = store.get_occurrence(k).await.unwrap().unwrap();
    assert_eq!(running.status, OccurrenceStatus::Running);
    assert_eq!(
        running.lease_until,
        Some(Timestamp::from_millis(T0 + 30_000))
    );
    // A second claim while the lease holds wins nothing.
    assert!(
        store
            .claim(&[k], claim_at(T0 + 10, 30_000))
            .await
            .unwrap()
            .is_empty()
    );

    let recorded = store
        .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 12)])
        .await
        .unwrap();
    assert_eq!(recorded, 1);
    let done = store.get_occurrence(k).await.unwrap().unwrap();
    assert_eq!(done.status, OccurrenceStatus::Succeeded);
    assert_eq!(done.fired_at, Some(Timestamp::from_millis(T0 + 12)));
    assert_eq!(done.lateness_ms, Some(12));
    assert_eq!(done.http_status, Some(200));
    assert_eq!(done.output.as_deref(), Some("ok"));
    assert_eq!(done.lease_until, None);
    // Terminal: never claimed again, and a repeated outcome is ignored.
    assert!(
        store
            .claim(&[k], claim_at(T0 + 99_000, 30_000))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Failed, T0 + 50)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Succeeded);
}

pub async fn expired_claim_is_taken_over_and_late_outcome_ignored(store: Arc<dyn OccurrenceStore>) {
    let k = key(8, T0);
    store.insert_occurrences(&[occ(8, T0, 1, 0)]).await.unwrap();
    let first = store.claim(&[k], claim_at(T0, 1_000)).await.unwrap();
    assert_eq!(first[0].attempt, 1);
    // The first claimer went silent past its lease: a second claimer takes over.
    let second = store
        .claim(&[k], claim_at(T0 + 5_000, 1_000))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2);
    // The first claimer's late outcome must not overwrite the takeover.
    let late = store
        .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 6_000)])
        .await
        .unwrap();
    assert_eq!(late, 0);
    assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Running);
    let ok = store
        .record_outcomes(&[outcome(k, 2, OccurrenceStatus::Succeeded, T0 + 5_010)])
        .await
        .unwrap();
    assert_eq!(ok, 1);
}

pub async fn retrying_is_due_at_next_attempt_and_claimable(store: Arc<dyn OccurrenceStore>) {
    let k = key(9, T0);
    store.insert_occurrences(&[occ(9, T0, 1, 5)]).await.unwrap();
    store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
    let retry_at = Timestamp::from_millis(T0 + 2_000);
    let mut failed = outcome(k, 1, OccurrenceStatus::Retrying, T0 + 5);
    failed.http_status = Some(503);
    failed.error = Some("HTTP 503".into());
    failed.next_attempt_at = Some(retry_at);
    assert_eq!(store.record_outcomes(&[failed]).await.unwrap(), 1);
    let o = store.get_occurrence(k).await.unwrap().unwrap();
    assert_eq!(o.status, OccurrenceStatus::Retrying);
    assert_eq!(o.due_at(), retry_at);
    assert_eq!(o.error.as_deref(), Some("HTTP 503"));
    let b = Bucket::from_stored(5);
    let early = store
        .due_in_bucket(b, Timestamp::from_millis(T0), retry_at, 10)
        .await
        .unwrap();
    assert!(
        early.is_empty(),
        "not due before next_attempt_at: {early:?}"
    );
    let due = store
        .due_in_bucket(b, retry_at, retry_at.add_millis(1), 10)
        .await
        .unwrap();
    assert_eq!(due, vec![(k, retry_at)]);
    let again = store
        .claim(&[k], claim_at(T0 + 2_000, 30_000))
        .await
        .unwrap();
    assert_eq!(again[0].attempt, 2);
    assert_eq!(again[0].due, retry_at, "a retry is due at its next attempt");
}

pub async fn outcome_must_be_a_final_status(store: Arc<dyn OccurrenceStore>) {
    let k = key(10, T0);
    store
        .insert_occurrences(&[occ(10, T0, 1, 0)])
        .await
        .unwrap();
    store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
    for bad in [OccurrenceStatus::Pending, OccurrenceStatus::Running] {
        let r = store.record_outcomes(&[outcome(k, 1, bad, T0)]).await;
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad}: {r:?}");
    }
    assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Running);
}

pub async fn list_runs_newest_first_with_filter_and_pages(store: Arc<dyn OccurrenceStore>) {
    let batch: Vec<_> = (0..5).map(|i| occ(11, T0 + i * 1000, 1, 0)).collect();
    store.insert_occurrences(&batch).await.unwrap();
    store
        .insert_occurrences(&[occ(12, T0, 1, 0)])
        .await
        .unwrap();
    let k = key(11, T0 + 1000);
    store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
    store
        .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 1001)])
        .await
        .unwrap();

    let filter = RunFilter {
        timer_id: id(11),
        status: None,
        due_by: None,
    };
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let p = store.list_runs(&filter, &page(2, token)).await.unwrap();
        seen.extend(p.items.iter().map(|o| o.key.run_at.as_millis() - T0));
        match p.next_page_token {
            Some(t) => token = Some(t.as_str().to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, vec![4000, 3000, 2000, 1000, 0]);

    let history = RunFilter {
        due_by: Some(Timestamp::from_millis(T0 + 2_000)),
        ..filter.clone()
    };
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let p = store.list_runs(&history, &page(2, token)).await.unwrap();
        seen.extend(p.items.iter().map(|o| o.key.run_at.as_millis() - T0));
        match p.next_page_token {
            Some(t) => token = Some(t.as_str().to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, vec![2000, 1000, 0], "due_by is inclusive");

    let succeeded = RunFilter {
        timer_id: id(11),
        status: Some(OccurrenceStatus::Succeeded),
        due_by: None,
    };
    let p = store.list_runs(&succeeded, &page(10, None)).await.unwrap();
    assert_eq!(p.items.len(), 1);
    assert_eq!(p.items[0].key, k);
    assert_eq!(p.items[0].lateness_ms, Some(1));

    let bad = store
        .list_runs(&succeeded, &page(10, Some("c1nonsense".into())))
        .await;
    assert!(matches!(bad, Err(StoreError::Invalid(_))));
}

pub async fn find_overdue_reports_missed_and_abandoned_work(store: Arc<dyn OccurrenceStore>) {
    store
        .insert_occurrences(&[
            occ(13, T0, 1, 0),          // missed: overdue pending
            occ(13, T0 + 60_000, 1, 0), // not yet due
            occ(14, T0 + 1_000, 1, 0),  // claimed, lease expired
            occ(15, T0 + 2_000, 1, 0),  // claimed, lease still valid
            occ(16, T0 + 3_000, 1, 0),  // done
        ])
        .await
        .unwrap();
    store
        .claim(&[key(14, T0 + 1_000)], claim_at(T0 + 1_000, 1_000))
        .await
        .unwrap();
    store
        .claim(&[key(15, T0 + 2_000)], claim_at(T0 + 2_000, 600_000))
        .await
        .unwrap();
    store
        .claim(&[key(16, T0 + 3_000)], claim_at(T0 + 3_000, 1_000))
        .await
        .unwrap();
    store
        .record_outcomes(&[outcome(
            key(16, T0 + 3_000),
            1,
            OccurrenceStatus::Succeeded,
            T0 + 3_001,
        )])
        .await
        .unwrap();
    let now = Timestamp::from_millis(T0 + 30_000);
    let overdue = store.find_overdue(now, now, 100).await.unwrap();
    let keys: Vec<_> = overdue.iter().map(|o| o.key).collect();
    assert_eq!(keys, vec![key(13, T0), key(14, T0 + 1_000)]);
    let limited = store.find_overdue(now, now, 1).await.unwrap();
    assert_eq!(limited.len(), 1);
}

pub async fn due_in_bucket_is_scoped_to_bucket_window_and_status(store: Arc<dyn OccurrenceStore>) {
    store
        .insert_occurrences(&[
            occ(20, T0, 1, 1),
            occ(21, T0 + 10, 1, 1),
            occ(22, T0 + 20, 1, 2),
            occ(23, T0 + 60_000, 1, 1),
            occ(24, T0 + 30, 1, 1),
        ])
        .await
        .unwrap();
    store
        .claim(&[key(24, T0 + 30)], claim_at(T0, 30_000))
        .await
        .unwrap();
    let got = store
        .due_in_bucket(
            Bucket::from_stored(1),
            Timestamp::from_millis(T0),
            Timestamp::from_millis(T0 + 60_000),
            100,
        )
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![
            (key(20, T0), Timestamp::from_millis(T0)),
            (key(21, T0 + 10), Timestamp::from_millis(T0 + 10)),
        ]
    );
}

/// 8 claimers race over the same 10,000 occurrences: each is won exactly once.
pub async fn racing_claimers_win_each_occurrence_exactly_once(store: Arc<dyn OccurrenceStore>) {
    const N: i64 = 10_000;
    const CLAIMERS: usize = 8;
    const BATCH: usize = 250;
    let all: Vec<_> = (0..N)
        .map(|i| occ(1 + i % 97, T0 + i, 1, (i % 16) as u32))
        .collect();
    for chunk in all.chunks(5_000) {
        store.insert_occurrences(chunk).await.unwrap();
    }
    let keys: Arc<Vec<TaskKey>> = Arc::new(all.iter().map(|o| o.key).collect());
    let mut tasks = Vec::new();
    for c in 0..CLAIMERS {
        let store = store.clone();
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            // Each claimer walks the keys from a different offset and direction, so
            // batches overlap in every possible way.
            let mut order: Vec<TaskKey> = keys.to_vec();
            order.rotate_left(c * keys.len() / CLAIMERS);
            if c % 2 == 1 {
                order.reverse();
            }
            let mut won = Vec::new();
            for batch in order.chunks(BATCH) {
                loop {
                    match store.claim(batch, claim_at(T0 + 1, 600_000)).await {
                        Ok(got) => {
                            won.extend(got.into_iter().map(|c| c.key));
                            break;
                        }
                        // Busy is allowed (the caller retries); wrong answers are not.
                        Err(e) if e.is_retryable() => tokio::task::yield_now().await,
                        Err(e) => panic!("claim failed: {e}"),
                    }
                }
            }
            won
        }));
    }
    let mut total = 0;
    let mut distinct = HashSet::new();
    for t in tasks {
        let won = t.await.unwrap();
        total += won.len();
        distinct.extend(won);
    }
    assert_eq!(distinct.len(), N as usize, "every occurrence claimed");
    assert_eq!(total, N as usize, "no occurrence claimed twice");
}
