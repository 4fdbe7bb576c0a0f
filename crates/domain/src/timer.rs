use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::{
    AppName, Bucket, CalendarName, Callback, DeliveryMode, MaxAge, MisfirePolicy, RetryPolicy,
    Schedule, Then, TimerId, TimerName, Timestamp, Window, limits,
};

/// Everything a user decides about a timer. Immutable per version: an update replaces the
/// whole spec and bumps the timer's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    pub app: AppName,
    pub name: TimerName,
    pub schedule: Schedule,
    pub callback: Callback,
    #[serde(default)]
    pub retry: RetryPolicy,
    #[serde(default)]
    pub misfire: MisfirePolicy,
    #[serde(default)]
    pub delivery: DeliveryMode,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    #[serde(default, skip_serializing_if = "OnComplete::is_keep")]
    pub on_complete: OnComplete,
    /// Occurrences older than this when they come to fire (after an outage) are skipped,
    /// whatever the misfire policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_window: Option<MaxAge>,
    #[serde(default, skip_serializing_if = "OverlapPolicy::is_allow_all")]
    pub overlap: OverlapPolicy,
    /// Each occurrence fires at its own offset within this window after its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// The app's calendars whose dates it does not fire on (resolved into the schedule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_calendars: Vec<CalendarName>,
    /// Timers of the same app started when a run ends.
    #[serde(default, skip_serializing_if = "Then::is_empty")]
    pub then: Then,
}

/// Whether an occurrence may start while an earlier one of the same timer is still in
/// flight or waiting to retry.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Occurrences start on time whatever runs.
    #[default]
    AllowAll,
    /// An occurrence due while another is in flight or retrying is skipped, on every
    /// executor replica.
    Skip,
    /// An occurrence due while another is in flight or retrying waits for it to end, then
    /// starts; at most one waits, so one due while another already waits is skipped.
    BufferOne,
    /// An occurrence due while another is in flight or retrying starts on time and ends the
    /// other: a callback in flight is aborted (on whichever executor runs it), a retry is
    /// not made; the other is marked skipped.
    CancelOther,
}

impl OverlapPolicy {
    pub const ALL: [Self; 4] = [
        Self::AllowAll,
        Self::Skip,
        Self::BufferOne,
        Self::CancelOther,
    ];

    pub fn is_allow_all(&self) -> bool {
        *self == Self::AllowAll
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowAll => "allow_all",
            Self::Skip => "skip",
            Self::BufferOne => "buffer_one",
            Self::CancelOther => "cancel_other",
        }
    }
}

impl FromStr for OverlapPolicy {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "overlap",
                    format!("{s:?} is not one of allow_all, skip, buffer_one, cancel_other"),
                )
            })
    }
}

impl TimerSpec {
    /// The fields in which `desired` says something else than this spec, by their request
    /// names; empty when applying `desired` would change nothing (anchors aside, see
    /// [`Schedule::same_intent`]).
    pub fn changes(&self, desired: &TimerSpec) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut check = |differs: bool, field: &'static str| {
            if differs {
                changed.push(field);
            }
        };
        check(self.name != desired.name, "name");
        let (a, b) = (&self.schedule, &desired.schedule);
        let same_kind = Schedule::new(a.kind().clone(), None, None)
            .ok()
            .zip(Schedule::new(b.kind().clone(), None, None).ok())
            .is_some_and(|(x, y)| x.same_intent(&y));
        check(!same_kind, "schedule");
        check(a.start_at() != b.start_at(), "start_at");
        check(
            self.exclude_calendars != desired.exclude_calendars || a.exclusions() != b.exclusions(),
            "exclude_calendars",
        );
        check(a.end_at() != b.end_at(), "end_at");
        check(
            a.limit().map(|l| l.max_runs) != b.limit().map(|l| l.max_runs),
            "max_runs",
        );
        check(self.callback != desired.callback, "callback");
        check(self.retry != desired.retry, "retry");
        check(self.misfire != desired.misfire, "misfire");
        check(self.delivery != desired.delivery, "delivery");
        check(self.labels != desired.labels, "labels");
        check(self.on_complete != desired.on_complete, "on_complete");
        check(
            self.catch_up_window != desired.catch_up_window,
            "catch_up_window",
        );
        check(self.then != desired.then, "then");
        changed
    }
}

/// What happens to a timer once no fire time is left (a one-shot fired, `max_runs` used up,
/// `end_at` passed) and its last occurrence has ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnComplete {
    /// It stays, in state `done`, with its runs.
    #[default]
    Keep,
    /// It deletes itself.
    Delete,
}

impl OnComplete {
    pub fn is_keep(&self) -> bool {
        *self == Self::Keep
    }
}

/// `key → value` labels for finding timers. Keys are 1–63 of `A-Z a-z 0-9 _ -`, values up
/// to 63 of those and `.`; at most 16 per timer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Labels(BTreeMap<String, String>);

impl Labels {
    pub fn parse(map: BTreeMap<String, String>) -> Result<Self, ValidationError> {
        if map.len() > limits::MAX_LABELS {
            return Err(ValidationError::new(
                "labels",
                format!("at most {} labels", limits::MAX_LABELS),
            ));
        }
        for (k, v) in &map {
            check_label(k, v)?;
        }
        Ok(Self(map))
    }

    /// A selector `key=value[,key=value…]`: every pair must match.
    pub fn parse_selector(s: &str) -> Result<Vec<(String, String)>, ValidationError> {
        let mut pairs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(ValidationError::new(
                    "label",
                    format!("{part:?} is not key=value"),
                ));
            };
            let (k, v) = (k.trim(), v.trim());
            check_label(k, v).map_err(|e| ValidationError::new("label", e.message))?;
            pairs.push((k.to_owned(), v.to_owned()));
        }
        if pairs.len() > limits::MAX_LABELS {
            return Err(ValidationError::new(
                "label",
                format!("at most {} pairs", limits::MAX_LABELS),
            ));
        }
        Ok(pairs)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter()
    }

    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0.clone()
    }
}

fn check_label(k: &str, v: &str) -> Result<(), ValidationError> {
    let key_ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if k.is_empty() || k.len() > limits::MAX_LABEL_LEN || !k.chars().all(key_ok) {
        return Err(ValidationError::new(
            "labels",
            format!("label key {k:?} must be 1 to 63 of A-Z, a-z, 0-9, _ and -"),
        ));
    }
    if v.len() > limits::MAX_LABEL_LEN || !v.chars().all(|c| key_ok(c) || c == '.') {
        return Err(ValidationError::new(
            "labels",
            format!("label value {v:?} of {k:?} must be up to 63 of A-Z, a-z, 0-9, _, - and ."),
        ));
    }
    Ok(())
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Labels::parse(BTreeMap::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Why, when and by whom a timer was paused; kept until it is resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseNote {
    pub reason: String,
    pub at: Timestamp,
    /// The id of the token that paused it (`None` for the bootstrap token or with auth off).
    pub by: Option<String>,
}

impl PauseNote {
    /// A reason as given: trimmed, at most 500 characters, no control characters.
    pub fn reason(raw: &str) -> Result<String, ValidationError> {
        let reason = raw.trim();
        crate::plain_text("reason", reason, limits::MAX_PAUSE_REASON_CHARS)?;
        Ok(reason.to_owned())
    }
}

/// Where a timer is in its life, as listings filter by it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerState {
    /// Enabled, with fire times left.
    Enabled,
    /// Disabled.
    Paused,
    /// Enabled, with no fire time left.
    Done,
}

impl TimerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Paused => "paused",
            Self::Done => "done",
        }
    }
}

impl fmt::Display for TimerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TimerState {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Self::Enabled, Self::Paused, Self::Done]
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "state",
                    format!("{s:?} is not one of enabled, paused, done"),
                )
            })
    }
}

/// A timer to be created; the store assigns id, bucket, version and timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTimer {
    pub spec: TimerSpec,
    pub enabled: bool,
    /// Leave its runs unwritten until they end if its spec allows
    /// ([`TimerSpec::may_leave_runs_unwritten`]): the deployment's choice
    /// (`migrator.unwritten_runs`), not the user's.
    pub runs_unwritten: bool,
}

/// A stored timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    pub id: TimerId,
    pub spec: TimerSpec,
    pub enabled: bool,
    /// Starts at 1 and grows by one on every change (update, enable, disable, delete).
    pub version: i64,
    pub bucket: Bucket,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub deleted_at: Option<Timestamp>,
    /// Set while it is disabled with a note.
    pub paused: Option<PauseNote>,
    /// Its runs get occurrence rows ahead of time (`false`: written when they end, see
    /// [`crate::UnwrittenRun`]). Decided when the timer is created; a change that makes the
    /// timer need rows ahead sets it, and nothing clears it again.
    pub written_ahead: bool,
}

impl Timer {
    /// Whether occurrences of `version` should still fire.
    pub fn fires_version(&self, version: i64) -> bool {
        self.enabled && self.deleted_at.is_none() && self.version == version
    }

    pub fn state(&self, now: Timestamp) -> TimerState {
        if !self.enabled {
            TimerState::Paused
        } else if self.spec.schedule.finishes_at().is_some_and(|f| f < now) {
            TimerState::Done
        } else {
            TimerState::Enabled
        }
    }

    /// When the occurrence at `run_at` comes to fire, if its flexible window moves it.
    pub fn due_of(&self, run_at: Timestamp) -> Option<Timestamp> {
        let w = self.spec.window?;
        Some(run_at.saturating_add(w.offset(crate::TaskKey::new(self.id, run_at))))
    }

    /// When the scheduled run at `run_at` is overtaken: the instant its timer's next run
    /// comes due. `None` for a one-shot, for the last run, and for a run the schedule does
    /// not name (a trigger's).
    pub fn overtaken_at(&self, run_at: Timestamp) -> Option<Timestamp> {
        let schedule = &self.spec.schedule;
        if schedule.is_one_shot() {
            return None;
        }
        let mut runs = schedule.occurrences_between(run_at, crate::EXHAUSTED);
        if runs.next() != Some(run_at) {
            return None;
        }
        let next = runs.next()?;
        Some(self.due_of(next).unwrap_or(next))
    }

    /// Whether the occurrence at `run_at` is the last this timer will ever have.
    pub fn is_last_run(&self, run_at: Timestamp) -> bool {
        self.spec
            .schedule
            .occurrences_between(run_at.add_millis(1), crate::EXHAUSTED)
            .next()
            .is_none()
    }
}
