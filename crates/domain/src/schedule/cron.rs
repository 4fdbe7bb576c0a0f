//! Cron expressions and time zones: parsing, and walking a pattern through a window.

use std::fmt;
use std::str::FromStr;

use chrono::{Offset, TimeZone as _};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::Timestamp;
use crate::error::ValidationError;

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
    pub(super) source: String,
    // Boxed: a parsed pattern is ~300 bytes and would bloat every schedule value.
    pub(super) cron: Box<Cron>,
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

/// Walks a cron pattern through `[lo, hi)` in a zone.
///
/// croner resolves DST gaps and overlaps relative to where a search starts. So that a window
/// split in two yields exactly what the whole window yields, a search that starts within a few
/// hours of an offset change begins at a fixed earlier anchor (the UTC day's start minus 6 h)
/// and skips forward; elsewhere it starts at `lo` directly.
pub(super) struct CronIter<'a> {
    cron: &'a Cron,
    next: Option<chrono::DateTime<chrono_tz::Tz>>,
    lo: i64,
    hi: i64,
}

impl<'a> CronIter<'a> {
    const NEAR_MS: i64 = 3 * 3_600_000;

    pub(super) fn new(cron: &'a Cron, zone: TimeZone, lo: Timestamp, hi: Timestamp) -> Self {
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

/// How a daylight-saving change shaped a cron run, shown beside it in previews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DstNote {
    /// The wall time the pattern names did not exist (clocks sprang forward): the run is
    /// the first instant after the gap.
    Gap,
    /// The wall time happened twice (clocks fell back): the run is its first instance.
    Repeated,
}

impl CronExpr {
    /// Whether a daylight-saving change shaped the run at `at` in `zone`.
    pub fn dst_note(&self, zone: TimeZone, at: Timestamp) -> Option<DstNote> {
        let local = zone.tz().timestamp_millis_opt(at.as_millis()).single()?;
        if !self.cron.is_time_matching(&local).unwrap_or(true) {
            return Some(DstNote::Gap);
        }
        match zone.tz().from_local_datetime(&local.naive_local()) {
            chrono::LocalResult::Ambiguous(..) => Some(DstNote::Repeated),
            _ => None,
        }
    }
}
