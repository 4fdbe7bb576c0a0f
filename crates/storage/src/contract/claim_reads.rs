//! A batch's timers and first attempts read together, as an executor reads a batch whose
//! timers it does not hold: the same as the two reads apart.

use super::*;

pub async fn a_batch_reads_its_timers_and_first_attempts_at_once<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    let live = store
        .create_timer(new_timer("billing", "read-live"), H)
        .await
        .unwrap()
        .timer;
    let gone = store
        .create_timer(new_timer("billing", "read-gone"), H)
        .await
        .unwrap()
        .timer;
    // Far from the rows the creates wrote.
    let base = T0 + 20 * 86_400_000;
    let (l, g) = (live.id.get(), gone.id.get());
    store
        .insert_occurrences(&[
            occ(l, base, live.version, live.bucket.get()),
            occ(l, base + 1_000, live.version, live.bucket.get()),
            occ(l, base + 2_000, live.version, live.bucket.get()),
            occ(g, base, gone.version, gone.bucket.get()),
        ])
        .await
        .unwrap();
    // One row claimed already: no first attempt any more.
    store
        .claim(&[key(l, base + 1_000)], claim_at(base, 30_000))
        .await
        .unwrap();
    store.delete_timer(gone.id).await.unwrap();
    let keys = [
        key(l, base),
        key(l, base + 1_000),
        key(l, base + 2_000),
        key(l, base + 3_000),
        key(g, base),
        key(99_999, base),
    ];
    let read = store.timers_and_first_attempts(&keys).await.unwrap();
    let apart = store.get_timers(&[live.id, gone.id]).await.unwrap();
    assert_eq!(
        read.timers.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![live.id],
        "the live timer, once, however many keys name it"
    );
    assert_eq!(read.timers[0].version, apart[0].version);
    assert_eq!(read.timers[0].bucket, apart[0].bucket);
    assert_eq!(read.timers[0].spec, apart[0].spec);
    let mut first = store.first_attempts(&keys).await.unwrap();
    let mut together = read.first.clone();
    first.sort_by_key(|c| c.key);
    together.sort_by_key(|c| c.key);
    assert_eq!(together, first, "the rows as first_attempts reads them");
    assert_eq!(
        together.iter().map(|c| c.key).collect::<Vec<_>>(),
        vec![key(g, base), key(l, base), key(l, base + 2_000)]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>(),
        "waiting rows only, a deleted timer's too"
    );
    let of_gone = together.iter().find(|c| c.key.timer_id == gone.id).unwrap();
    assert_eq!(of_gone.timer_now, None, "its timer is gone");
    let of_live = together.iter().find(|c| c.key == key(l, base)).unwrap();
    assert_eq!(of_live.timer_now, Some(live.version));
    assert!(of_live.leased);
    assert!(
        store
            .timers_and_first_attempts(&[])
            .await
            .unwrap()
            .timers
            .is_empty()
    );
}
