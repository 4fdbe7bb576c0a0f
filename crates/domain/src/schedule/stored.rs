//! The storage form of a schedule.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CronExpr, DstPolicy, Interval, RunLimit, Schedule, ScheduleKind, TimeZone};
use crate::{DateRange, Exclusions, Timestamp};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst: Option<DstPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_runs: Option<u32>,
    /// The limit's last run; absent with a limit means no run was left when it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_run_ms: Option<i64>,
    /// [`Schedule::finishes_at`], written for SQL (listing by state, removing finished
    /// timers); recomputed, never trusted, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finish_ms: Option<i64>,
    /// Excluded dates and ranges (`2026-12-25`, `2026-12-24/2026-12-31`), merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    excluded: Vec<String>,
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
            dst: None,
            max_runs: self.limit.map(|l| l.max_runs),
            last_run_ms: self.limit.and_then(|l| l.last).map(Timestamp::as_millis),
            finish_ms: self.finishes_at().map(Timestamp::as_millis),
            excluded: self
                .excluded
                .ranges()
                .iter()
                .map(ToString::to_string)
                .collect(),
        };
        match &self.kind {
            ScheduleKind::Cron {
                expr,
                time_zone,
                dst,
            } => {
                out.cron = Some(expr.source.clone());
                out.time_zone = Some(time_zone.name().to_owned());
                out.dst = (!dst.is_default()).then_some(*dst);
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
                dst: raw.dst.unwrap_or_default(),
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
        let excluded = raw
            .excluded
            .iter()
            .map(|r| DateRange::parse(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(D::Error::custom)?;
        let limit = raw.max_runs.map(|max_runs| RunLimit {
            max_runs,
            last: raw.last_run_ms.map(Timestamp::from_millis),
        });
        Ok(Schedule::new(
            kind,
            raw.start_at_ms.map(Timestamp::from_millis),
            raw.end_at_ms.map(Timestamp::from_millis),
        )
        .map_err(D::Error::custom)?
        .with_exclusions(Exclusions::new(excluded))
        .with_limit(limit))
    }
}
