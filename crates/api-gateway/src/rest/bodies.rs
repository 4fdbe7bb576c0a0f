//! Request and response bodies of the REST API, as the OpenAPI document shows them.

use std::collections::BTreeMap;

use chime_domain::{Occurrence, Page, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::{TimerInput, TimerView};
use crate::view::ScheduleShown;

#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The fire time of `at` and `after`; the first fire time of `every`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CallbackBody {
    pub url: String,
    pub method: String,
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    pub timeout: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetryBody {
    pub max_attempts: u32,
    pub initial_backoff: String,
    pub max_backoff: String,
    pub jitter: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NextRun {
    /// RFC 3339, UTC.
    pub utc: String,
    /// The same instant in the timer's zone.
    pub local: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TimerBody {
    pub id: i64,
    pub app: String,
    pub name: String,
    pub schedule: ScheduleBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    pub callback: CallbackBody,
    pub retry: RetryBody,
    pub misfire: chime_domain::MisfirePolicy,
    pub delivery: chime_domain::DeliveryMode,
    pub enabled: bool,
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
    /// The next five fire times (empty while disabled).
    pub next_runs: Vec<NextRun>,
}

impl From<TimerView> for TimerBody {
    fn from(v: TimerView) -> Self {
        let mut schedule = ScheduleBody {
            cron: None,
            time_zone: None,
            every: None,
            after: None,
            at: None,
        };
        match v.schedule_shown() {
            ScheduleShown::Cron {
                expression,
                time_zone,
            } => {
                schedule.cron = Some(expression);
                schedule.time_zone = Some(time_zone);
            }
            ScheduleShown::Every { interval, first } => {
                schedule.every = Some(interval);
                schedule.at = Some(first.to_rfc3339());
            }
            ScheduleShown::At { at } => schedule.at = Some(at.to_rfc3339()),
            ScheduleShown::After { delay, at } => {
                schedule.after = Some(delay);
                schedule.at = Some(at.to_rfc3339());
            }
        }
        let cb = v.callback_shown();
        let retry = v.retry_shown();
        let next_runs = v
            .next_runs_shown()
            .into_iter()
            .map(|n| NextRun {
                utc: n.at.to_rfc3339(),
                local: n.local,
            })
            .collect();
        let t = v.timer;
        let s = &t.spec.schedule;
        Self {
            id: t.id.get(),
            app: t.spec.app.to_string(),
            name: t.spec.name.to_string(),
            schedule,
            start_at: s.start_at().map(Timestamp::to_rfc3339),
            end_at: s.end_at().map(Timestamp::to_rfc3339),
            callback: CallbackBody {
                url: cb.url,
                method: cb.method,
                headers: cb.headers.into_iter().collect(),
                body: cb.body,
                timeout: cb.timeout,
            },
            retry: RetryBody {
                max_attempts: retry.max_attempts,
                initial_backoff: retry.initial_backoff,
                max_backoff: retry.max_backoff,
                jitter: retry.jitter,
            },
            misfire: t.spec.misfire,
            delivery: t.spec.delivery,
            enabled: t.enabled,
            version: t.version,
            created_at: t.created_at.to_rfc3339(),
            updated_at: t.updated_at.to_rfc3339(),
            next_runs,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TimerList {
    pub timers: Vec<TimerBody>,
    /// Pass back as `page_token` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchCreateBody {
    /// 1 to 100 timers, created all or none.
    pub requests: Vec<BatchItem>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    pub timer: TimerInput,
    /// Idempotency key of this item, as the Idempotency-Key header is for a single create.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchCreated {
    pub timers: Vec<TimerBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunBody {
    /// `{timer_id}:{run_at_ms}`, the callback's Idempotency-Key.
    pub task_key: String,
    pub timer_version: i64,
    /// pending, running, succeeded, retrying, failed, dead or skipped.
    pub status: String,
    pub attempt: u32,
    pub run_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fired_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lateness_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl From<Occurrence> for RunBody {
    fn from(o: Occurrence) -> Self {
        Self {
            task_key: o.key.to_string(),
            timer_version: o.timer_version,
            status: o.status.as_str().into(),
            attempt: o.attempt,
            run_at: o.key.run_at.to_rfc3339(),
            next_attempt_at: o.next_attempt_at.map(Timestamp::to_rfc3339),
            fired_at: o.fired_at.map(Timestamp::to_rfc3339),
            lateness_ms: o.lateness_ms,
            http_status: o.http_status,
            error: o.error,
            output: o.output,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

impl From<Page<Occurrence>> for RunList {
    fn from(page: Page<Occurrence>) -> Self {
        Self {
            runs: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next_page_token.map(|t| t.as_str().to_owned()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Triggered {
    pub task_key: String,
    pub run_at: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListTimersParams {
    /// Only timers of this app.
    pub app: Option<String>,
    /// Only enabled (true) or disabled (false) timers.
    pub enabled: Option<bool>,
    /// 1 to 1000; default 100.
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListRunsParams {
    /// pending, running, succeeded, retrying, failed, dead or skipped.
    pub status: Option<String>,
    /// Also list occurrences materialized ahead and not due yet (default: only those due
    /// by now).
    pub upcoming: Option<bool>,
    /// 1 to 1000; default 100.
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}
