//! Exclusion calendars: an app's named sets of dates on which the timers that list them
//! (`exclude_calendars`) do not fire. A date is read in the timer's schedule zone (UTC for
//! `every`, `at` and `after`).

use std::fmt;

use chrono::{Days, NaiveDate, TimeZone as _};
use serde::{Deserialize, Serialize};

use crate::{AppName, TimeZone, Timestamp, ValidationError, limits};

/// A calendar's name: 1 to 64 of `A-Z a-z 0-9 _ - .`, unique per app.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CalendarName(String);

impl CalendarName {
    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= limits::MAX_CALENDAR_NAME_LEN
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if ok {
            Ok(Self(s))
        } else {
            Err(ValidationError::new(
                "calendar",
                format!(
                    "{s:?} is not a calendar name: 1 to {} of A-Z a-z 0-9 _ - .",
                    limits::MAX_CALENDAR_NAME_LEN
                ),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CalendarName {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<CalendarName> for String {
    fn from(n: CalendarName) -> Self {
        n.0
    }
}

impl fmt::Display for CalendarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Dates from `first` to `last`, both included. Written `2026-12-25` (one day) or
/// `2026-12-24/2026-12-31` (ISO 8601 interval of dates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DateRange {
    pub first: NaiveDate,
    pub last: NaiveDate,
}

impl DateRange {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        let date = |d: &str| {
            NaiveDate::parse_from_str(d.trim(), "%Y-%m-%d")
                .ok()
                .filter(|d| (1970..=9999).contains(&chrono::Datelike::year(d)))
                .ok_or_else(|| {
                    ValidationError::new(
                        "dates",
                        format!(
                            "{s:?} is not a date (2026-12-25) or a range of dates (2026-12-24/2026-12-31)"
                        ),
                    )
                })
        };
        let (first, last) = match s.split_once('/') {
            Some((a, b)) => (date(a)?, date(b)?),
            None => {
                let d = date(s)?;
                (d, d)
            }
        };
        if last < first {
            return Err(ValidationError::new(
                "dates",
                format!("{s:?} ends before it starts"),
            ));
        }
        Ok(Self { first, last })
    }
}

impl fmt::Display for DateRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first.format("%Y-%m-%d"))
        } else {
            write!(
                f,
                "{}/{}",
                self.first.format("%Y-%m-%d"),
                self.last.format("%Y-%m-%d")
            )
        }
    }
}

/// The dates of a calendar, as given: at most [`limits::MAX_CALENDAR_ENTRIES`] entries.
pub fn parse_dates(raw: &[String]) -> Result<Vec<DateRange>, ValidationError> {
    if raw.len() > limits::MAX_CALENDAR_ENTRIES {
        return Err(ValidationError::new(
            "dates",
            format!(
                "at most {} dates or ranges per calendar",
                limits::MAX_CALENDAR_ENTRIES
            ),
        ));
    }
    raw.iter().map(|s| DateRange::parse(s)).collect()
}

/// An app's exclusion calendar as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub app: AppName,
    pub name: CalendarName,
    pub dates: Vec<DateRange>,
    pub updated_at: Timestamp,
}

/// The dates a schedule does not fire on: the union of its calendars, sorted and merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions(Vec<DateRange>);

impl Exclusions {
    pub fn new(ranges: impl IntoIterator<Item = DateRange>) -> Self {
        let mut all: Vec<DateRange> = ranges.into_iter().collect();
        all.sort();
        let mut merged: Vec<DateRange> = Vec::with_capacity(all.len());
        for r in all {
            match merged.last_mut() {
                // Overlapping or adjacent: one range.
                Some(m) if r.first <= m.last.checked_add_days(Days::new(1)).unwrap_or(m.last) => {
                    m.last = m.last.max(r.last);
                }
                _ => merged.push(r),
            }
        }
        Self(merged)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn ranges(&self) -> &[DateRange] {
        &self.0
    }

    /// The excluded range holding `date`, if one does.
    fn covering(&self, date: NaiveDate) -> Option<DateRange> {
        let i = self.0.partition_point(|r| r.last < date);
        self.0.get(i).copied().filter(|r| r.first <= date)
    }

    /// When `at` falls on an excluded date in `zone`: the first instant after that range
    /// (the start of the next day there), where a walk of fire times resumes.
    pub(crate) fn resume_after(&self, at: Timestamp, zone: TimeZone) -> Option<Timestamp> {
        if self.0.is_empty() {
            return None;
        }
        let tz = zone.tz();
        let local = chrono::DateTime::from_timestamp_millis(at.as_millis())?
            .with_timezone(&tz)
            .date_naive();
        let range = self.covering(local)?;
        let next_day = range.last.checked_add_days(Days::new(1))?;
        // Local midnight, or the first hour after it that exists (a DST gap at midnight).
        let resume = (0..=3)
            .find_map(|h| {
                tz.from_local_datetime(&next_day.and_hms_opt(h, 0, 0)?)
                    .earliest()
            })
            .map(|t| Timestamp::from_millis(t.timestamp_millis()))
            // Past year 9999: nothing to resume.
            .unwrap_or(Timestamp::from_millis(i64::MAX));
        Some(resume.max(at.add_millis(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn dates_and_ranges_parse_and_print_back() {
        let one = DateRange::parse("2026-12-25").unwrap();
        assert_eq!((one.first, one.last), (d("2026-12-25"), d("2026-12-25")));
        assert_eq!(one.to_string(), "2026-12-25");
        let span = DateRange::parse("2026-12-24/2026-12-31").unwrap();
        assert_eq!(span.to_string(), "2026-12-24/2026-12-31");
        for bad in [
            "",
            "25.12.2026",
            "2026-02-30",
            "2026-12-31/2026-12-24",
            "1969-01-01",
        ] {
            assert_eq!(DateRange::parse(bad).unwrap_err().field, "dates", "{bad}");
        }
        assert!(CalendarName::parse("holidays-2026.de_DE").is_ok());
        let long = "x".repeat(65);
        for bad in ["", "has space", "ü", long.as_str()] {
            assert!(CalendarName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exclusions_merge_and_resume_at_the_next_local_midnight() {
        let e = Exclusions::new([
            DateRange::parse("2026-12-24/2026-12-26").unwrap(),
            DateRange::parse("2026-12-27").unwrap(),
            DateRange::parse("2026-12-25").unwrap(),
            DateRange::parse("2027-01-01").unwrap(),
        ]);
        assert_eq!(e.ranges().len(), 2, "{e:?}");
        let berlin = TimeZone::parse("Europe/Berlin").unwrap();
        let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        // 2026-12-23T23:30Z is the 24th in Berlin: resumes at midnight of the 28th there.
        assert_eq!(
            e.resume_after(at("2026-12-23T23:30:00Z"), berlin),
            Some(at("2026-12-27T23:00:00Z"))
        );
        assert_eq!(e.resume_after(at("2026-12-23T22:30:00Z"), berlin), None);
        assert_eq!(
            e.resume_after(at("2027-01-01T12:00:00Z"), TimeZone::UTC),
            Some(at("2027-01-02T00:00:00Z"))
        );
        // Santiago springs forward at midnight (2026-09-06): the day starts at 01:00.
        let santiago = TimeZone::parse("America/Santiago").unwrap();
        let gap = Exclusions::new([DateRange::parse("2026-09-05").unwrap()]);
        assert_eq!(
            gap.resume_after(at("2026-09-05T15:00:00Z"), santiago),
            Some(at("2026-09-06T04:00:00Z"))
        );
    }
}
