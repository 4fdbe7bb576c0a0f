//! Timer writes store their first occurrences and watermark with the timer, in one
//! transaction; the migrator finds timers by watermark and moves watermarks forward.

use std::collections::HashMap;

use chime_domain::{EXHAUSTED, TimerSpec};

use super::*;
use crate::{Watermark, Written};

/// Ten seconds ahead, so an every-second timer writes about ten rows.
const TEN_SECONDS: Horizon = Horizon {
    lead: Duration::from_secs(10),
    max_rows: 100,
    spread: Duration::ZERO,
};

fn every_second(app: &str, name: &str) -> TimerSpec {
    let mut s = spec(app, name);
    s.schedule = ScheduleInput {
        every: Some("1s".into()),
        ..Default::default()
    }
    .resolve(chime_domain::SystemClock.now(), None, None)
    .expect("every second");
    s
}

fn new(spec: TimerSpec, enabled: bool) -> NewTimer {
    NewTimer {
        spec,
        enabled,
        runs_unwritten: false,
    }
}

/// Every occurrence the write reported is stored, pending, at the timer's version.
async fn assert_stored<S: OccurrenceStore + ?Sized>(store: &S, written: &Written) {
    for o in &written.occurrences {
        let row = store
            .get_occurrence(o.key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("occurrence {} was reported but not stored", o.key));
        assert_eq!(row.timer_version, written.timer.version);
        assert_eq!(row.status, OccurrenceStatus::Pending);
        assert_eq!(row.bucket, written.timer.bucket);
    }
}

/// The watermark of `id` as `timers_behind` reports it, if the timer is behind `before`.
async fn watermark_of<S: TimerStore + ?Sized>(
    store: &S,
    timer: &chime_domain::Timer,
    before: Timestamp,
) -> Option<Timestamp> {
    let mut after = None;
    loop {
        let page = store
            .timers_behind(timer.bucket, before, after, 50)
            .await
            .unwrap();
        if let Some(b) = page.iter().find(|b| b.timer.id == timer.id) {
            return Some(b.watermark);
        }
        let last = page.last()?;
        after = Some((last.watermark, last.timer.id));
    }
}

use chime_domain::Clock as _;

pub async fn creates_write_first_occurrences_and_watermark<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let single = store
        .create_timer(new(every_second("m", "single"), true), TEN_SECONDS)
        .await
        .unwrap();
    let n = single.occurrences.len();
    assert!(
        (9..=11).contains(&n),
        "{n} rows for ten seconds of an every-second timer"
    );
    let runs: Vec<Timestamp> = single.occurrences.iter().map(|o| o.key.run_at).collect();
    assert!(
        runs.windows(2)
            .all(|w| w[1].as_millis() - w[0].as_millis() == 1000)
    );
    assert!(runs[0] > single.timer.created_at);
    assert!(runs[n - 1] < single.timer.created_at.add_millis(10_000));
    assert_stored(&*store, &single).await;
    assert_eq!(
        watermark_of(&*store, &single.timer, EXHAUSTED).await,
        Some(runs[n - 1].add_millis(1000)),
        "the watermark is the first fire time not written"
    );

    let batch = store
        .create_timers(
            vec![
                CreateTimer {
                    timer: new(every_second("m", "b1"), true),
                    idempotency: None,
                },
                CreateTimer {
                    timer: new(spec("m", "yearly-ish"), true),
                    idempotency: None,
                },
            ],
            TEN_SECONDS,
        )
        .await
        .unwrap();
    assert!(batch[0].occurrences.len() >= 9);
    // Its first fire time is years ahead: written all the same, and nothing follows it
    // within the horizon, so the watermark is that one's successor.
    assert_eq!(batch[1].occurrences.len(), 1);
    for w in &batch {
        assert_stored(&*store, w).await;
    }
}

pub async fn a_one_shot_is_written_whole_and_never_behind<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let mut s = spec("m", "once");
    s.schedule = ScheduleInput {
        after: Some("1h".into()),
        ..Default::default()
    }
    .resolve(chime_domain::SystemClock.now(), None, None)
    .unwrap();
    let once = store.create_timer(new(s, true), TEN_SECONDS).await.unwrap();
    assert_eq!(once.occurrences.len(), 1);
    assert_stored(&*store, &once).await;
    assert_eq!(watermark_of(&*store, &once.timer, EXHAUSTED).await, None);
}

pub async fn a_failed_batch_leaves_no_occurrences<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let first = store
        .create_timer(new(every_second("m", "a"), true), TEN_SECONDS)
        .await
        .unwrap();
    let failed = store
        .create_timers(
            vec![
                CreateTimer {
                    timer: new(every_second("m", "b"), true),
                    idempotency: None,
                },
                CreateTimer {
                    timer: new(every_second("m", "a"), true),
                    idempotency: None,
                },
            ],
            TEN_SECONDS,
        )
        .await;
    assert!(
        matches!(failed, Err(StoreError::NameTaken { .. })),
        "{failed:?}"
    );
    let far = Timestamp::from_millis(i64::MAX / 2);
    let pending = store.find_overdue(far, far, 10_000).await.unwrap();
    assert!(!pending.is_empty());
    assert!(
        pending.iter().all(|o| o.key.timer_id == first.timer.id),
        "rows of a batch that failed were kept"
    );
}

pub async fn idempotent_repeats_write_nothing_more<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let req = || CreateTimer {
        timer: new(every_second("m", "idem"), true),
        idempotency: Some(IdempotencyKey {
            key: "k".into(),
            fingerprint: "f".into(),
        }),
    };
    let first = store.create_timers(vec![req()], TEN_SECONDS).await.unwrap();
    assert!(!first[0].occurrences.is_empty());
    let again = store.create_timers(vec![req()], TEN_SECONDS).await.unwrap();
    assert_eq!(again[0].timer, first[0].timer);
    assert!(again[0].occurrences.is_empty());
}

pub async fn enabling_and_updating_write_rows_at_the_new_version<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let off = store
        .create_timer(new(every_second("m", "later"), false), TEN_SECONDS)
        .await
        .unwrap();
    assert!(
        off.occurrences.is_empty(),
        "a disabled timer writes no rows"
    );
    assert_eq!(watermark_of(&*store, &off.timer, EXHAUSTED).await, None);

    let on = store
        .set_timer_enabled(off.timer.id, true, TEN_SECONDS)
        .await
        .unwrap();
    assert_eq!(on.timer.version, 2);
    assert!(on.occurrences.len() >= 9);
    assert!(on.occurrences.iter().all(|o| o.timer_version == 2));
    assert_stored(&*store, &on).await;
    let enabled_mark = watermark_of(&*store, &on.timer, EXHAUSTED).await.unwrap();

    // Enabling an enabled timer changes nothing and writes nothing.
    let again = store
        .set_timer_enabled(off.timer.id, true, TEN_SECONDS)
        .await
        .unwrap();
    assert!(again.occurrences.is_empty());
    assert_eq!(again.timer.version, 2);

    let mut slower = on.timer.spec.clone();
    slower.schedule = ScheduleInput {
        every: Some("2s".into()),
        ..Default::default()
    }
    .resolve(chime_domain::SystemClock.now(), None, None)
    .unwrap();
    let updated = store
        .update_timer(off.timer.id, Some(2), slower, TEN_SECONDS)
        .await
        .unwrap();
    assert_eq!(updated.timer.version, 3);
    let n = updated.occurrences.len();
    assert!((4..=6).contains(&n), "{n} rows for ten seconds every two");
    assert_stored(&*store, &updated).await;
    let updated_mark = watermark_of(&*store, &updated.timer, EXHAUSTED)
        .await
        .unwrap();
    assert_eq!(
        updated_mark,
        updated.occurrences[n - 1].key.run_at.add_millis(2000)
    );
    assert_ne!(updated_mark, enabled_mark);

    let disabled = store
        .set_timer_enabled(off.timer.id, false, TEN_SECONDS)
        .await
        .unwrap();
    assert!(disabled.occurrences.is_empty());
    assert_eq!(
        watermark_of(&*store, &disabled.timer, EXHAUSTED).await,
        None
    );
}

pub async fn timers_behind_page_by_watermark_and_advance_forward_only<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let mut by_bucket: HashMap<Bucket, Vec<chime_domain::Timer>> = HashMap::new();
    for i in 0..40 {
        let w = store
            .create_timer(new(every_second("m", &format!("t{i}")), true), TEN_SECONDS)
            .await
            .unwrap();
        by_bucket.entry(w.timer.bucket).or_default().push(w.timer);
    }
    // Forty timers over sixteen buckets: some bucket holds at least three.
    let (bucket, timers) = by_bucket.into_iter().max_by_key(|(_, t)| t.len()).unwrap();
    assert!(timers.len() >= 3);

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .timers_behind(bucket, EXHAUSTED, after, 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some((last.watermark, last.timer.id));
        seen.extend(page.into_iter().map(|b| (b.watermark, b.timer.id)));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pages come by watermark, then id");
    let ids: HashSet<TimerId> = seen.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids, timers.iter().map(|t| t.id).collect::<HashSet<_>>());

    // Nothing is behind its own watermark.
    let (oldest, _) = seen[0];
    assert!(
        store
            .timers_behind(bucket, oldest, None, 100)
            .await
            .unwrap()
            .is_empty()
    );

    let t = &timers[0];
    let mark = watermark_of(&*store, t, EXHAUSTED).await.unwrap();
    let stale = Watermark {
        id: t.id,
        version: t.version + 1,
        until: mark.add_millis(60_000),
    };
    let backwards = Watermark {
        id: t.id,
        version: t.version,
        until: mark.add_millis(-5_000),
    };
    assert_eq!(
        store.advance_watermarks(&[stale, backwards]).await.unwrap(),
        0
    );
    assert_eq!(watermark_of(&*store, t, EXHAUSTED).await, Some(mark));
    let forward = Watermark {
        id: t.id,
        version: t.version,
        until: mark.add_millis(60_000),
    };
    assert_eq!(store.advance_watermarks(&[forward]).await.unwrap(), 1);
    assert_eq!(
        watermark_of(&*store, t, EXHAUSTED).await,
        Some(mark.add_millis(60_000))
    );

    store.delete_timer(timers[1].id).await.unwrap();
    assert_eq!(watermark_of(&*store, &timers[1], EXHAUSTED).await, None);
}

pub async fn shrinking_the_bucket_count_moves_out_of_range_timers<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore,
{
    let mut written = Vec::new();
    for i in 0..30 {
        let enabled = i % 10 != 0;
        written.push(
            store
                .create_timer(
                    new(every_second("m", &format!("r{i}")), enabled),
                    TEN_SECONDS,
                )
                .await
                .unwrap(),
        );
    }
    let deleted = written.pop().unwrap();
    store.delete_timer(deleted.timer.id).await.unwrap();
    // Growing moves nothing: every stored bucket is still in range.
    let more = chime_domain::BucketCount::new(64).unwrap();
    assert!(store.rebucket(more, 100).await.unwrap().is_empty());

    let four = chime_domain::BucketCount::new(4).unwrap();
    let mut received = HashSet::new();
    loop {
        let moved = store.rebucket(four, 7).await.unwrap();
        if moved.is_empty() {
            break;
        }
        assert!(moved.len() <= 4);
        received.extend(moved);
    }
    assert!(!received.is_empty());
    for w in &written {
        let t = store.get_timer(w.timer.id).await.unwrap();
        let expected = if w.timer.bucket.get() < 4 {
            w.timer.bucket
        } else {
            Bucket::of(t.id, four)
        };
        assert_eq!(t.bucket, expected, "timer {}", t.id);
        assert!(t.bucket.get() < 4);
        for o in &w.occurrences {
            let row = store.get_occurrence(o.key).await.unwrap().unwrap();
            assert_eq!(row.bucket, expected, "occurrence {}", o.key);
        }
    }
}
