use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{Offset, TimeZone as _};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

use crate::duration::{format_duration, parse_duration};
use crate::error::ValidationError;
use crate::{Timestamp, limits};

/// An IANA time zone such as `Europe/Berlin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeZone(chrono_tz::Tz);

impl TimeZone {
    pub const UTC: Self = Self(chrono_tz::UTC);

    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        chrono_tz::Tz::from_str(s.trim()).map(Self).map_err(|_| {
            ValidationError::new(
                "time_zone",
                format!("unknown time zone {s:?}; use an IANA name such as Europe/Berlin"),
            )
        })
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn tz(self) -> chrono_tz::Tz {
        self.0
    }

    /// The zone's UTC offset at an instant, in seconds.
    fn offset_secs(self, at: Timestamp) -> i32 {
        self.0
            .offset_from_utc_datetime(&at.to_datetime().naive_utc())
            .fix()
            .local_minus_utc()
    }

    /// Local wall-clock rendering of an instant, RFC 3339 with offset.
    pub fn format(self, at: Timestamp) -> String {
        at.to_datetime()
            .with_timezone(&self.0)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cron expression: five fields (minute hour day-of-month month day-of-week) or six with a
/// leading seconds field. Expressions that can never fire are rejected.
#[derive(Debug, Clone)]
pub struct CronExpr {
    source: String,
    // Boxed: a parsed pattern is ~300 bytes and would bloat every schedule value.
    cron: Box<Cron>,
}

impl CronExpr {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        let source = s.split_whitespace().collect::<Vec<_>>().join(" ");
        let fields = source.split(' ').filter(|f| !f.is_empty()).count();
        if !(fields == 5 || fields == 6) {
            return Err(ValidationError::new(
                "schedule.cron",
                format!(
                    "{s:?} has {fields} fields; expected 5 (minute hour day month weekday) or 6 (with leading seconds)"
                ),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(&source)
            .map_err(|e| {
                ValidationError::new("schedule.cron", format!("invalid cron {s:?}: {e}"))
            })?;
        // A pattern such as "0 0 30 2 *" parses but never matches; say so now, not at fire time.
        let probe = chrono::Utc
            .timestamp_millis_opt(946_684_800_000)
            .single()
            .ok_or_else(|| ValidationError::new("schedule.cron", "internal probe time invalid"))?;
        if cron.find_next_occurrence(&probe, true).is_err() {
            return Err(ValidationError::new(
                "schedule.cron",
                format!("cron {s:?} never fires"),
            ));
        }
        Ok(Self {
            source,
            cron: Box::new(cron),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for CronExpr {}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

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
    Cron { expr: CronExpr, time_zone: TimeZone },
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
        })
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
        let lo = match self.start_at {
            Some(s) if s > from => s,
            _ => from,
        };
        // end_at is inclusive, the window's end is not.
        let hi = match self.end_at {
            Some(e) if e.add_millis(1) < to => e.add_millis(1),
            _ => to,
        };
        let inner: Box<dyn Iterator<Item = Timestamp> + '_> = if lo >= hi {
            Box::new(std::iter::empty())
        } else {
            match &self.kind {
                ScheduleKind::At { at } | ScheduleKind::After { at, .. } => {
                    Box::new((lo <= *at && *at < hi).then_some(*at).into_iter())
                }
                ScheduleKind::Every { interval, first } => {
                    Box::new(every_between(*interval, *first, lo, hi))
                }
                ScheduleKind::Cron { expr, time_zone } => {
                    Box::new(CronIter::new(&expr.cron, *time_zone, lo, hi))
                }
            }
        };
        inner
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

/// Walks a cron pattern through `[lo, hi)` in a zone.
///
/// croner resolves DST gaps and overlaps relative to where a search starts. So that a window
/// split in two yields exactly what the whole window yields, a search that starts within a few
/// hours of an offset change begins at a fixed earlier anchor (the UTC day's start minus 6 h)
/// and skips forward; elsewhere it starts at `lo` directly.
struct CronIter<'a> {
    cron: &'a Cron,
    next: Option<chrono::DateTime<chrono_tz::Tz>>,
    lo: i64,
    hi: i64,
}

impl<'a> CronIter<'a> {
    const NEAR_MS: i64 = 3 * 3_600_000;

    fn new(cron: &'a Cron, zone: TimeZone, lo: Timestamp, hi: Timestamp) -> Self {
        let near_change = zone.offset_secs(lo.add_millis(-Self::NEAR_MS))
            != zone.offset_secs(lo.add_millis(Self::NEAR_MS));
        let origin = if near_change {
            lo.as_millis().div_euclid(86_400_000) * 86_400_000 - 2 * Self::NEAR_MS
        } else {
            lo.as_millis()
        };
        let tz = zone.tz();
        let next = tz
            .timestamp_millis_opt(origin)
            .single()
            .and_then(|start| cron.find_next_occurrence(&start, true).ok());
        Self {
            cron,
            next,
            lo: lo.as_millis(),
            hi: hi.as_millis(),
        }
    }
}

impl Iterator for CronIter<'_> {
    type Item = Timestamp;

    fn next(&mut self) -> Option<Timestamp> {
        loop {
            let current = self.next.take()?;
            let ms = current.timestamp_millis();
            if ms >= self.hi {
                return None;
            }
            self.next = self.cron.find_next_occurrence(&current, false).ok();
            // croner guarantees progress; guard anyway so a library bug cannot loop forever.
            if let Some(n) = &self.next
                && n.timestamp_millis() <= ms
            {
                self.next = None;
            }
            if ms >= self.lo {
                return Some(Timestamp::from_millis(ms));
            }
        }
    }
}

/// The schedule as a request spells it: exactly one of `cron` (with optional `time_zone`),
/// `every`, `at` or `after`. [`ScheduleInput::resolve`] turns it into a [`Schedule`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl ScheduleInput {
    /// Validates and anchors the schedule at `now` (the creation or update instant).
    pub fn resolve(
        &self,
        now: Timestamp,
        start_at: Option<Timestamp>,
        end_at: Option<Timestamp>,
    ) -> Result<Schedule, ValidationError> {
        let given = [
            self.cron.is_some(),
            self.every.is_some(),
            self.at.is_some(),
            self.after.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given != 1 {
            return Err(ValidationError::new(
                "schedule",
                "give exactly one of cron, every, at or after",
            ));
        }
        if self.time_zone.is_some() && self.cron.is_none() {
            return Err(ValidationError::new(
                "schedule.time_zone",
                "time_zone applies to cron schedules only",
            ));
        }
        let kind = if let Some(cron) = &self.cron {
            let expr = CronExpr::parse(cron)?;
            let time_zone = match &self.time_zone {
                Some(tz) => TimeZone::parse(tz).map_err(|e| e.within("schedule"))?,
                None => TimeZone::UTC,
            };
            ScheduleKind::Cron { expr, time_zone }
        } else if let Some(every) = &self.every {
            let interval = Interval::parse(every)?;
            let first = start_at.unwrap_or(now.add_millis(interval.as_millis()));
            ScheduleKind::Every { interval, first }
        } else if let Some(at) = &self.at {
            let at =
                Timestamp::parse_rfc3339(at).map_err(|m| ValidationError::new("schedule.at", m))?;
            check_one_shot(at, now, "schedule.at")?;
            ScheduleKind::At { at }
        } else {
            let raw = self.after.as_deref().unwrap_or_default();
            let delay =
                parse_duration(raw).map_err(|m| ValidationError::new("schedule.after", m))?;
            let at = now.saturating_add(delay);
            check_one_shot(at, now, "schedule.after")?;
            ScheduleKind::After { delay, at }
        };
        Schedule::new(kind, start_at, end_at)
    }
}

fn check_one_shot(at: Timestamp, now: Timestamp, field: &str) -> Result<(), ValidationError> {
    if at.as_millis() < now.as_millis() - limits::MAX_AT_PAST_MS {
        return Err(ValidationError::new(
            field,
            "lies more than 60s in the past",
        ));
    }
    if at.as_millis() > now.as_millis().saturating_add(limits::MAX_FUTURE_MS) {
        return Err(ValidationError::new(
            field,
            "lies more than 10 years in the future",
        ));
    }
    Ok(())
}

/// Storage form of a schedule. Deserializing re-validates, so a row edited by hand cannot
/// smuggle an invalid schedule past the newtypes.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSchedule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    every_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_ms: Option<i64>,
    /// `first` for `every`, the fire instant for `at` / `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end_at_ms: Option<i64>,
}

impl Serialize for Schedule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = StoredSchedule {
            cron: None,
            time_zone: None,
            every_ms: None,
            after_ms: None,
            at_ms: None,
            start_at_ms: self.start_at.map(Timestamp::as_millis),
            end_at_ms: self.end_at.map(Timestamp::as_millis),
        };
        match &self.kind {
            ScheduleKind::Cron { expr, time_zone } => {
                out.cron = Some(expr.source.clone());
                out.time_zone = Some(time_zone.name().to_owned());
            }
            ScheduleKind::Every { interval, first } => {
                out.every_ms = Some(interval.as_millis());
                out.at_ms = Some(first.as_millis());
            }
            ScheduleKind::At { at } => out.at_ms = Some(at.as_millis()),
            ScheduleKind::After { delay, at } => {
                out.after_ms = Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
                out.at_ms = Some(at.as_millis());
            }
        }
        out.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let raw = StoredSchedule::deserialize(d)?;
        let at = raw.at_ms.map(Timestamp::from_millis);
        let kind = match (raw.cron, raw.every_ms, raw.after_ms, at) {
            (Some(cron), None, None, None) => ScheduleKind::Cron {
                expr: CronExpr::parse(&cron).map_err(D::Error::custom)?,
                time_zone: TimeZone::parse(raw.time_zone.as_deref().unwrap_or("UTC"))
                    .map_err(D::Error::custom)?,
            },
            (None, Some(every), None, Some(first)) => ScheduleKind::Every {
                interval: Interval::from_duration(Duration::from_millis(every.max(0) as u64))
                    .map_err(D::Error::custom)?,
                first,
            },
            (None, None, Some(after), Some(at)) => ScheduleKind::After {
                delay: Duration::from_millis(after.max(0) as u64),
                at,
            },
            (None, None, None, Some(at)) => ScheduleKind::At { at },
            _ => {
                return Err(D::Error::custom(
                    "stored schedule has an invalid combination of fields",
                ));
            }
        };
        Schedule::new(
            kind,
            raw.start_at_ms.map(Timestamp::from_millis),
            raw.end_at_ms.map(Timestamp::from_millis),
        )
        .map_err(D::Error::custom)
    }
}
