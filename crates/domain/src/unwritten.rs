//! Runs written when they end. A fast recurring timer's first attempts get no occurrence row
//! ahead of time: its fire times live only in the hot index until an executor takes one, and
//! the row is inserted once, finished (or retrying, or skipped). Written ahead, each firing
//! cost the database three row writes (the run, its claim, its outcome), none of them HOT;
//! written at the end, one.
//!
//! What a row did besides holding the outcome is done elsewhere: an executor takes the run
//! with a lease kept beside the hot index (only one holder at a time, so only one callback),
//! and the sweeper compares each such timer's fire times with the rows written, so a run
//! lost between the hot index and its outcome (a process or Redis failing) is still found.

use std::time::Duration;

use crate::{Bucket, DeliveryMode, MisfirePolicy, OnComplete, OverlapPolicy, Target, TimerSpec};
use crate::{Timer, Timestamp};

/// What the row of an unwritten run needs beside its outcome, written when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnwrittenRun {
    /// The timer's version the run fired (or was skipped) under.
    pub timer_version: i64,
    pub bucket: Bucket,
}

/// A timer whose fire times are at most this far apart leaves its runs unwritten (when
/// nothing else about it needs rows ahead): slower timers fire too seldom for the rows they
/// hold ahead to cost much, and enumerating them when a shard is rebuilt would.
pub const UNWRITTEN_MAX_INTERVAL: Duration = Duration::from_secs(30);

impl TimerSpec {
    /// Whether a timer of this spec, created at `now`, may leave its runs unwritten. Only
    /// the plain case: an HTTP callback delivered at least once, runs that may overlap,
    /// late runs fired once at most (`fire_all` keeps every overdue run as a row), no chain
    /// or self-deletion hanging on its rows, and fire times at most
    /// [`UNWRITTEN_MAX_INTERVAL`] apart.
    pub fn may_leave_runs_unwritten(&self, now: Timestamp) -> bool {
        let plain = self.delivery == DeliveryMode::AtLeastOnce
            && self.overlap == OverlapPolicy::AllowAll
            && self.misfire != MisfirePolicy::FireAll
            && self.on_complete == OnComplete::Keep
            && self.then.is_empty()
            && matches!(self.callback.target, Target::Http(_))
            && !self.schedule.is_one_shot();
        if !plain {
            return false;
        }
        let max = i64::try_from(UNWRITTEN_MAX_INTERVAL.as_millis()).unwrap_or(i64::MAX);
        let next = self.schedule.next_runs(now, 3);
        next.len() == 3
            && next
                .windows(2)
                .all(|w| w[1].as_millis() - w[0].as_millis() <= max)
    }
}

impl Timer {
    /// Whether the run at `run_at`, handed off due at `due` (`None`: not said), is one of
    /// this timer's unwritten first attempts: its timer leaves runs unwritten, the schedule
    /// names the instant, and it comes at its natural due time (a retry or a redrive is due
    /// later, and has a row).
    pub fn unwritten_run(&self, run_at: Timestamp, due: Option<Timestamp>) -> bool {
        !self.written_ahead
            && due.is_none_or(|d| d == crate::misfire::natural_due(self, run_at))
            && self.spec.schedule.fires_at(run_at)
    }

    /// The row an unwritten run of this timer gets when it ends.
    pub fn unwritten(&self) -> UnwrittenRun {
        UnwrittenRun {
            timer_version: self.version,
            bucket: self.bucket,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Callback, CallbackUrl, Schedule, ScheduleInput, TimerName};

    fn spec(every: &str) -> TimerSpec {
        let now = Timestamp::from_millis(1_800_000_000_000);
        TimerSpec {
            app: crate::AppName::parse("a").unwrap(),
            name: TimerName::parse("t").unwrap(),
            schedule: ScheduleInput {
                every: Some(every.into()),
                ..Default::default()
            }
            .resolve(now, None, None)
            .unwrap(),
            callback: Callback::http(CallbackUrl::parse("http://127.0.0.1:9/x").unwrap()),
            retry: Default::default(),
            misfire: Default::default(),
            delivery: Default::default(),
            labels: Default::default(),
            on_complete: Default::default(),
            catch_up_window: None,
            overlap: Default::default(),
            window: None,
            exclude_calendars: Vec::new(),
            then: Default::default(),
        }
    }

    #[test]
    fn only_fast_plain_recurring_timers_leave_runs_unwritten() {
        let now = Timestamp::from_millis(1_800_000_000_000);
        assert!(spec("1s").may_leave_runs_unwritten(now));
        assert!(spec("30s").may_leave_runs_unwritten(now));
        assert!(!spec("31s").may_leave_runs_unwritten(now));
        assert!(!spec("1h").may_leave_runs_unwritten(now));
        let mut amo = spec("1s");
        amo.delivery = DeliveryMode::AtMostOnce;
        assert!(!amo.may_leave_runs_unwritten(now));
        let mut all = spec("1s");
        all.misfire = MisfirePolicy::FireAll;
        assert!(!all.may_leave_runs_unwritten(now));
        let mut skip = spec("1s");
        skip.overlap = OverlapPolicy::Skip;
        assert!(!skip.may_leave_runs_unwritten(now));
        let mut once = spec("1s");
        once.schedule = Schedule::new(
            crate::ScheduleKind::At {
                at: now.add_millis(1_000),
            },
            None,
            None,
        )
        .unwrap();
        assert!(!once.may_leave_runs_unwritten(now));
        // A timer that ends within its next three runs has no interval to judge by.
        let mut ending = spec("1s");
        ending.schedule = Schedule::new(
            ending.schedule.kind().clone(),
            None,
            Some(now.add_millis(1_500)),
        )
        .unwrap();
        assert!(!ending.may_leave_runs_unwritten(now));
    }

    #[test]
    fn a_run_is_unwritten_only_at_a_fire_time_and_its_natural_due_instant() {
        let now = Timestamp::from_millis(1_800_000_000_000);
        let t = Timer {
            id: crate::TimerId::new(7).unwrap(),
            spec: spec("1s"),
            enabled: true,
            version: 3,
            bucket: Bucket::from_stored(2),
            created_at: now,
            updated_at: now,
            deleted_at: None,
            paused: None,
            written_ahead: false,
        };
        let at = now.add_millis(2_000);
        assert!(t.unwritten_run(at, Some(at)));
        assert!(t.unwritten_run(at, None));
        // A retry comes later than its run time; an instant off the schedule is a trigger's.
        assert!(!t.unwritten_run(at, Some(at.add_millis(500))));
        assert!(!t.unwritten_run(at.add_millis(1), None));
        let ahead = Timer {
            written_ahead: true,
            ..t.clone()
        };
        assert!(!ahead.unwritten_run(at, Some(at)));
        assert_eq!(
            t.unwritten(),
            UnwrittenRun {
                timer_version: 3,
                bucket: Bucket::from_stored(2)
            }
        );
    }
}
