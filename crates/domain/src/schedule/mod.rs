//! Schedules: what a timer's fire times are, as a pure function of its spec.

mod cron;
mod dst;
mod input;
mod stored;

use std::fmt;
use std::time::Duration;

use crate::duration::{format_duration, parse_duration};
use crate::error::ValidationError;
use crate::{EXHAUSTED, Exclusions, Timestamp, limits};

use cron::CronIter;
pub use cron::{CronExpr, DstNote, TimeZone};
use dst::DstIter;
pub use dst::{DstPolicy, GapPolicy, RepeatPolicy};
pub use input::ScheduleInput;

/// A recurring interval of at least one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interval(i64);

impl Interval {
    pub fn from_duration(d: Duration) -> Result<Self, ValidationError> {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if ms < limits::MIN_INTERVAL_MS {
            return Err(ValidationError::new(
                "schedule.every",
                "interval must be at least 1s",
            ));
        }
        if ms > limits::MAX_FUTURE_MS {
            return Err(ValidationError::new(
                "schedule.every",
                "interval must be at most 10 years",
            ));
        }
        Ok(Self(ms))
    }

    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        let d = parse_duration(s).map_err(|m| ValidationError::new("schedule.every", m))?;
        Self::from_duration(d)
    }

    pub fn as_millis(self) -> i64 {
        self.0
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0 as u64)
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.as_duration()))
    }
}

/// What kind of schedule a timer follows, with everything needed to compute its fire times.
/// Relative forms are anchored when the timer is created, so the math is a pure function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleKind {
    /// Fires whenever the wall clock in `time_zone` matches `expr`.
    Cron {
        expr: CronExpr,
        time_zone: TimeZone,
        dst: DstPolicy,
    },
    /// Fires at `first`, `first + interval`, `first + 2 × interval`, …
    Every {
        interval: Interval,
        first: Timestamp,
    },
    /// Fires once, at `at`.
    At { at: Timestamp },
    /// Fires once, `delay` after creation; `at` is that instant.
    After { delay: Duration, at: Timestamp },
}

/// A timer's schedule: its kind plus optional `start_at` (inclusive) and `end_at` (inclusive)
/// bounds on the instants it fires at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: ScheduleKind,
    start_at: Option<Timestamp>,
    end_at: Option<Timestamp>,
    limit: Option<RunLimit>,
    /// Dates it does not fire on: its timer's exclusion calendars, resolved when the timer
    /// was written (a calendar change rewrites the timers naming it).
    excluded: Exclusions,
}

/// `max_runs`: the schedule ends after this many fire times, counted from the instant the
/// limit was set. The last of them is worked out once, when the limit is set, so every
/// component (materialization, preview, listing) agrees on it without counting rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimit {
    pub max_runs: u32,
    /// The `max_runs`-th fire time: none after it. `None` when the schedule has no fire
    /// time at all after the limit was set.
    pub last: Option<Timestamp>,
}

impl Schedule {
    pub fn new(
        kind: ScheduleKind,
        start_at: Option<Timestamp>,
        end_at: Option<Timestamp>,
    ) -> Result<Self, ValidationError> {
        if let (Some(s), Some(e)) = (start_at, end_at)
            && e < s
        {
            return Err(ValidationError::new(
                "end_at",
                "must not be before start_at",
            ));
        }
        Ok(Self {
            kind,
            start_at,
            end_at,
            limit: None,
            excluded: Exclusions::default(),
        })
    }

    /// This schedule not firing on `excluded` dates (in its zone). Set it before
    /// [`Self::limited`], so `max_runs` counts only the runs that fire.
    pub fn with_exclusions(mut self, excluded: Exclusions) -> Self {
        self.excluded = excluded;
        self
    }

    pub fn exclusions(&self) -> &Exclusions {
        &self.excluded
    }

    /// This schedule ending after its next `max_runs` fire times at or after `from`.
    pub fn limited(mut self, max_runs: u32, from: Timestamp) -> Result<Self, ValidationError> {
        if self.is_one_shot() {
            return Err(ValidationError::new(
                "max_runs",
                "applies to recurring schedules (cron, every) only",
            ));
        }
        if !(1..=limits::MAX_RUNS).contains(&max_runs) {
            return Err(ValidationError::new(
                "max_runs",
                format!("must be between 1 and {}", limits::MAX_RUNS),
            ));
        }
        self.limit = None;
        let last = self
            .occurrences_between(from, EXHAUSTED)
            .take(max_runs as usize)
            .last();
        self.limit = Some(RunLimit { max_runs, last });
        Ok(self)
    }

    /// The same limit on another kind or bounds (an update that keeps `max_runs`).
    pub fn with_limit(mut self, limit: Option<RunLimit>) -> Self {
        self.limit = limit;
        self
    }

    pub fn limit(&self) -> Option<RunLimit> {
        self.limit
    }

    /// An instant after which the schedule never fires (`None` for never-ending ones): the
    /// one-shot's instant, the last run of `max_runs`, `end_at`, whichever is first.
    pub fn finishes_at(&self) -> Option<Timestamp> {
        let one_shot = match self.kind {
            ScheduleKind::At { at } | ScheduleKind::After { at, .. } => Some(at),
            _ => None,
        };
        let limit = self
            .limit
            .map(|l| l.last.unwrap_or(Timestamp::from_millis(i64::MIN)));
        [one_shot, limit, self.end_at].into_iter().flatten().min()
    }

    /// Fire times left at or after `now` under `max_runs` (`None` without a limit).
    pub fn remaining_runs(&self, now: Timestamp) -> Option<u32> {
        let limit = self.limit?;
        let left = self.occurrences_between(now, EXHAUSTED).count();
        Some(u32::try_from(left).unwrap_or(u32::MAX).min(limit.max_runs))
    }

    pub fn kind(&self) -> &ScheduleKind {
        &self.kind
    }

    pub fn start_at(&self) -> Option<Timestamp> {
        self.start_at
    }

    pub fn end_at(&self) -> Option<Timestamp> {
        self.end_at
    }

    pub fn is_one_shot(&self) -> bool {
        matches!(
            self.kind,
            ScheduleKind::At { .. } | ScheduleKind::After { .. }
        )
    }

    /// A short label for the kind: `cron`, `every`, `at` or `after`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            ScheduleKind::Cron { .. } => "cron",
            ScheduleKind::Every { .. } => "every",
            ScheduleKind::At { .. } => "at",
            ScheduleKind::After { .. } => "after",
        }
    }

    /// The zone the schedule is read in (UTC for all but cron).
    pub fn time_zone(&self) -> TimeZone {
        match &self.kind {
            ScheduleKind::Cron { time_zone, .. } => *time_zone,
            _ => TimeZone::UTC,
        }
    }

    /// Every instant in `[from, to)` (and inside the start/end bounds) at which the timer fires,
    /// strictly increasing. Lazy: callers may stop early, so an every-second timer over a long
    /// window costs only what is consumed.
    pub fn occurrences_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Iterator<Item = Timestamp> + '_ {
        let mut inner = self.walk(from, to);
        let zone = self.time_zone();
        // An excluded date restarts the walk after its range, so a long range costs one
        // step, not every fire time inside it.
        std::iter::from_fn(move || {
            loop {
                let at = inner.next()?;
                match self.excluded.resume_after(at, zone) {
                    None => return Some(at),
                    Some(resume) if resume >= to => {
                        inner = Box::new(std::iter::empty());
                        return None;
                    }
                    Some(resume) => inner = self.walk(resume, to),
                }
            }
        })
    }

    /// [`Self::occurrences_between`] before exclusions.
    fn walk(&self, from: Timestamp, to: Timestamp) -> Box<dyn Iterator<Item = Timestamp> + '_> {
        let lo = match self.start_at {
            Some(s) if s > from => s,
            _ => from,
        };
        // end_at and the limit's last run are inclusive, the window's end is not.
        let mut hi = match self.end_at {
            Some(e) if e.add_millis(1) < to => e.add_millis(1),
            _ => to,
        };
        if let Some(limit) = self.limit {
            hi = hi.min(limit.last.map_or(lo, |l| l.add_millis(1)));
        }
        if lo >= hi {
            Box::new(std::iter::empty())
        } else {
            match &self.kind {
                ScheduleKind::At { at } | ScheduleKind::After { at, .. } => {
                    Box::new((lo <= *at && *at < hi).then_some(*at).into_iter())
                }
                ScheduleKind::Every { interval, first } => {
                    Box::new(every_between(*interval, *first, lo, hi))
                }
                ScheduleKind::Cron {
                    expr,
                    time_zone,
                    dst,
                } if dst.is_default() => Box::new(CronIter::new(&expr.cron, *time_zone, lo, hi)),
                ScheduleKind::Cron {
                    expr,
                    time_zone,
                    dst,
                } => Box::new(DstIter::new(expr, *time_zone, *dst, lo, hi)),
            }
        }
    }

    /// Whether two schedules say the same, whatever instant each was anchored at: an `every`
    /// without `start_at` counts from its creation and an `after` from its request, so
    /// declaring the same timer again must not read as a change. A limit compares by its
    /// `max_runs`, not by where it was counted from.
    pub fn same_intent(&self, other: &Schedule) -> bool {
        let kind = match (&self.kind, &other.kind) {
            (
                ScheduleKind::Every {
                    interval: a,
                    first: fa,
                },
                ScheduleKind::Every {
                    interval: b,
                    first: fb,
                },
            ) => a == b && (self.start_at.is_none() || fa == fb),
            (ScheduleKind::After { delay: a, .. }, ScheduleKind::After { delay: b, .. }) => a == b,
            (a, b) => a == b,
        };
        kind && self.start_at == other.start_at
            && self.end_at == other.end_at
            && self.excluded == other.excluded
            && self.limit.map(|l| l.max_runs) == other.limit.map(|l| l.max_runs)
    }

    /// Whether a daylight-saving change shaped the run at `at` (cron schedules only: the
    /// others count in absolute time).
    pub fn dst_note(&self, at: Timestamp) -> Option<DstNote> {
        match &self.kind {
            ScheduleKind::Cron {
                expr, time_zone, ..
            } => expr.dst_note(*time_zone, at),
            _ => None,
        }
    }

    /// Whether the schedule names the instant `at` (within its bounds, not excluded).
    pub fn fires_at(&self, at: Timestamp) -> bool {
        self.occurrences_between(at, at.add_millis(1)).next() == Some(at)
    }

    /// The next `n` fire times at or after `from`.
    pub fn next_runs(&self, from: Timestamp, n: usize) -> Vec<Timestamp> {
        self.occurrences_between(from, Timestamp::from_millis(i64::MAX))
            .take(n)
            .collect()
    }
}

fn every_between(
    interval: Interval,
    first: Timestamp,
    lo: Timestamp,
    hi: Timestamp,
) -> impl Iterator<Item = Timestamp> {
    let step = interval.as_millis();
    let first = first.as_millis();
    let k0 = if lo.as_millis() <= first {
        0
    } else {
        // Smallest k with first + k·step >= lo.
        (lo.as_millis() - first + step - 1) / step
    };
    let start = first.saturating_add(k0.saturating_mul(step));
    let hi = hi.as_millis();
    std::iter::successors(Some(start), move |t| t.checked_add(step))
        .take_while(move |t| *t < hi)
        .map(Timestamp::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn every_second(from: Timestamp) -> Schedule {
        ScheduleInput {
            every: Some("1s".into()),
            ..Default::default()
        }
        .resolve(from, None, None)
        .unwrap()
    }

    #[test]
    fn max_runs_ends_the_schedule_after_that_many_fire_times() {
        let now = ts("2026-01-01T00:00:00Z");
        let s = every_second(now).limited(3, now).unwrap();
        let runs = s.next_runs(now, 10);
        assert_eq!(runs.len(), 3);
        assert_eq!(s.finishes_at(), runs.last().copied());
        assert_eq!(s.remaining_runs(now), Some(3));
        assert_eq!(s.remaining_runs(runs[1]), Some(2));
        assert_eq!(s.remaining_runs(runs[2].add_millis(1)), Some(0));
        // Stored and read back, the limit is the same.
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"finish_ms\""), "{json}");
        assert_eq!(serde_json::from_str::<Schedule>(&json).unwrap(), s);
    }

    #[test]
    fn max_runs_is_refused_on_one_shots_and_out_of_range() {
        let now = ts("2026-01-01T00:00:00Z");
        let once = ScheduleInput {
            after: Some("1m".into()),
            ..Default::default()
        }
        .resolve(now, None, None)
        .unwrap();
        assert_eq!(once.finishes_at(), Some(now.add_millis(60_000)));
        assert_eq!(once.clone().limited(1, now).unwrap_err().field, "max_runs");
        assert!(every_second(now).limited(0, now).is_err());
        assert!(
            every_second(now)
                .limited(limits::MAX_RUNS + 1, now)
                .is_err()
        );
        assert_eq!(every_second(now).finishes_at(), None);
    }

    #[test]
    fn dst_notes_mark_runs_moved_by_a_gap_or_in_a_repeated_hour() {
        let berlin = |cron: &str| {
            ScheduleInput {
                cron: Some(cron.into()),
                time_zone: Some("Europe/Berlin".into()),
                ..Default::default()
            }
            .resolve(ts("2026-01-01T00:00:00Z"), None, None)
            .unwrap()
        };
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
        let gap = berlin("30 2 * * *");
        let runs = gap.next_runs(ts("2026-03-27T12:00:00Z"), 3);
        let notes: Vec<_> = runs.iter().map(|r| gap.dst_note(*r)).collect();
        assert_eq!(notes, vec![None, Some(DstNote::Gap), None]);
        assert_eq!(runs[1], ts("2026-03-29T01:00:00Z"));
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
        let repeat = berlin("30 2 * * *");
        let runs = repeat.next_runs(ts("2026-10-23T12:00:00Z"), 3);
        let notes: Vec<_> = runs.iter().map(|r| repeat.dst_note(*r)).collect();
        assert_eq!(notes, vec![None, Some(DstNote::Repeated), None]);
        assert_eq!(runs[1], ts("2026-10-25T00:30:00Z"));
    }
}
