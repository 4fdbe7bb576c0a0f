//! The timer API as one trait. REST and gRPC handlers only translate to and from these
//! types; every rule lives behind [`TimerApi`].
//!
//! Input types are plain strings and numbers, exactly as callers send them, and double as the
//! REST request schemas. The service parses them into domain types, so both transports
//! report the same error, naming the same field, for the same bad input.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chime_domain::{Occurrence, Page, TaskKey, Timer, TimerId, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;

/// Exactly one of `cron`, `every`, `at`, `after`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Five fields (minute hour day month weekday) or six with leading seconds.
    #[schema(example = "0 0 2 * * *")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// IANA zone for `cron`; default UTC.
    #[schema(example = "Europe/Berlin")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Fixed interval, at least 1s.
    #[schema(example = "30s")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// One-shot at an RFC 3339 instant.
    #[schema(example = "2026-11-22T10:00:00Z")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// One-shot, this long after creation.
    #[schema(example = "90s")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackSpec {
    #[schema(example = "http://billing.internal/run")]
    pub url: String,
    /// GET, POST (default), PUT, PATCH or DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Per attempt, 100ms to 5m; default 5s.
    #[schema(example = "5s")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// 1 to 25; default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Default 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_backoff: Option<String>,
    /// Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<String>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    FireOnce,
    FireAll,
    Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    AtLeastOnce,
    AtMostOnce,
}

/// A timer as a caller describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimerInput {
    #[schema(example = "billing")]
    pub app: String,
    #[schema(example = "nightly-invoice")]
    pub name: String,
    pub schedule: ScheduleSpec,
    /// RFC 3339; no fire time before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// RFC 3339; no fire time after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    pub callback: CallbackSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<Misfire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
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
    pub schedule: Option<ScheduleSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<Misfire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
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
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
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

#[async_trait]
pub trait TimerApi: Send + Sync + 'static {
    async fn create_timer(&self, req: CreateRequest) -> ApiResult<TimerView>;
    /// All or none, at most [`MAX_BATCH`].
    async fn batch_create_timers(&self, reqs: Vec<CreateRequest>) -> ApiResult<Vec<TimerView>>;
    async fn get_timer(&self, id: TimerId) -> ApiResult<TimerView>;
    async fn list_timers(&self, query: ListTimers) -> ApiResult<Page<TimerView>>;
    async fn update_timer(&self, id: TimerId, patch: TimerPatch) -> ApiResult<TimerView>;
    async fn delete_timer(&self, id: TimerId) -> ApiResult<()>;
    async fn set_timer_enabled(&self, id: TimerId, enabled: bool) -> ApiResult<TimerView>;
    /// One extra occurrence, due now.
    async fn trigger_timer(&self, id: TimerId) -> ApiResult<Triggered>;
    async fn list_runs(&self, query: ListRuns) -> ApiResult<Page<Occurrence>>;
    /// Whether the service can serve (its database answers).
    async fn ready(&self) -> ApiResult<()>;
}
