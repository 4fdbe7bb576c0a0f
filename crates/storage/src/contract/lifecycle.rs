//! A timer's life beyond its spec: pause notes, listing by state, name and labels, and
//! timers that delete themselves once done.

use std::collections::BTreeMap;

use chime_domain::{Labels, OnComplete, OverlapPolicy, PauseNote, TimerState};

use super::*;

fn labelled(app: &str, name: &str, labels: &[(&str, &str)]) -> NewTimer {
    let mut t = new_timer(app, name);
    let map: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    t.spec.labels = Labels::parse(map).unwrap();
    t
}

/// A one-shot at `T0 + at_ms`.
fn one_shot(app: &str, name: &str, at_ms: i64, on_complete: OnComplete) -> NewTimer {
    let at = Timestamp::from_millis(T0 + at_ms);
    let schedule = ScheduleInput {
        at: Some(at.to_rfc3339()),
        ..Default::default()
    };
    let mut spec = spec_with(app, name, &schedule, Timestamp::from_millis(T0));
    spec.on_complete = on_complete;
    NewTimer {
        spec,
        enabled: true,
        runs_unwritten: false,
    }
}

fn note(reason: &str, at: i64) -> PauseNote {
    PauseNote {
        reason: reason.into(),
        at: Timestamp::from_millis(at),
        by: Some("tok1".into()),
    }
}

pub async fn pause_notes_are_kept_until_enabled<S: TimerStore + ?Sized>(store: Arc<S>) {
    let t = store
        .create_timer(new_timer("billing", "t"), H)
        .await
        .unwrap()
        .timer;
    let paused = store
        .pause_timer(t.id, &note("invoices frozen", T0))
        .await
        .unwrap();
    assert!(!paused.enabled);
    assert_eq!(paused.version, t.version + 1);
    assert_eq!(paused.paused, Some(note("invoices frozen", T0)));
    // Pausing again replaces the note without a new version.
    let again = store
        .pause_timer(t.id, &note("still frozen", T0 + 5))
        .await
        .unwrap();
    assert_eq!(again.version, paused.version);
    assert_eq!(
        store.get_timer(t.id).await.unwrap().paused,
        Some(note("still frozen", T0 + 5))
    );
    // Enabling clears it.
    let on = store.set_timer_enabled(t.id, true, H).await.unwrap().timer;
    assert!(on.enabled);
    assert_eq!(on.paused, None);
    assert_eq!(store.get_timer(t.id).await.unwrap().paused, None);
    assert!(matches!(
        store.pause_timer(id(999_999_999), &note("x", T0)).await,
        Err(StoreError::TimerNotFound(_))
    ));
}

pub async fn timers_are_listed_by_state_name_prefix_and_labels<S: TimerStore + ?Sized>(
    store: Arc<S>,
) {
    let create = |t: NewTimer| {
        let store = store.clone();
        async move { store.create_timer(t, H).await.unwrap().timer.id }
    };
    let a = create(labelled("lab", "nightly-a", &[("team", "billing")])).await;
    let b = create(labelled(
        "lab",
        "nightly-b",
        &[("team", "payroll"), ("env", "prod")],
    ))
    .await;
    let once = create(one_shot("lab", "once", 3_600_000, OnComplete::Keep)).await;
    let paused = create(labelled("lab", "paused", &[("team", "billing")])).await;
    store.pause_timer(paused, &note("", T0)).await.unwrap();

    let later = Timestamp::from_millis(T0 + 2 * 3_600_000);
    let list = |f: TimerFilter| {
        let store = store.clone();
        async move {
            let f = TimerFilter {
                app: Some(AppName::parse("lab").unwrap()),
                ..f
            };
            let p = store.list_timers(&f, &page(100, None)).await.unwrap();
            p.items.iter().map(|t| t.id).collect::<Vec<_>>()
        }
    };
    let by_state = |s| TimerFilter {
        state: Some((s, later)),
        ..Default::default()
    };
    assert_eq!(list(by_state(TimerState::Enabled)).await, vec![a, b]);
    assert_eq!(list(by_state(TimerState::Done)).await, vec![once]);
    assert_eq!(list(by_state(TimerState::Paused)).await, vec![paused]);
    // Before the one-shot's time it is still enabled.
    let before = TimerFilter {
        state: Some((TimerState::Enabled, Timestamp::from_millis(T0))),
        ..Default::default()
    };
    assert_eq!(list(before).await, vec![a, b, once]);

    let prefix = TimerFilter {
        name_prefix: Some("nightly-".into()),
        ..Default::default()
    };
    assert_eq!(list(prefix).await, vec![a, b]);

    let labels = |pairs: &[(&str, &str)]| TimerFilter {
        labels: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };
    assert_eq!(list(labels(&[("team", "billing")])).await, vec![a, paused]);
    assert_eq!(
        list(labels(&[("team", "payroll"), ("env", "prod")])).await,
        vec![b]
    );
    assert!(
        list(labels(&[("team", "payroll"), ("env", "dev")]))
            .await
            .is_empty()
    );
    let both = TimerFilter {
        state: Some((TimerState::Enabled, later)),
        ..labels(&[("team", "billing")])
    };
    assert_eq!(list(both).await, vec![a]);
}

pub async fn finished_timers_that_asked_are_removed_once_their_runs_ended<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    let gone = store
        .create_timer(one_shot("fin", "gone", 1_000, OnComplete::Delete), H)
        .await
        .unwrap();
    let kept = store
        .create_timer(one_shot("fin", "kept", 1_000, OnComplete::Keep), H)
        .await
        .unwrap();
    let later = store
        .create_timer(one_shot("fin", "later", 3_600_000, OnComplete::Delete), H)
        .await
        .unwrap();
    let ids = [gone.timer.id, kept.timer.id, later.timer.id];
    let after = Timestamp::from_millis(T0 + 2_000);
    // Its occurrence has not run yet: nothing goes.
    assert_eq!(gone.occurrences.len(), 1);
    assert!(store.remove_finished(&ids, after).await.unwrap().is_empty());
    let keys: Vec<TaskKey> = [&gone, &kept]
        .iter()
        .flat_map(|w| w.occurrences.iter().map(|o| o.key))
        .collect();
    store.skip_occurrences(&keys, "test").await.unwrap();
    assert_eq!(
        store.remove_finished(&ids, after).await.unwrap(),
        vec![gone.timer.id]
    );
    assert!(matches!(
        store.get_timer(gone.timer.id).await,
        Err(StoreError::TimerNotFound(_))
    ));
    store.get_timer(kept.timer.id).await.unwrap();
    store.get_timer(later.timer.id).await.unwrap();
    assert!(store.remove_finished(&ids, after).await.unwrap().is_empty());
}

pub async fn exclusive_claims_skip_while_another_occurrence_is_in_flight<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    use crate::Exclusive;
    let rows: Vec<NewOccurrence> = (0..4).map(|i| occ(31, T0 + i * 1_000, 1, 0)).collect();
    store.insert_occurrences(&rows).await.unwrap();
    let at = |i: i64| claim_at(T0 + i * 1_000, 60_000);
    let first = store
        .claim_exclusive(key(31, T0), at(0), OverlapPolicy::Skip)
        .await
        .unwrap();
    assert!(
        matches!(first, Exclusive::Claimed(ref c) if c.attempt == 1),
        "{first:?}"
    );
    // The first is in flight: the second is skipped, saying beside what.
    let second = store
        .claim_exclusive(key(31, T0 + 1_000), at(1), OverlapPolicy::Skip)
        .await
        .unwrap();
    assert_eq!(
        second,
        Exclusive::Skipped {
            beside: Timestamp::from_millis(T0)
        }
    );
    let o = store
        .get_occurrence(key(31, T0 + 1_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.status, OccurrenceStatus::Skipped);
    assert!(o.error.unwrap().starts_with("overlap:"));
    // Claiming it again finds nothing to claim.
    assert_eq!(
        store
            .claim_exclusive(key(31, T0 + 1_000), at(1), OverlapPolicy::Skip)
            .await
            .unwrap(),
        Exclusive::NotClaimable
    );
    // Retrying blocks too; once it succeeded, the next one runs.
    let retrying = Outcome {
        status: OccurrenceStatus::Retrying,
        next_attempt_at: Some(Timestamp::from_millis(T0 + 10_000)),
        ..outcome(key(31, T0), 1, OccurrenceStatus::Retrying, T0)
    };
    store.record_outcomes(&[retrying]).await.unwrap();
    assert!(matches!(
        store
            .claim_exclusive(key(31, T0 + 2_000), at(2), OverlapPolicy::Skip)
            .await
            .unwrap(),
        Exclusive::Skipped { .. }
    ));
    // Its own retry is not blocked by itself.
    let retry = store
        .claim_exclusive(key(31, T0), at(10), OverlapPolicy::Skip)
        .await
        .unwrap();
    assert!(
        matches!(retry, Exclusive::Claimed(ref c) if c.attempt == 2),
        "{retry:?}"
    );
    store
        .record_outcomes(&[outcome(
            key(31, T0),
            2,
            OccurrenceStatus::Succeeded,
            T0 + 10_000,
        )])
        .await
        .unwrap();
    assert!(matches!(
        store
            .claim_exclusive(key(31, T0 + 3_000), at(11), OverlapPolicy::Skip)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
    // A claim whose lease lapsed (its executor died) blocks nothing.
    store
        .insert_occurrences(&[occ(31, T0 + 4_000, 1, 0)])
        .await
        .unwrap();
    assert!(matches!(
        store
            .claim_exclusive(key(31, T0 + 4_000), at(100), OverlapPolicy::Skip)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
}

pub async fn buffer_one_keeps_one_occurrence_waiting_and_skips_the_rest<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    use crate::Exclusive;
    let buffer = OverlapPolicy::BufferOne;
    let rows: Vec<NewOccurrence> = (0..4).map(|i| occ(32, T0 + i * 1_000, 1, 0)).collect();
    store.insert_occurrences(&rows).await.unwrap();
    let at = |i: i64| claim_at(T0 + i * 1_000, 60_000);
    assert!(matches!(
        store
            .claim_exclusive(key(32, T0), at(0), buffer)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
    // The first is in flight: the second waits, left pending.
    let second = key(32, T0 + 1_000);
    assert_eq!(
        store.claim_exclusive(second, at(1), buffer).await.unwrap(),
        Exclusive::Waiting {
            beside: Timestamp::from_millis(T0)
        }
    );
    let o = store.get_occurrence(second).await.unwrap().unwrap();
    assert_eq!(o.status, OccurrenceStatus::Pending);
    // Offered again while the first still runs: it still waits.
    assert!(matches!(
        store.claim_exclusive(second, at(2), buffer).await.unwrap(),
        Exclusive::Waiting { .. }
    ));
    // The third finds one waiting already: skipped, saying so.
    let third = key(32, T0 + 2_000);
    assert!(matches!(
        store.claim_exclusive(third, at(2), buffer).await.unwrap(),
        Exclusive::Skipped { .. }
    ));
    let o = store.get_occurrence(third).await.unwrap().unwrap();
    assert_eq!(o.status, OccurrenceStatus::Skipped);
    assert!(o.error.unwrap().contains("waits for it"));
    // The first ends: the waiting one runs next, and the fourth then waits for it.
    store
        .record_outcomes(&[outcome(key(32, T0), 1, OccurrenceStatus::Succeeded, T0)])
        .await
        .unwrap();
    assert!(matches!(
        store.claim_exclusive(second, at(3), buffer).await.unwrap(),
        Exclusive::Claimed(_)
    ));
    assert_eq!(
        store
            .claim_exclusive(key(32, T0 + 3_000), at(3), buffer)
            .await
            .unwrap(),
        Exclusive::Waiting {
            beside: Timestamp::from_millis(T0 + 1_000)
        }
    );
}

pub async fn racing_exclusive_claims_of_one_timer_start_one<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    use crate::Exclusive;
    // Many rounds of many racers: a check-then-claim without mutual exclusion lets two
    // through in some round.
    for round in 0..20i64 {
        let timer = 100 + round;
        let rows: Vec<NewOccurrence> = (0..16).map(|i| occ(timer, T0 + i, 1, 0)).collect();
        store.insert_occurrences(&rows).await.unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(16));
        let racers: Vec<_> = (0..16)
            .map(|i| {
                let (store, start) = (store.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store
                        .claim_exclusive(
                            key(timer, T0 + i),
                            claim_at(T0 + 20, 60_000),
                            OverlapPolicy::Skip,
                        )
                        .await
                })
            })
            .collect();
        let mut claimed = 0;
        for r in racers {
            if matches!(r.await.unwrap().unwrap(), Exclusive::Claimed(_)) {
                claimed += 1;
            }
        }
        assert_eq!(
            claimed, 1,
            "round {round}: one occurrence of a timer in flight at a time"
        );
    }
}

pub async fn windowed_occurrences_are_due_at_their_place<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    let mut moved = occ(41, T0, 1, 3);
    moved.due = Some(Timestamp::from_millis(T0 + 1_234));
    store
        .insert_occurrences(&[moved, occ(42, T0, 1, 3)])
        .await
        .unwrap();
    // Due where the window put it, not at its run time.
    let due = store
        .due_in_bucket(
            Bucket::from_stored(3),
            Timestamp::from_millis(T0 - 10_000),
            Timestamp::from_millis(T0 + 10_000),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        due,
        vec![
            (key(42, T0), Timestamp::from_millis(T0)),
            (key(41, T0), Timestamp::from_millis(T0 + 1_234)),
        ]
    );
    let claimed = store
        .claim(&[key(41, T0)], claim_at(T0 + 1_000, 60_000))
        .await
        .unwrap();
    assert_eq!(claimed[0].due, Timestamp::from_millis(T0 + 1_234));
}

pub async fn cancel_other_ends_the_earlier_occurrence_in_flight<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    use crate::Exclusive;
    let cancel = OverlapPolicy::CancelOther;
    let at = |ms: i64| claim_at(ms, 60_000);
    let rows: Vec<NewOccurrence> = (0..4).map(|i| occ(61, T0 + i * 1_000, 1, 0)).collect();
    store.insert_occurrences(&rows).await.unwrap();
    assert!(matches!(
        store
            .claim_exclusive(key(61, T0), at(T0), cancel)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
    // The next one starts and ends the first, which its executor learns from still_running.
    assert!(matches!(
        store
            .claim_exclusive(key(61, T0 + 1_000), at(T0 + 1_000), cancel)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
    let first = store.get_occurrence(key(61, T0)).await.unwrap().unwrap();
    assert_eq!(first.status, OccurrenceStatus::Skipped);
    assert!(
        first
            .error
            .as_deref()
            .unwrap()
            .starts_with("overlap: cancelled"),
        "{first:?}"
    );
    let running = store
        .still_running(&[
            (key(61, T0), 1),
            (key(61, T0 + 1_000), 1),
            (key(61, T0 + 1_000), 2),
        ])
        .await
        .unwrap();
    assert_eq!(running, vec![key(61, T0 + 1_000)]);
    // The aborted callback's outcome, should it come, is not recorded.
    let late = outcome(key(61, T0), 1, OccurrenceStatus::Succeeded, T0 + 1_500);
    assert_eq!(store.record_outcomes(&[late]).await.unwrap(), 0);
    // A retrying one is ended too: no retry is made.
    let retrying = Outcome {
        next_attempt_at: Some(Timestamp::from_millis(T0 + 30_000)),
        ..outcome(
            key(61, T0 + 1_000),
            1,
            OccurrenceStatus::Retrying,
            T0 + 1_500,
        )
    };
    store.record_outcomes(&[retrying]).await.unwrap();
    assert!(matches!(
        store
            .claim_exclusive(key(61, T0 + 3_000), at(T0 + 3_000), cancel)
            .await
            .unwrap(),
        Exclusive::Claimed(_)
    ));
    let second = store
        .get_occurrence(key(61, T0 + 1_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.status, OccurrenceStatus::Skipped);
    // An earlier one that comes late while a later one runs does not cancel it: it is skipped.
    let stale = store
        .claim_exclusive(key(61, T0 + 2_000), at(T0 + 3_100), cancel)
        .await
        .unwrap();
    assert_eq!(
        stale,
        Exclusive::Skipped {
            beside: Timestamp::from_millis(T0 + 3_000)
        }
    );
    assert_eq!(
        store.still_running(&[]).await.unwrap(),
        Vec::<TaskKey>::new()
    );
}

/// A claim reports the timer's version at that moment (deleted: none), so an executor that
/// keeps timers between claims knows when to read one again.
pub async fn claims_tell_the_timer_version_now<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + ?Sized,
{
    let t = store
        .create_timer(new_timer("billing", "versions"), H)
        .await
        .unwrap()
        .timer;
    let id = t.id.get();
    // Far from the rows the create wrote, so these are the only ones claimed.
    let base = T0 + 10 * 86_400_000;
    let rows: Vec<NewOccurrence> = (0..4)
        .map(|i| occ(id, base + i * 1_000, t.version, t.bucket.get()))
        .collect();
    store.insert_occurrences(&rows).await.unwrap();
    let at = claim_at(base, 60_000);
    let won = store.claim(&[key(id, base)], at).await.unwrap();
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].timer_now, Some(t.version));
    assert_eq!(won[0].timer_version, t.version);

    let off = store.set_timer_enabled(t.id, false, H).await.unwrap().timer;
    assert!(off.version > t.version);
    let won = store.claim(&[key(id, base + 1_000)], at).await.unwrap();
    assert_eq!(
        (won[0].timer_version, won[0].timer_now),
        (t.version, Some(off.version)),
        "an occurrence of the old version, claimed after the change"
    );
    // Nothing in flight beside the exclusive claim.
    let done: Vec<Outcome> = [base, base + 1_000]
        .iter()
        .map(|&r| outcome(key(id, r), 1, OccurrenceStatus::Succeeded, base))
        .collect();
    assert_eq!(store.record_outcomes(&done).await.unwrap(), 2);
    let exclusive = store
        .claim_exclusive(key(id, base + 2_000), at, OverlapPolicy::Skip)
        .await
        .unwrap();
    match exclusive {
        crate::Exclusive::Claimed(c) => assert_eq!(c.timer_now, Some(off.version)),
        other => panic!("{other:?}"),
    }

    store.delete_timer(t.id).await.unwrap();
    let won = store.claim(&[key(id, base + 3_000)], at).await.unwrap();
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].timer_now, None, "a deleted timer has no version now");
}
