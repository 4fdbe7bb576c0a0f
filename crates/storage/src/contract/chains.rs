//! [`Chains`]: each step started once per parent run and name, its run carrying the parent.

use chime_domain::{AppName, ChainOn, ChainStep, StepStatus, TimerName};

use crate::Chains;

use super::*;

fn step(parent: TaskKey, app: &str, on: ChainOn, name: &str) -> ChainStep {
    ChainStep {
        parent,
        app: AppName::parse(app).unwrap(),
        on,
        step: TimerName::parse(name).unwrap(),
    }
}

pub async fn chain_steps_start_once_and_carry_their_parent<S>(store: Arc<S>)
where
    S: TimerStore + OccurrenceStore + Chains + ?Sized,
{
    let app = "chain-a";
    let parent = store
        .create_timer(new_timer(app, "extract"), H)
        .await
        .unwrap()
        .timer;
    let next = store
        .create_timer(new_timer(app, "load"), H)
        .await
        .unwrap()
        .timer;
    let paused = store
        .create_timer(new_timer(app, "report"), H)
        .await
        .unwrap()
        .timer;
    store.set_timer_enabled(paused.id, false, H).await.unwrap();
    // Another app's timer of the same name is not this app's step.
    store
        .create_timer(new_timer("chain-b", "audit"), H)
        .await
        .unwrap();
    let run = TaskKey::new(parent.id, Timestamp::from_millis(T0 + 60_000));
    let now = Timestamp::from_millis(T0 + 61_000);
    let steps = [
        step(run, app, ChainOn::Success, "load"),
        step(run, app, ChainOn::Success, "report"),
        step(run, app, ChainOn::Success, "audit"),
    ];
    let started = store.start_steps(&steps, now).await.unwrap();
    assert_eq!(started.len(), 1, "{started:?}");
    let key = TaskKey::new(next.id, now);
    assert_eq!(started[0].key, key);
    assert_eq!(started[0].timer_version, next.version);
    assert_eq!(started[0].bucket, next.bucket);
    // The same outcome told again, later: nothing more starts.
    let again = store
        .start_steps(&steps, Timestamp::from_millis(T0 + 62_000))
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");

    let row = store
        .get_occurrence(key)
        .await
        .unwrap()
        .expect("the step's run");
    assert_eq!(row.status, OccurrenceStatus::Pending);
    assert_eq!(row.parent, Some(run));
    let claimed = store
        .claim(&[key], claim_at(T0 + 61_000, 30_000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].parent, Some(run));

    let records = store.steps_of(run).await.unwrap();
    let by_name: Vec<(&str, StepStatus, Option<TaskKey>)> = records
        .iter()
        .map(|r| (r.step.as_str(), r.status, r.run))
        .collect();
    assert_eq!(
        by_name,
        vec![
            ("audit", StepStatus::Skipped, None),
            ("load", StepStatus::Started, Some(key)),
            ("report", StepStatus::Skipped, None),
        ]
    );
    assert!(
        records
            .iter()
            .all(|r| r.on == ChainOn::Success && r.parent == run)
    );
    assert_eq!(records[0].reason.as_deref(), Some("no timer of that name"));
    assert_eq!(records[2].reason.as_deref(), Some("the timer is paused"));
    assert_eq!(records[1].at, now);

    // A second parent run ending in the same millisecond: its step takes the next one.
    let later = TaskKey::new(parent.id, Timestamp::from_millis(T0 + 120_000));
    let second = store
        .start_steps(&[step(later, app, ChainOn::Failure, "load")], now)
        .await
        .unwrap();
    assert_eq!(second[0].key, TaskKey::new(next.id, now.add_millis(1)));
    let records = store.steps_of(later).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].on, ChainOn::Failure);
    assert!(store.steps_of(key).await.unwrap().is_empty());
}
