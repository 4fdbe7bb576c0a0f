//! A timer's policies applied to one occurrence: whether it may start, and what an attempt's
//! result makes of it (retry, dead, failed).

use std::time::Duration;

use chime_domain::{
    ClaimedOccurrence, DeliveryMode, OccurrenceStatus, OnComplete, Outcome, Timer, Timestamp,
};

use chime_domain::misfire::{misfired, natural_due, overtaken};

use crate::targets::Attempt;

/// The longest a callee's `Retry-After` may postpone a retry.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Applies the timer's delivery mode and retry policy to an attempt: a retryable failure
/// with attempts left becomes `retrying` at the backoff (or the callee's `Retry-After`), one
/// without becomes `dead`; a non-retryable failure, or any failure of an `at_most_once`
/// timer, is `failed`.
pub fn settle(
    timer: &Timer,
    attempt: Attempt,
    now: chime_domain::Timestamp,
    random: f64,
) -> Outcome {
    let mut outcome = attempt.outcome;
    if outcome.status == OccurrenceStatus::Succeeded {
        return outcome;
    }
    if timer.spec.delivery == DeliveryMode::AtMostOnce {
        outcome.status = OccurrenceStatus::Failed;
        return outcome;
    }
    if !attempt.retryable {
        outcome.status = OccurrenceStatus::Failed;
        return outcome;
    }
    match timer.spec.retry.backoff_after(outcome.attempt, random) {
        Some(backoff) => {
            let wait = attempt
                .retry_after
                .map_or(backoff, |r| r.min(MAX_RETRY_AFTER));
            let next = now.saturating_add(wait);
            // retry.max_age: no retry starts later than that after the scheduled time.
            if let Some(max_age) = timer.spec.retry.max_age()
                && max_age.exceeded(outcome.key.run_at, next)
            {
                outcome.status = OccurrenceStatus::Dead;
                let why = format!("retry.max_age {max_age} would be exceeded by the next retry");
                outcome.error = Some(match outcome.error.take() {
                    Some(e) => format!("{e}; {why}"),
                    None => why,
                });
                return outcome;
            }
            outcome.status = OccurrenceStatus::Retrying;
            outcome.next_attempt_at = Some(next);
        }
        None => outcome.status = OccurrenceStatus::Dead,
    }
    outcome
}

/// Why a claimed occurrence must not fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skip {
    pub reason: String,
    /// Overtaken by its timer's next run (the misfire policy), not stopped by the timer.
    pub misfired: bool,
}

/// Why a claimed occurrence must not fire, if it must not: its timer is gone, disabled or
/// changed, or (first attempts of scheduled runs only) it is older than the timer's
/// `catch_up_window`, or its timer's next run is due already and the misfire policy is not
/// `fire_all`: a run a whole interval late is skipped, not fired late behind the next one,
/// so a fleet that falls behind catches up instead of firing every stale run in turn.
pub(crate) fn skip_reason(
    timer: Option<&Timer>,
    claimed: &ClaimedOccurrence,
    now: Timestamp,
) -> Option<Skip> {
    let version = claimed.timer_version;
    let stopped = |reason: String| {
        Some(Skip {
            reason,
            misfired: false,
        })
    };
    let t = match timer {
        None => return stopped("timer deleted".into()),
        Some(t) if !t.enabled => return stopped("timer disabled".into()),
        Some(t) if t.version != version => {
            return stopped(format!(
                "timer changed: this occurrence is of version {version}, the timer is at version {}",
                t.version
            ));
        }
        Some(t) => t,
    };
    if claimed.attempt > 1 {
        return None;
    }
    if let Some(w) = t.spec.catch_up_window
        && w.exceeded(claimed.due, now)
    {
        return stopped(format!(
            "older than the timer's catch_up_window ({w}) when it came to fire"
        ));
    }
    // Only a late first attempt at its own due time walks the schedule: not a retry, a
    // redrive or a backfill, which asked for this run whatever came after it, nor the run
    // `buffer_one` kept waiting for the one in flight, which is late by design.
    let run_at = claimed.key.run_at;
    if now <= claimed.due || claimed.backfill || claimed.due != natural_due(t, run_at) {
        return None;
    }
    let next = overtaken(t, run_at, now)?;
    Some(Skip {
        reason: misfired(next),
        misfired: true,
    })
}

/// Whether an occurrence that just ended was the last of a timer that deletes itself when
/// done (`on_complete: delete`).
pub(crate) fn completes(timer: Option<&Timer>, outcome: &Outcome) -> bool {
    outcome.status.is_terminal()
        && timer.is_some_and(|t| {
            t.spec.on_complete == OnComplete::Delete && t.is_last_run(outcome.key.run_at)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::{Bucket, CallbackInput, RetryPolicyInput, TaskKey, TimerId};
    use chime_domain::{MisfirePolicy, OverlapPolicy};

    fn timer(delivery: DeliveryMode) -> Timer {
        let now = Timestamp::from_millis(0);
        let mut spec = chime_storage::contract::spec_every("a", "t", "1m", now);
        spec.callback = CallbackInput {
            url: Some("http://x/".into()),
            ..Default::default()
        }
        .parse()
        .unwrap();
        spec.retry = RetryPolicyInput {
            max_attempts: Some(3),
            jitter: Some(false),
            ..Default::default()
        }
        .parse()
        .unwrap();
        spec.delivery = delivery;
        chime_storage::contract::unstored_timer(1, spec, now)
    }

    fn failed(attempt: u32, retryable: bool, retry_after: Option<Duration>) -> Attempt {
        Attempt {
            outcome: Outcome {
                key: TaskKey::new(TimerId::new(1).unwrap(), Timestamp::from_millis(0)),
                attempt,
                status: OccurrenceStatus::Failed,
                fired_at: Some(Timestamp::from_millis(0)),
                http_status: Some(429),
                output: None,
                error: Some("callback answered HTTP 429".into()),
                next_attempt_at: None,
                unwritten: None,
                leased: false,
            },
            retryable,
            retry_after,
        }
    }

    #[test]
    fn the_policy_decides_retrying_dead_or_failed() {
        let t = timer(DeliveryMode::AtLeastOnce);
        let now = Timestamp::from_millis(1_000);
        let first = settle(&t, failed(1, true, None), now, 0.5);
        assert_eq!(first.status, OccurrenceStatus::Retrying);
        assert_eq!(first.next_attempt_at, Some(Timestamp::from_millis(2_000)));
        let second = settle(&t, failed(2, true, None), now, 0.5);
        assert_eq!(
            second.next_attempt_at,
            Some(Timestamp::from_millis(3_000)),
            "×2"
        );
        let honoured = settle(&t, failed(1, true, Some(Duration::from_secs(30))), now, 0.5);
        assert_eq!(
            honoured.next_attempt_at,
            Some(Timestamp::from_millis(31_000))
        );
        assert_eq!(
            settle(&t, failed(3, true, None), now, 0.5).status,
            OccurrenceStatus::Dead
        );
        assert_eq!(
            settle(&t, failed(1, false, None), now, 0.5).status,
            OccurrenceStatus::Failed
        );
        let amo = timer(DeliveryMode::AtMostOnce);
        assert_eq!(
            settle(&amo, failed(1, true, None), now, 0.5).status,
            OccurrenceStatus::Failed
        );
    }

    #[test]
    fn no_retry_starts_after_retry_max_age() {
        let mut t = timer(DeliveryMode::AtLeastOnce);
        t.spec.retry = RetryPolicyInput {
            max_attempts: Some(10),
            jitter: Some(false),
            max_age: Some("5s".into()),
            ..Default::default()
        }
        .parse()
        .unwrap();
        // Due at 0: a retry at 1 s + 1 s backoff is within 5 s, one at 4.5 s + 1 s is not.
        let soon = settle(
            &t,
            failed(1, true, None),
            Timestamp::from_millis(1_000),
            0.5,
        );
        assert_eq!(soon.status, OccurrenceStatus::Retrying);
        let late = settle(
            &t,
            failed(1, true, None),
            Timestamp::from_millis(4_500),
            0.5,
        );
        assert_eq!(late.status, OccurrenceStatus::Dead);
        assert!(late.error.unwrap().contains("retry.max_age 5s"));
    }

    #[test]
    fn first_attempts_older_than_the_catch_up_window_are_skipped() {
        let mut t = timer(DeliveryMode::AtLeastOnce);
        t.spec.catch_up_window = Some(chime_domain::MaxAge::parse("1m", "w").unwrap());
        let claimed = |attempt, now_ms: i64| {
            let c = ClaimedOccurrence {
                key: TaskKey::new(t.id, Timestamp::from_millis(0)),
                timer_version: 1,
                bucket: Bucket::from_stored(0),
                attempt,
                due: Timestamp::from_millis(0),
                backfill: false,
                parent: None,
                timer_now: Some(1),
                unwritten: None,
                leased: false,
            };
            skip_reason(Some(&t), &c, Timestamp::from_millis(now_ms))
        };
        assert_eq!(claimed(1, 59_000), None);
        assert!(
            claimed(1, 61_000)
                .unwrap()
                .reason
                .contains("catch_up_window")
        );
        // A retry is governed by retry.max_age, not by the catch-up window.
        assert_eq!(claimed(2, 61_000), None);
        assert_eq!(
            skip_reason(
                None,
                &ClaimedOccurrence {
                    key: TaskKey::new(t.id, Timestamp::from_millis(0)),
                    timer_version: 1,
                    bucket: Bucket::from_stored(0),
                    attempt: 1,
                    due: Timestamp::from_millis(0),
                    backfill: false,
                    parent: None,
                    timer_now: Some(1),
                    unwritten: None,
                    leased: false,
                },
                Timestamp::from_millis(0)
            )
            .map(|s| s.reason)
            .as_deref(),
            Some("timer deleted")
        );
    }

    #[test]
    fn a_first_attempt_its_timers_next_run_overtook_is_misfired() {
        // Every minute from 60 s on.
        let mut t = timer(DeliveryMode::AtLeastOnce);
        let claimed = |run_at_ms: i64, attempt, due_ms: i64| ClaimedOccurrence {
            key: TaskKey::new(t.id, Timestamp::from_millis(run_at_ms)),
            timer_version: 1,
            bucket: Bucket::from_stored(0),
            attempt,
            due: Timestamp::from_millis(due_ms),
            backfill: false,
            parent: None,
            timer_now: Some(1),
            unwritten: None,
            leased: false,
        };
        let at = |c: &ClaimedOccurrence, t: &Timer, now_ms| {
            skip_reason(Some(t), c, Timestamp::from_millis(now_ms))
        };
        let run = claimed(60_000, 1, 60_000);
        // Late, but the next run (120 s) is not due yet: it fires.
        assert_eq!(at(&run, &t, 119_999), None);
        let skip = at(&run, &t, 120_000).unwrap();
        assert!(skip.misfired, "{skip:?}");
        assert!(skip.reason.starts_with("misfired"), "{}", skip.reason);
        // A retry, a redrive (due later than the run) and a trigger (not a scheduled run)
        // asked for this run: they fire however late.
        assert_eq!(at(&claimed(60_000, 2, 61_000), &t, 200_000), None);
        assert_eq!(at(&claimed(60_000, 1, 150_000), &t, 200_000), None);
        assert_eq!(at(&claimed(61_234, 1, 61_234), &t, 200_000), None);
        let backfilled = ClaimedOccurrence {
            backfill: true,
            ..run
        };
        assert_eq!(at(&backfilled, &t, 200_000), None);
        // fire_all fires every run, skip and fire_once skip the overtaken.
        t.spec.misfire = MisfirePolicy::FireAll;
        assert_eq!(at(&run, &t, 200_000), None);
        t.spec.misfire = MisfirePolicy::Skip;
        assert!(at(&run, &t, 200_000).unwrap().misfired);
        // buffer_one keeps a run waiting for the one in flight: late by design.
        t.spec.overlap = OverlapPolicy::BufferOne;
        assert_eq!(at(&run, &t, 200_000), None);
        // A one-shot is never overtaken.
        let mut once = timer(DeliveryMode::AtLeastOnce);
        once.spec = chime_storage::contract::spec_with(
            "a",
            "once",
            &chime_domain::ScheduleInput {
                at: Some("1970-01-01T00:01:00Z".into()),
                ..Default::default()
            },
            Timestamp::from_millis(0),
        );
        assert_eq!(at(&run, &once, 600_000), None);
    }

    #[test]
    fn only_the_last_run_of_a_self_deleting_timer_completes_it() {
        let mut t = timer(DeliveryMode::AtLeastOnce);
        let zero = Timestamp::from_millis(0);
        t.spec.schedule = t.spec.schedule.clone().limited(2, zero).unwrap();
        let runs = t.spec.schedule.next_runs(zero, 5);
        assert_eq!(runs.len(), 2);
        let ended = |run_at| {
            Outcome::ended(
                TaskKey::new(t.id, run_at),
                1,
                OccurrenceStatus::Succeeded,
                None,
                None,
            )
        };
        assert!(!completes(Some(&t), &ended(runs[1])), "on_complete keep");
        t.spec.on_complete = OnComplete::Delete;
        assert!(!completes(Some(&t), &ended(runs[0])));
        assert!(completes(Some(&t), &ended(runs[1])));
        let retrying = Outcome {
            status: OccurrenceStatus::Retrying,
            ..ended(runs[1])
        };
        assert!(!completes(Some(&t), &retrying));
    }
}
