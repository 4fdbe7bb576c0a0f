//! Request and response bodies of the REST API, as the OpenAPI document shows them.

use std::collections::BTreeMap;

use chime_domain::{Occurrence, Page, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::{Applied, PreviewRun, TimerInput, TimerView};
use crate::view::ScheduleShown;

#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Cron only, when not the default: the daylight-saving policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<chime_domain::DstPolicy>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<chime_domain::WorkerInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats: Option<chime_domain::NatsInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp: Option<chime_domain::AmqpInput>,
    pub method: String,
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    pub timeout: String,
    /// Whether each run keeps what the target answered as its `output`.
    pub keep_output: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetryBody {
    pub max_attempts: u32,
    pub initial_backoff: String,
    pub max_backoff: String,
    pub jitter: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

/// Why a timer is paused.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// Up to 500 characters, shown on the timer until it is enabled again.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A pause note as a timer shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PausedBody {
    pub reason: String,
    pub at: String,
    /// The id of the token that paused it (`bootstrap` for the bootstrap token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApplyParams {
    /// Only report what would change.
    pub dry_run: Option<bool>,
}

/// What a declarative apply did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApplyBody {
    /// `created`, `updated` or `unchanged`.
    pub result: String,
    /// The fields that differ, by request name.
    pub changes: Vec<String>,
    /// The timer after the apply (before it when dry); absent for a dry create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer: Option<TimerBody>,
}

impl From<Applied> for ApplyBody {
    fn from(a: Applied) -> Self {
        Self {
            result: a.result.as_str().to_owned(),
            changes: a.changes,
            timer: a.timer.map(Into::into),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NextParams {
    /// 1 to 1000; default 10.
    pub count: Option<u32>,
}

/// One run time of a preview.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunTime {
    /// RFC 3339, UTC.
    pub utc: String,
    /// The same instant in the schedule's zone.
    pub local: String,
    /// `gap`: the wall time the schedule names did not exist that day (clocks sprang
    /// forward) and the run is the first instant after the gap; `repeated`: the wall time
    /// happened twice (clocks fell back) and the run is its first instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<chime_domain::DstNote>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunTimes {
    pub runs: Vec<RunTime>,
}

impl From<Vec<PreviewRun>> for RunTimes {
    fn from(runs: Vec<PreviewRun>) -> Self {
        Self {
            runs: runs
                .into_iter()
                .map(|r| RunTime {
                    utc: r.at.to_rfc3339(),
                    local: r.zone.format(r.at),
                    dst: r.dst,
                })
                .collect(),
        }
    }
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
    /// `enabled`, `paused` (disabled) or `done` (no fire time left).
    pub state: chime_domain::TimerState,
    /// Set while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<PausedBody>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// Fire times left under `max_runs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_runs: Option<u32>,
    pub on_complete: chime_domain::OnComplete,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up_window: Option<String>,
    pub overlap: chime_domain::OverlapPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The app's calendars whose dates it does not fire on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude_calendars: Vec<String>,
    /// Timers of the same app started when a run ends (a chain).
    #[serde(skip_serializing_if = "chime_domain::Then::is_empty")]
    pub then: chime_domain::Then,
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
            dst: None,
            every: None,
            after: None,
            at: None,
        };
        match v.schedule_shown() {
            ScheduleShown::Cron {
                expression,
                time_zone,
                dst,
            } => {
                schedule.cron = Some(expression);
                schedule.time_zone = Some(time_zone);
                schedule.dst = (!dst.is_default()).then_some(dst);
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
                worker: cb.worker,
                nats: cb.nats,
                amqp: cb.amqp,
                method: cb.method,
                headers: cb.headers.into_iter().collect(),
                body: cb.body,
                timeout: cb.timeout,
                keep_output: cb.keep_output,
            },
            retry: RetryBody {
                max_attempts: retry.max_attempts,
                initial_backoff: retry.initial_backoff,
                max_backoff: retry.max_backoff,
                jitter: retry.jitter,
                max_age: retry.max_age,
            },
            misfire: t.spec.misfire,
            delivery: t.spec.delivery,
            enabled: t.enabled,
            state: v.state,
            paused: t.paused.map(|p| PausedBody {
                reason: p.reason,
                at: p.at.to_rfc3339(),
                by: p.by,
            }),
            labels: t.spec.labels.to_map(),
            max_runs: s.limit().map(|l| l.max_runs),
            remaining_runs: v.remaining_runs,
            on_complete: t.spec.on_complete,
            catch_up_window: t.spec.catch_up_window.map(|w| w.to_string()),
            overlap: t.spec.overlap,
            window: t.spec.window.map(|w| w.to_string()),
            exclude_calendars: t
                .spec
                .exclude_calendars
                .iter()
                .map(ToString::to_string)
                .collect(),
            then: t.spec.then.clone(),
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
    /// Added by a backfill: the overlap policy it runs under. Absent for scheduled runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill: Option<String>,
    /// Started by a chain step: its parent run, `{timer_id}:{run_at_ms}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run: Option<String>,
    /// A single run read by its key: the chain steps it started when it ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ChainStepBody>,
    /// A broadcast run: its shards, by index.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardBody>,
}

/// One shard of a broadcast run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShardBody {
    pub index: u32,
    /// `pending`, `succeeded` or `failed`.
    pub status: String,
    /// The run's attempt that last delivered it (0 before any).
    pub attempt: u32,
    /// The worker that last took it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One step of a chain, recorded once per run and name.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChainStepBody {
    /// The named timer.
    pub timer: String,
    /// `on_success` or `on_failure`.
    pub on: String,
    /// `started`, or `skipped` (no live, enabled timer of that name).
    pub status: String,
    /// The run it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub at: String,
}

impl From<chime_domain::StepRecord> for ChainStepBody {
    fn from(s: chime_domain::StepRecord) -> Self {
        Self {
            timer: s.step.to_string(),
            on: s.on.as_str().to_owned(),
            status: s.status.as_str().to_owned(),
            run: s.run.map(|k| k.to_string()),
            reason: s.reason,
            at: s.at.to_rfc3339(),
        }
    }
}

impl From<crate::api::RunDetail> for RunBody {
    fn from(d: crate::api::RunDetail) -> Self {
        Self {
            chain: d.chain.into_iter().map(Into::into).collect(),
            ..d.run.into()
        }
    }
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
            backfill: o.backfill.map(|p| p.as_str().to_owned()),
            parent_run: o.parent.map(|k| k.to_string()),
            chain: Vec::new(),
            shards: o
                .shards
                .into_iter()
                .map(|s| ShardBody {
                    index: s.index,
                    status: s.status.as_str().to_owned(),
                    attempt: s.attempt,
                    worker: s.worker,
                    error: s.error,
                })
                .collect(),
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

/// What a backfill added.
#[derive(Debug, Serialize, ToSchema)]
pub struct BackfillBody {
    /// Run times added as runs.
    pub added: u32,
    /// Run times in the range that had a run already, left as they are.
    pub existing: u32,
    /// The overlap policy the added runs start under.
    pub overlap: String,
    /// When the first added run starts (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_start: Option<String>,
    /// When the last added run starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_start: Option<String>,
}

impl From<crate::api::Backfilled> for BackfillBody {
    fn from(b: crate::api::Backfilled) -> Self {
        Self {
            added: b.added,
            existing: b.existing,
            overlap: b.overlap.as_str().to_owned(),
            first_start: b.first_due.map(Timestamp::to_rfc3339),
            last_start: b.last_due.map(Timestamp::to_rfc3339),
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
    /// Only timers in this state: `enabled` (with fire times left), `paused` or `done`.
    pub state: Option<String>,
    /// Only timers whose name starts with this.
    pub name_prefix: Option<String>,
    /// Label selector `key=value[,key=value…]`: only timers with all of these labels.
    pub label: Option<String>,
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

/// An app's exclusion calendar.
#[derive(Debug, Serialize, ToSchema)]
pub struct CalendarBody {
    pub app: String,
    pub name: String,
    /// Dates and ranges of dates, as given.
    pub dates: Vec<String>,
    pub updated_at: String,
    /// On a put: timers naming it that were rewritten to its new dates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timers_updated: Option<u32>,
}

impl From<chime_domain::Calendar> for CalendarBody {
    fn from(c: chime_domain::Calendar) -> Self {
        Self {
            app: c.app.to_string(),
            name: c.name.to_string(),
            dates: c.dates.iter().map(ToString::to_string).collect(),
            updated_at: c.updated_at.to_rfc3339(),
            timers_updated: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CalendarList {
    pub calendars: Vec<CalendarBody>,
}
