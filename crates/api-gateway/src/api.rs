//! The timer API as one trait. REST and gRPC handlers only translate to and from these
//! types; every rule lives behind [`TimerApi`].
//!
//! Input types are the domain's `*Input` types: plain strings and numbers, exactly as callers
//! send them, and the REST request schemas too. The service parses them into domain types, so
//! both transports report the same error, naming the same field, for the same bad input.

use async_trait::async_trait;
use chime_domain::{
    CallbackInput, DeliveryMode, MisfirePolicy, Occurrence, Page, RetryPolicyInput, ScheduleInput,
    TaskKey, Timer, TimerId, Timestamp,
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
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTimers {
    pub app: Option<String>,
    pub enabled: Option<bool>,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered {
    pub key: TaskKey,
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
    /// One extra occurrence, due now.
    async fn trigger_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<Triggered>;
    async fn list_runs(&self, ctx: &RequestContext, query: ListRuns)
    -> ApiResult<Page<Occurrence>>;
    async fn list_dead_letters(
        &self,
        ctx: &RequestContext,
        query: ListDeadLetters,
    ) -> ApiResult<Page<Occurrence>>;
    /// Re-queues dead occurrences; returns how many.
    async fn redrive(&self, ctx: &RequestContext, what: RedriveTarget) -> ApiResult<u64>;
    /// Whether the service can serve (its database answers).
    async fn ready(&self) -> ApiResult<()>;
}
