//! The schedule as a request spells it.

use serde::{Deserialize, Serialize};

use super::{CronExpr, DstPolicy, Interval, Schedule, ScheduleKind, TimeZone};
use crate::duration::parse_duration;
use crate::error::ValidationError;
use crate::{Timestamp, limits};

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
    /// Cron only: what a local time in a spring-forward gap (`gap`: `next_instant`,
    /// `shift`, `skip`) or in a repeated hour (`repeat`: `first`, `both`) does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstPolicy>,
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
        if self.dst.is_some() && self.cron.is_none() {
            return Err(ValidationError::new(
                "schedule.dst",
                "dst applies to cron schedules only",
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
            ScheduleKind::Cron {
                expr,
                time_zone,
                dst: self.dst.unwrap_or_default(),
            }
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
