//! Which runs may be marked `skipped` before anyone claims them: those whose timer stopped
//! (disabled, paused, deleted) and those its next run overtook. Shared by the executor, which
//! judges each key it is handed, and the scheduler, which skips a lagging shard's overtaken
//! runs where they lie instead of handing each one off to be skipped.

use std::collections::HashSet;

use crate::{EarlySkip, EarlySkipKind, MisfirePolicy, OnComplete, OverlapPolicy, TaskKey};
use crate::{Timer, Timestamp};

/// When the scheduled run at `run_at` comes due if nothing moves it: its run time, or its
/// place in the timer's flexible window.
pub fn natural_due(t: &Timer, run_at: Timestamp) -> Timestamp {
    t.due_of(run_at).unwrap_or(run_at)
}

/// When `t`'s next run came due, if it did by `now` and the policies let a first attempt of
/// the run at `run_at`, at its natural due time, be skipped for it: not under `fire_all`,
/// nor `buffer_one`, whose held-back run is late by design.
pub fn overtaken(t: &Timer, run_at: Timestamp, now: Timestamp) -> Option<Timestamp> {
    if t.spec.misfire == MisfirePolicy::FireAll || t.spec.overlap == OverlapPolicy::BufferOne {
        return None;
    }
    t.overtaken_at(run_at).filter(|next| *next <= now)
}

/// The error recorded on a run skipped because its timer's next run, due at `next`, came
/// due before this one could start.
pub fn misfired(next: Timestamp) -> String {
    format!(
        "misfired: the next run, due {}, was due before this one could start",
        next.to_rfc3339()
    )
}

/// Whether the run `key` of `timer` (`None`: deleted), handed off due at `due` (`None`: not
/// said), is to be skipped before its claim, and how: its timer is stopped, or, late at
/// `now`, its next run is due already. The store marks only a row still waiting for its
/// first attempt (see [`EarlySkipKind`]), or writes an unwritten run's row skipped.
pub fn early_skip(
    timer: Option<&Timer>,
    key: TaskKey,
    due: Option<Timestamp>,
    now: Timestamp,
) -> Option<EarlySkip> {
    let Some(t) = timer else {
        return Some(EarlySkip {
            key,
            timer_version: i64::MAX,
            kind: EarlySkipKind::Stopped,
            reason: "timer deleted".to_owned(),
            unwritten: None,
        });
    };
    let unwritten = t.unwritten_run(key.run_at, due).then(|| t.unwritten());
    let stopped = |timer_version: i64, reason: &str| EarlySkip {
        key,
        timer_version,
        kind: EarlySkipKind::Stopped,
        reason: reason.to_owned(),
        unwritten,
    };
    if !t.enabled {
        // A last run skipped at the claim deletes a timer set to; left to it.
        let deletes = t.spec.on_complete == OnComplete::Delete && t.is_last_run(key.run_at);
        return (!deletes).then(|| stopped(t.version, "timer disabled"));
    }
    let due = natural_due(t, key.run_at);
    // Not late at all (most keys are claimed just ahead of their due instant): no schedule
    // to walk.
    if now <= due {
        return None;
    }
    // A run past its catch_up_window is skipped at the claim, saying so.
    if t.spec.catch_up_window.is_some_and(|w| w.exceeded(due, now)) {
        return None;
    }
    let next = overtaken(t, key.run_at, now)?;
    Some(EarlySkip {
        key,
        timer_version: t.version,
        kind: EarlySkipKind::Overtaken { due },
        reason: misfired(next),
        unwritten,
    })
}

/// How many of `runs` the store `marked` were skipped as overtaken (the rest, stopped).
pub fn overtaken_among(runs: &[EarlySkip], marked: &HashSet<TaskKey>) -> usize {
    runs.iter()
        .filter(|r| matches!(r.kind, EarlySkipKind::Overtaken { .. }))
        .filter(|r| marked.contains(&r.key))
        .count()
}
