//! What a cron schedule does where daylight saving moves the wall clock: a local time in a
//! spring-forward gap fires at the first instant after the gap (`next_instant`, croner's own
//! behaviour), later by the gap's length (`shift`), or not at all (`skip`); a local time that
//! happens twice fires once (`first`) or at both instances (`both`).

use std::collections::BTreeSet;

use chrono::{Offset, TimeZone as _};
use croner::Cron;
use serde::{Deserialize, Serialize};

use super::cron::{CronIter, DstNote};
use super::{CronExpr, TimeZone};
use crate::Timestamp;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapPolicy {
    /// The first instant after the gap.
    #[default]
    NextInstant,
    /// The local time plus the gap's length (02:30 in a one-hour gap fires at 03:30).
    Shift,
    /// Not at all.
    Skip,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepeatPolicy {
    /// Once, at the first instance.
    #[default]
    First,
    /// At both instances.
    Both,
}

/// A cron schedule's daylight-saving policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DstPolicy {
    #[serde(default)]
    pub gap: GapPolicy,
    #[serde(default)]
    pub repeat: RepeatPolicy,
}

impl DstPolicy {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// How far a policy moves a run: more than any zone's offset change.
const MARGIN_MS: i64 = 3 * 3_600_000;

/// Runs of `cron` in `[lo, hi)` under `policy`. Every run it makes from one of croner's lies
/// at or after it and within [`MARGIN_MS`], so croner's runs are walked from `lo - MARGIN`
/// and a run is let out once croner has passed it: the same runs whatever the window.
pub(super) struct DstIter<'a> {
    inner: CronIter<'a>,
    expr: &'a CronExpr,
    zone: TimeZone,
    policy: DstPolicy,
    pending: BTreeSet<i64>,
    inner_at: i64,
    inner_done: bool,
    lo: i64,
    hi: i64,
}

impl<'a> DstIter<'a> {
    pub(super) fn new(
        expr: &'a CronExpr,
        zone: TimeZone,
        policy: DstPolicy,
        lo: Timestamp,
        hi: Timestamp,
    ) -> Self {
        Self {
            inner: CronIter::new(&expr.cron, zone, lo.add_millis(-MARGIN_MS), hi),
            expr,
            zone,
            policy,
            pending: BTreeSet::new(),
            inner_at: i64::MIN,
            inner_done: false,
            lo: lo.as_millis(),
            hi: hi.as_millis(),
        }
    }

    /// The runs croner's run at `t` stands for under the policy.
    fn runs_for(&mut self, t: Timestamp) {
        let tz = self.zone.tz();
        match self.expr.dst_note(self.zone, t) {
            Some(DstNote::Gap) => match self.policy.gap {
                GapPolicy::NextInstant => {
                    self.pending.insert(t.as_millis());
                }
                GapPolicy::Skip => {}
                GapPolicy::Shift => {
                    for at in shifted(&self.expr.cron, self.zone, t) {
                        self.pending.insert(at);
                    }
                }
            },
            Some(DstNote::Repeated) => {
                self.pending.insert(t.as_millis());
                if self.policy.repeat == RepeatPolicy::Both
                    && let Some(local) = tz.timestamp_millis_opt(t.as_millis()).single()
                    && let chrono::LocalResult::Ambiguous(first, second) =
                        tz.from_local_datetime(&local.naive_local())
                    && first.timestamp_millis() == t.as_millis()
                {
                    self.pending.insert(second.timestamp_millis());
                }
            }
            None => {
                self.pending.insert(t.as_millis());
            }
        }
    }
}

/// The wall times in the gap ending at `t` the pattern names, each read with the offset
/// before the gap: the instants the gap's length after them.
fn shifted(cron: &Cron, zone: TimeZone, t: Timestamp) -> Vec<i64> {
    let tz = zone.tz();
    let offset = |at: i64| {
        tz.offset_from_utc_datetime(&Timestamp::from_millis(at).to_datetime().naive_utc())
            .fix()
            .local_minus_utc()
    };
    let (before, after) = (offset(t.as_millis() - 1), offset(t.as_millis()));
    let gap = i64::from(after - before);
    if gap <= 0 {
        return Vec::new();
    }
    let Some(local_end) = tz.timestamp_millis_opt(t.as_millis()).single() else {
        return Vec::new();
    };
    let end = local_end.naive_local();
    (1..=gap)
        .rev()
        .map(|back| end - chrono::Duration::seconds(back))
        .filter(|wall| cron.is_time_matching(wall).unwrap_or(false))
        .map(|wall| {
            (wall - chrono::Duration::seconds(i64::from(before)))
                .and_utc()
                .timestamp_millis()
        })
        .collect()
}

impl Iterator for DstIter<'_> {
    type Item = Timestamp;

    fn next(&mut self) -> Option<Timestamp> {
        loop {
            if let Some(&x) = self.pending.first()
                && (self.inner_done || self.inner_at > x)
            {
                self.pending.remove(&x);
                if x >= self.hi {
                    return None;
                }
                if x >= self.lo {
                    return Some(Timestamp::from_millis(x));
                }
                continue;
            }
            match self.inner.next() {
                Some(t) => {
                    self.inner_at = t.as_millis();
                    self.runs_for(t);
                }
                None if self.pending.is_empty() => return None,
                None => self.inner_done = true,
            }
        }
    }
}
