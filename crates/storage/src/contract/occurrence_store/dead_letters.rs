//! Dead letters: listed, filtered, paged and redriven.

use super::*;

/// Kills `k`: claims it and records it dead.
async fn dead(store: &dyn OccurrenceStore, k: TaskKey) {
    let won = store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
    assert_eq!(won.len(), 1);
    let mut o = outcome(k, won[0].attempt, OccurrenceStatus::Dead, T0 + 1);
    o.http_status = Some(500);
    o.error = Some("callback answered HTTP 500".into());
    assert_eq!(store.record_outcomes(&[o]).await.unwrap(), 1);
}

pub async fn dead_letters_are_listed_and_redriven<S>(store: Arc<S>)
where
    S: OccurrenceStore + TimerStore,
{
    let a = store
        .create_timer(new_timer("billing", "a"), H)
        .await
        .unwrap()
        .timer;
    let b = store
        .create_timer(new_timer("ops", "b"), H)
        .await
        .unwrap()
        .timer;
    let (ka1, ka2, kb) = (
        TaskKey::new(a.id, Timestamp::from_millis(T0)),
        TaskKey::new(a.id, Timestamp::from_millis(T0 + 1_000)),
        TaskKey::new(b.id, Timestamp::from_millis(T0)),
    );
    let alive = TaskKey::new(b.id, Timestamp::from_millis(T0 + 5_000));
    let rows: Vec<NewOccurrence> = [ka1, ka2, kb, alive]
        .iter()
        .map(|k| NewOccurrence {
            key: *k,
            timer_version: 1,
            bucket: Bucket::from_stored(0),
            due: None,
        })
        .collect();
    store.insert_occurrences(&rows).await.unwrap();
    for k in [ka1, ka2, kb] {
        dead(store.as_ref(), k).await;
    }

    let all = DeadFilter::default();
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let p = store.list_dead(&all, &page(2, token)).await.unwrap();
        seen.extend(p.items.iter().map(|o| o.key));
        match p.next_page_token {
            Some(t) => token = Some(t.as_str().to_owned()),
            None => break,
        }
    }
    assert_eq!(
        seen,
        vec![ka1, ka2, kb],
        "by timer, then run time; the live one left out"
    );
    let billing = DeadFilter {
        app: Some(AppName::parse("billing").unwrap()),
        timer_id: None,
    };
    let p = store.list_dead(&billing, &page(10, None)).await.unwrap();
    assert_eq!(
        p.items.iter().map(|o| o.key).collect::<Vec<_>>(),
        vec![ka1, ka2]
    );
    let of_b = DeadFilter {
        app: None,
        timer_id: Some(b.id),
    };
    assert_eq!(
        store
            .list_dead(&of_b, &page(10, None))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let foreign = store
        .list_dead(&billing, &page(10, token_of(&store, &all).await))
        .await;
    assert!(
        matches!(foreign, Err(StoreError::Invalid(_))),
        "tokens are bound to their query"
    );

    // Redrive one, then the rest of a timer's: pending again, fresh budget, due now.
    let now = Timestamp::from_millis(T0 + 60_000);
    assert_eq!(store.redrive(Redrive::One(ka1), now).await.unwrap(), 1);
    assert_eq!(
        store.redrive(Redrive::One(ka1), now).await.unwrap(),
        0,
        "not dead any more"
    );
    let o = store.get_occurrence(ka1).await.unwrap().unwrap();
    assert_eq!(
        (o.status, o.attempt, o.next_attempt_at, o.error),
        (OccurrenceStatus::Pending, 0, Some(now), None)
    );
    assert_eq!(store.redrive(Redrive::Timer(a.id), now).await.unwrap(), 1);
    assert_eq!(store.redrive(Redrive::Timer(b.id), now).await.unwrap(), 1);
    assert!(
        store
            .list_dead(&all, &page(10, None))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let won = store
        .claim(&[ka1], claim_at(T0 + 60_000, 30_000))
        .await
        .unwrap();
    assert_eq!(
        won[0].attempt, 1,
        "the redriven attempt counts from 1 again"
    );
}

async fn token_of<S: OccurrenceStore>(store: &Arc<S>, filter: &DeadFilter) -> Option<String> {
    store
        .list_dead(filter, &page(1, None))
        .await
        .unwrap()
        .next_page_token
        .map(|t| t.as_str().to_owned())
}
