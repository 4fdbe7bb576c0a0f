//! The timer API as one trait. REST and gRPC handlers only translate to and from these
//! types; every rule lives behind [`TimerApi`].
//!
//! Input types are the domain's `*Input` types: plain strings and numbers, exactly as callers
//! send them, and the REST request schemas too. The service parses them into domain types, so
//! both transports report the same error, naming the same field, for the same bad input.

use async_trait::async_trait;
use std::collections::BTreeMap;

use chime_domain::{
    CallbackInput, DeliveryMode, DstNote, MisfirePolicy, Occurrence, OnComplete, OverlapPolicy,
    Page, RetryPolicyInput, ScheduleInput, TaskKey, TimeZone, Timer, TimerId, TimerState,
    Timestamp,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::context::RequestContext;
use crate::error::ApiResult;

/// A timer as a caller describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimerInput {
    #[schema(example = "billing")]
    pub app: String,
    #[schema(example = "nightly-invoice")]
    pub name: String,
    pub schedule: ScheduleInput,
    /// RFC 3339; no fire time before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// RFC 3339; no fire time after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    pub callback: CallbackInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicyInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<MisfirePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Labels to find the timer by: up to 16, keys and values of letters, digits, `_`, `-`
    /// (values also `.`), at most 63 long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = json!({"team": "billing"}))]
    pub labels: Option<BTreeMap<String, String>>,
    /// Recurring timers: done after this many fire times (1 to 10,000), counted from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// `delete`: once done (one-shot fired, `max_runs` used, `end_at` passed) and its last
    /// occurrence ended, the timer deletes itself. Default `keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<OnComplete>,
    /// Occurrences older than this when they come to fire (after an outage) are skipped,
    /// whatever the misfire policy ("10m"; 1s to 366d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_window: Option<String>,
    /// `skip`: an occurrence due while another of this timer is in flight or retrying is
    /// skipped (recurring timers). Default `allow_all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<OverlapPolicy>,
    /// Flexible window ("5m"; 1s to 1d): each occurrence fires at its own fixed offset
    /// within it after its time, spreading timers that share a schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The app's exclusion calendars (up to 8): no fire time on their dates, read in the
    /// schedule's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = json!(["holidays"]))]
    pub exclude_calendars: Option<Vec<String>>,
    /// Timers of the same app started when a run ends (a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<ThenInput>,
}

/// A chain: the timers of the same app that get one occurrence, due at once, when a run
/// ends. Each list holds up to 16 names; a name that does not exist, or a cycle, is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThenInput {
    /// Started when a run succeeded.
    #[serde(default)]
    #[schema(example = json!(["publish-report"]))]
    pub on_success: Vec<String>,
    /// Started when a run ended dead or failed (not while it is retried).
    #[serde(default)]
    #[schema(example = json!(["page-oncall"]))]
    pub on_failure: Vec<String>,
}

impl ThenInput {
    pub fn parse(&self) -> Result<chime_domain::Then, chime_domain::ValidationError> {
        chime_domain::Then::parse(self.on_success.clone(), self.on_failure.clone())
    }
}

/// One run, with the chain steps it started when it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDetail {
    pub run: Occurrence,
    pub chain: Vec<chime_domain::StepRecord>,
}

/// A create request: the timer plus an optional idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub timer: TimerInput,
    pub idempotency_key: Option<String>,
}

/// Fields to change; absent ones keep their value. The app cannot change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimerPatch {
    /// Refuse the update unless the timer is at this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicyInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<MisfirePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
    /// Replaces every label; `{}` removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// A new limit counted from now; 0 removes the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<OnComplete>,
    /// "" removes the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<OverlapPolicy>,
    /// "" removes the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// Replaces the list; `[]` removes every calendar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_calendars: Option<Vec<String>>,
    /// Replaces the chain; `{}` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<ThenInput>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTimers {
    pub app: Option<String>,
    pub enabled: Option<bool>,
    /// `enabled`, `paused` or `done`.
    pub state: Option<String>,
    pub name_prefix: Option<String>,
    /// `key=value[,key=value…]`.
    pub label: Option<String>,
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRuns {
    pub timer_id: TimerId,
    pub status: Option<String>,
    /// Also list occurrences not due yet (materialized ahead); by default only the history.
    pub upcoming: bool,
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}

/// Which dead letters to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListDeadLetters {
    pub app: Option<String>,
    pub timer_id: Option<TimerId>,
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}

/// What to redrive, as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveTarget {
    /// A task key `{timer_id}:{run_at_ms}`, unparsed.
    Run(String),
    Timer(TimerId),
}

/// A timer with what a reader needs to understand it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerView {
    pub timer: Timer,
    /// The next fire times (at most 5) from now.
    pub next_runs: Vec<Timestamp>,
    pub state: TimerState,
    /// Fire times left under `max_runs`.
    pub remaining_runs: Option<u32>,
}

/// Which run times to preview: a schedule as a timer gives it, from an instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    pub schedule: ScheduleInput,
    /// RFC 3339; the schedule's bounds, as on a timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// How many run times, 1 to 1000; default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// RFC 3339; default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// With `exclude_calendars`: whose calendars they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Calendars of `app` whose dates the runs skip, as on a timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_calendars: Option<Vec<String>>,
}

/// One run time of a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviewRun {
    pub at: Timestamp,
    pub zone: TimeZone,
    pub dst: Option<DstNote>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered {
    pub key: TaskKey,
}

/// Which past fire times of a timer to fire now (`POST /v1/timers/{id}/backfill`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// RFC 3339: the first fire time to include.
    #[schema(example = "2026-11-20T00:00:00Z")]
    pub from: String,
    /// RFC 3339, not after now: fire times before it are included.
    #[schema(example = "2026-11-23T00:00:00Z")]
    pub to: String,
    /// How the backfilled runs start beside the timer's other runs (`allow_all`, `skip`,
    /// `buffer_one`); default the timer's own policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<OverlapPolicy>,
    /// Runs started per second, 1 to 100; default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
}

/// What a backfill added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backfilled {
    /// Fire times added as runs.
    pub added: u32,
    /// Fire times in the range that have a run already (left as they are).
    pub existing: u32,
    pub overlap: OverlapPolicy,
    /// When the first and the last added run start.
    pub first_due: Option<Timestamp>,
    pub last_due: Option<Timestamp>,
}

/// A timer declared by app and name (`PUT /v1/apps/{app}/timers/{name}`, `chime apply`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyRequest {
    pub app: String,
    pub name: String,
    pub timer: TimerInput,
    /// Only report what would change.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyResult {
    Created,
    Updated,
    Unchanged,
}

impl ApplyResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
        }
    }
}

/// What applying a declaration did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub result: ApplyResult,
    /// The fields that differ, by request name (`enabled` included).
    pub changes: Vec<String>,
    /// The timer as it is after the apply (before it, when dry); none for a dry create.
    pub timer: Option<TimerView>,
}

/// An exclusion calendar as a request gives it (`PUT /v1/apps/{app}/calendars/{name}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarInput {
    /// Dates (`2026-12-25`) and ranges of dates (`2026-12-24/2026-12-31`, both included),
    /// at most 366 entries.
    #[schema(example = json!(["2026-12-24/2026-12-26", "2027-01-01"]))]
    pub dates: Vec<String>,
}

/// What putting a calendar did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarPut {
    pub calendar: chime_domain::Calendar,
    pub created: bool,
    /// Timers that name it and were rewritten to its new dates.
    pub timers_updated: u32,
}

/// Most timers one batch create may hold.
pub const MAX_BATCH: usize = 100;

/// Every method takes the request's [`RequestContext`]: the caller, the apps it may act on
/// and the request id. A timer outside the caller's scope answers as if it did not exist.
#[async_trait]
pub trait TimerApi: Send + Sync + 'static {
    async fn create_timer(&self, ctx: &RequestContext, req: CreateRequest) -> ApiResult<TimerView>;
    /// All or none, at most [`MAX_BATCH`].
    async fn batch_create_timers(
        &self,
        ctx: &RequestContext,
        reqs: Vec<CreateRequest>,
    ) -> ApiResult<Vec<TimerView>>;
    async fn get_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<TimerView>;
    async fn list_timers(
        &self,
        ctx: &RequestContext,
        query: ListTimers,
    ) -> ApiResult<Page<TimerView>>;
    async fn update_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        patch: TimerPatch,
    ) -> ApiResult<TimerView>;
    async fn delete_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<()>;
    async fn set_timer_enabled(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        enabled: bool,
    ) -> ApiResult<TimerView>;
    /// Disables with an optional reason, kept until the timer is enabled again.
    async fn pause_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        reason: Option<String>,
    ) -> ApiResult<TimerView>;
    /// The timer's next `count` fire times (default 10), as they will fire.
    async fn next_runs(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        count: Option<u32>,
    ) -> ApiResult<Vec<PreviewRun>>;
    /// The run times a schedule would have, without creating anything.
    async fn preview(
        &self,
        ctx: &RequestContext,
        req: PreviewRequest,
    ) -> ApiResult<Vec<PreviewRun>>;
    /// Creates the app's timer of that name, or changes it to match: idempotent, and a
    /// declaration that says what the timer already is changes nothing (no new version).
    async fn apply_timer(&self, ctx: &RequestContext, req: ApplyRequest) -> ApiResult<Applied>;
    /// One extra occurrence, due now.
    async fn trigger_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<Triggered>;
    /// The timer's fire times in a past range, added as runs marked as a backfill that
    /// start at a bounded pace from now; fire times that have a run already are left alone.
    async fn backfill_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        req: BackfillRequest,
    ) -> ApiResult<Backfilled>;
    async fn list_runs(&self, ctx: &RequestContext, query: ListRuns)
    -> ApiResult<Page<Occurrence>>;
    /// One run by its task key `{timer_id}:{run_at_ms}`, with its whole output.
    async fn get_run(&self, ctx: &RequestContext, key: &str) -> ApiResult<RunDetail>;
    async fn list_dead_letters(
        &self,
        ctx: &RequestContext,
        query: ListDeadLetters,
    ) -> ApiResult<Page<Occurrence>>;
    /// Re-queues dead occurrences; returns how many.
    async fn redrive(&self, ctx: &RequestContext, what: RedriveTarget) -> ApiResult<u64>;
    /// Creates or replaces the app's exclusion calendar; the app's timers that name it are
    /// rewritten (a new version each) to skip its new dates.
    async fn put_calendar(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
        input: CalendarInput,
    ) -> ApiResult<CalendarPut>;
    async fn get_calendar(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
    ) -> ApiResult<chime_domain::Calendar>;
    async fn list_calendars(
        &self,
        ctx: &RequestContext,
        app: String,
    ) -> ApiResult<Vec<chime_domain::Calendar>>;
    /// Attempts, failures, dead letters and lateness per minute, from the executors' tallies.
    async fn activity(
        &self,
        ctx: &RequestContext,
        query: crate::activity::ActivityQuery,
    ) -> ApiResult<crate::activity::ActivityReport>;
    /// Creates or replaces the app's failure-notification settings (admin scope); `true`
    /// when created.
    async fn put_notifications(
        &self,
        ctx: &RequestContext,
        app: String,
        input: crate::notifications::NotificationsInput,
    ) -> ApiResult<(bool, crate::notifications::AppNotifications)>;
    /// The app's settings and the notifications sent lately (admin scope).
    async fn get_notifications(
        &self,
        ctx: &RequestContext,
        app: String,
    ) -> ApiResult<crate::notifications::AppNotifications>;
    /// Whether the service can serve (its database answers).
    async fn ready(&self) -> ApiResult<()>;
}
