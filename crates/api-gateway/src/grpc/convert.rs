//! Messages to the API's types and back.

use chime_domain::{
    CallbackInput, DeliveryMode, DstNote, DstPolicy, GapPolicy, MisfirePolicy, Occurrence,
    OnComplete, OverlapPolicy, Page, RepeatPolicy, RetryPolicyInput, ScheduleInput, TimerId,
    TimerState, Timestamp,
};
use chime_proto::v1 as pb;

use crate::api::{CreateRequest, PreviewRun, TimerInput, TimerView};
use crate::error::ApiError;
use crate::view::ScheduleShown;

pub(super) fn ts_to_rfc3339(t: &prost_types::Timestamp) -> String {
    let ms = t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000);
    Timestamp::from_millis(ms).to_rfc3339()
}

pub(super) fn ts(t: Timestamp) -> prost_types::Timestamp {
    let ms = t.as_millis();
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

pub(super) fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

pub(super) fn schedule_spec(s: Option<pb::Schedule>) -> ScheduleInput {
    use pb::schedule::Kind;
    let mut out = ScheduleInput::default();
    match s.and_then(|s| s.kind) {
        Some(Kind::Cron(c)) => {
            out.cron = Some(c.expression);
            out.time_zone = non_empty(c.time_zone);
            out.dst = c.dst.map(|d| DstPolicy {
                gap: match pb::GapPolicy::try_from(d.gap) {
                    Ok(pb::GapPolicy::Shift) => GapPolicy::Shift,
                    Ok(pb::GapPolicy::Skip) => GapPolicy::Skip,
                    _ => GapPolicy::NextInstant,
                },
                repeat: match pb::RepeatPolicy::try_from(d.repeat) {
                    Ok(pb::RepeatPolicy::Both) => RepeatPolicy::Both,
                    _ => RepeatPolicy::First,
                },
            });
        }
        Some(Kind::Every(e)) => out.every = Some(e),
        Some(Kind::At(at)) => out.at = Some(ts_to_rfc3339(&at)),
        Some(Kind::After(a)) => out.after = Some(a),
        None => {}
    }
    out
}

pub(super) fn callback_spec(c: pb::Callback) -> CallbackInput {
    CallbackInput {
        url: non_empty(c.url),
        worker: c.worker.map(Into::into),
        nats: c.nats.map(Into::into),
        amqp: c.amqp.map(Into::into),
        method: non_empty(c.method),
        headers: c.headers.into_iter().collect(),
        body: c.body,
        timeout: non_empty(c.timeout),
        keep_output: c.keep_output,
    }
}

pub(super) fn retry_spec(r: pb::RetryPolicy) -> RetryPolicyInput {
    RetryPolicyInput {
        max_attempts: (r.max_attempts != 0).then_some(r.max_attempts),
        initial_backoff: non_empty(r.initial_backoff),
        max_backoff: non_empty(r.max_backoff),
        jitter: r.jitter,
        max_age: non_empty(r.max_age),
    }
}

pub(super) fn on_complete_in(raw: i32) -> Result<Option<OnComplete>, ApiError> {
    match pb::OnComplete::try_from(raw) {
        Ok(pb::OnComplete::Unspecified) => Ok(None),
        Ok(pb::OnComplete::Keep) => Ok(Some(OnComplete::Keep)),
        Ok(pb::OnComplete::Delete) => Ok(Some(OnComplete::Delete)),
        Err(_) => Err(ApiError::invalid(
            "on_complete",
            format!("unknown on_complete {raw}"),
        )),
    }
}

pub(super) fn overlap_in(raw: i32) -> Result<Option<OverlapPolicy>, ApiError> {
    match pb::OverlapPolicy::try_from(raw) {
        Ok(pb::OverlapPolicy::Unspecified) => Ok(None),
        Ok(pb::OverlapPolicy::AllowAll) => Ok(Some(OverlapPolicy::AllowAll)),
        Ok(pb::OverlapPolicy::Skip) => Ok(Some(OverlapPolicy::Skip)),
        Ok(pb::OverlapPolicy::BufferOne) => Ok(Some(OverlapPolicy::BufferOne)),
        Ok(pb::OverlapPolicy::CancelOther) => Ok(Some(OverlapPolicy::CancelOther)),
        Err(_) => Err(ApiError::invalid(
            "overlap",
            format!("unknown overlap policy {raw}"),
        )),
    }
}

pub(super) fn overlap_out(p: OverlapPolicy) -> pb::OverlapPolicy {
    match p {
        OverlapPolicy::AllowAll => pb::OverlapPolicy::AllowAll,
        OverlapPolicy::Skip => pb::OverlapPolicy::Skip,
        OverlapPolicy::BufferOne => pb::OverlapPolicy::BufferOne,
        OverlapPolicy::CancelOther => pb::OverlapPolicy::CancelOther,
    }
}

pub(super) fn state_in(raw: i32) -> Result<Option<String>, ApiError> {
    match pb::TimerState::try_from(raw) {
        Ok(pb::TimerState::Unspecified) => Ok(None),
        Ok(pb::TimerState::Enabled) => Ok(Some(TimerState::Enabled.as_str().into())),
        Ok(pb::TimerState::Paused) => Ok(Some(TimerState::Paused.as_str().into())),
        Ok(pb::TimerState::Done) => Ok(Some(TimerState::Done.as_str().into())),
        Err(_) => Err(ApiError::invalid("state", format!("unknown state {raw}"))),
    }
}

fn state_out(s: TimerState) -> pb::TimerState {
    match s {
        TimerState::Enabled => pb::TimerState::Enabled,
        TimerState::Paused => pb::TimerState::Paused,
        TimerState::Done => pb::TimerState::Done,
    }
}

pub(super) fn run_times_out(runs: Vec<PreviewRun>) -> pb::RunTimes {
    pb::RunTimes {
        runs: runs
            .into_iter()
            .map(|r| pb::RunTime {
                at: Some(ts(r.at)),
                local: r.zone.format(r.at),
                dst: match r.dst {
                    None => pb::DstNote::None,
                    Some(DstNote::Gap) => pb::DstNote::Gap,
                    Some(DstNote::Repeated) => pb::DstNote::Repeated,
                } as i32,
            })
            .collect(),
    }
}

pub(super) fn misfire_in(raw: i32) -> Result<Option<MisfirePolicy>, ApiError> {
    match pb::MisfirePolicy::try_from(raw) {
        Ok(pb::MisfirePolicy::Unspecified) => Ok(None),
        Ok(pb::MisfirePolicy::FireOnce) => Ok(Some(MisfirePolicy::FireOnce)),
        Ok(pb::MisfirePolicy::FireAll) => Ok(Some(MisfirePolicy::FireAll)),
        Ok(pb::MisfirePolicy::Skip) => Ok(Some(MisfirePolicy::Skip)),
        Err(_) => Err(ApiError::invalid(
            "misfire",
            format!("unknown misfire policy {raw}"),
        )),
    }
}

pub(super) fn delivery_in(raw: i32) -> Result<Option<DeliveryMode>, ApiError> {
    match pb::DeliveryMode::try_from(raw) {
        Ok(pb::DeliveryMode::Unspecified) => Ok(None),
        Ok(pb::DeliveryMode::AtLeastOnce) => Ok(Some(DeliveryMode::AtLeastOnce)),
        Ok(pb::DeliveryMode::AtMostOnce) => Ok(Some(DeliveryMode::AtMostOnce)),
        Err(_) => Err(ApiError::invalid(
            "delivery",
            format!("unknown delivery mode {raw}"),
        )),
    }
}

pub(super) fn timer_input(
    spec: Option<pb::TimerSpec>,
    enabled: Option<bool>,
) -> Result<TimerInput, ApiError> {
    let spec = spec.ok_or_else(|| ApiError::invalid("timer", "the timer is missing"))?;
    Ok(TimerInput {
        app: spec.app,
        name: spec.name,
        schedule: schedule_spec(spec.schedule),
        start_at: spec.start_at.as_ref().map(ts_to_rfc3339),
        end_at: spec.end_at.as_ref().map(ts_to_rfc3339),
        callback: spec.callback.map(callback_spec).unwrap_or_default(),
        retry: spec.retry.map(retry_spec),
        misfire: misfire_in(spec.misfire)?,
        delivery: delivery_in(spec.delivery)?,
        enabled,
        labels: (!spec.labels.is_empty()).then(|| spec.labels.into_iter().collect()),
        max_runs: spec.max_runs,
        on_complete: on_complete_in(spec.on_complete)?,
        catch_up_window: non_empty(spec.catch_up_window),
        overlap: overlap_in(spec.overlap)?,
        window: non_empty(spec.window),
        exclude_calendars: (!spec.exclude_calendars.is_empty()).then_some(spec.exclude_calendars),
        then: spec.then.map(then_in),
    })
}

pub(super) fn then_in(t: pb::Then) -> crate::api::ThenInput {
    crate::api::ThenInput {
        on_success: t.on_success,
        on_failure: t.on_failure,
    }
}

pub(super) fn create_request(r: pb::CreateTimerRequest) -> Result<CreateRequest, ApiError> {
    Ok(CreateRequest {
        timer: timer_input(r.timer, r.enabled)?,
        idempotency_key: non_empty(r.request_id),
    })
}

pub(super) fn id(raw: i64) -> Result<TimerId, ApiError> {
    TimerId::new(raw).map_err(|e| ApiError::invalid("id", e.message))
}

pub(super) fn timer_out(v: TimerView) -> pb::Timer {
    let schedule = schedule_out(v.schedule_shown());
    let callback = callback_out(v.callback_shown());
    let retry = retry_out(v.retry_shown());
    let next_runs = v
        .next_runs_shown()
        .into_iter()
        .map(|n| pb::NextRun {
            at: Some(ts(n.at)),
            local: n.local,
        })
        .collect();
    let t = v.timer;
    pb::Timer {
        id: t.id.get(),
        enabled: t.enabled,
        version: t.version,
        created_at: Some(ts(t.created_at)),
        updated_at: Some(ts(t.updated_at)),
        next_runs,
        state: state_out(v.state) as i32,
        paused: t.paused.map(|p| pb::PauseNote {
            reason: p.reason,
            at: Some(ts(p.at)),
            by: p.by.unwrap_or_default(),
        }),
        remaining_runs: v.remaining_runs,
        spec: Some(spec_out(&t.spec, schedule, callback, retry)),
    }
}

/// A timer's spec, given its schedule, callback and retry as shown.
fn spec_out(
    spec: &chime_domain::TimerSpec,
    schedule: pb::Schedule,
    callback: pb::Callback,
    retry: pb::RetryPolicy,
) -> pb::TimerSpec {
    let s = &spec.schedule;
    pb::TimerSpec {
        app: spec.app.to_string(),
        name: spec.name.to_string(),
        schedule: Some(schedule),
        start_at: s.start_at().map(ts),
        end_at: s.end_at().map(ts),
        callback: Some(callback),
        retry: Some(retry),
        misfire: match spec.misfire {
            MisfirePolicy::FireOnce => pb::MisfirePolicy::FireOnce,
            MisfirePolicy::FireAll => pb::MisfirePolicy::FireAll,
            MisfirePolicy::Skip => pb::MisfirePolicy::Skip,
        } as i32,
        delivery: match spec.delivery {
            DeliveryMode::AtLeastOnce => pb::DeliveryMode::AtLeastOnce,
            DeliveryMode::AtMostOnce => pb::DeliveryMode::AtMostOnce,
        } as i32,
        labels: spec.labels.to_map().into_iter().collect(),
        max_runs: s.limit().map(|l| l.max_runs),
        on_complete: match spec.on_complete {
            OnComplete::Keep => pb::OnComplete::Keep,
            OnComplete::Delete => pb::OnComplete::Delete,
        } as i32,
        catch_up_window: spec
            .catch_up_window
            .map(|w| w.to_string())
            .unwrap_or_default(),
        overlap: overlap_out(spec.overlap) as i32,
        window: spec.window.map(|w| w.to_string()).unwrap_or_default(),
        exclude_calendars: spec
            .exclude_calendars
            .iter()
            .map(ToString::to_string)
            .collect(),
        then: (!spec.then.is_empty()).then(|| pb::Then {
            on_success: spec.then.on_success.iter().map(|n| n.to_string()).collect(),
            on_failure: spec.then.on_failure.iter().map(|n| n.to_string()).collect(),
        }),
    }
}

/// The schedule as shown, with its anchor (an interval's first fire, a delay's instant).
fn schedule_out(shown: ScheduleShown) -> pb::Schedule {
    let (kind, anchor) = match shown {
        ScheduleShown::Cron {
            expression,
            time_zone,
            dst,
        } => (
            pb::schedule::Kind::Cron(pb::CronSchedule {
                expression,
                time_zone,
                dst: (!dst.is_default()).then(|| dst_out(dst)),
            }),
            None,
        ),
        ScheduleShown::Every { interval, first } => {
            (pb::schedule::Kind::Every(interval), Some(ts(first)))
        }
        ScheduleShown::At { at } => (pb::schedule::Kind::At(ts(at)), None),
        ScheduleShown::After { delay, at } => (pb::schedule::Kind::After(delay), Some(ts(at))),
    };
    pb::Schedule {
        kind: Some(kind),
        anchor,
    }
}

fn dst_out(dst: DstPolicy) -> pb::DstPolicy {
    pb::DstPolicy {
        gap: match dst.gap {
            GapPolicy::NextInstant => pb::GapPolicy::NextInstant,
            GapPolicy::Shift => pb::GapPolicy::Shift,
            GapPolicy::Skip => pb::GapPolicy::Skip,
        } as i32,
        repeat: match dst.repeat {
            RepeatPolicy::First => pb::RepeatPolicy::First,
            RepeatPolicy::Both => pb::RepeatPolicy::Both,
        } as i32,
    }
}

fn callback_out(cb: crate::view::CallbackShown) -> pb::Callback {
    pb::Callback {
        url: cb.url.unwrap_or_default(),
        worker: cb.worker.map(Into::into),
        nats: cb.nats.map(Into::into),
        amqp: cb.amqp.map(Into::into),
        method: cb.method,
        headers: cb.headers.into_iter().collect(),
        body: cb.body,
        timeout: cb.timeout,
        keep_output: Some(cb.keep_output),
    }
}

fn retry_out(retry: crate::view::RetryShown) -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: retry.max_attempts,
        initial_backoff: retry.initial_backoff,
        max_backoff: retry.max_backoff,
        jitter: Some(retry.jitter),
        max_age: retry.max_age.unwrap_or_default(),
    }
}

/// A page of runs as the gRPC responses carry it: the runs and the next token ("" at the end).
pub(super) fn runs_page(page: Page<Occurrence>) -> (Vec<pb::Run>, String) {
    (
        page.items.into_iter().map(run_out).collect(),
        page.next_page_token
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
    )
}

pub(super) fn run_out(o: Occurrence) -> pb::Run {
    pb::Run {
        task_key: o.key.to_string(),
        timer_version: o.timer_version,
        status: o.status.as_str().to_owned(),
        attempt: o.attempt,
        run_at: Some(ts(o.key.run_at)),
        next_attempt_at: o.next_attempt_at.map(ts),
        fired_at: o.fired_at.map(ts),
        lateness_ms: o.lateness_ms,
        http_status: o.http_status.map(u32::from),
        error: o.error.unwrap_or_default(),
        output: o.output.unwrap_or_default(),
        backfill: o
            .backfill
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        parent_run: o.parent.map(|k| k.to_string()).unwrap_or_default(),
        chain: Vec::new(),
        shards: o
            .shards
            .into_iter()
            .map(|s| pb::RunShard {
                index: s.index,
                status: s.status.as_str().to_owned(),
                attempt: s.attempt,
                worker: s.worker.unwrap_or_default(),
                error: s.error.unwrap_or_default(),
            })
            .collect(),
    }
}

/// A run read by its key, with the chain steps it started.
pub(super) fn run_detail_out(d: crate::api::RunDetail) -> pb::Run {
    pb::Run {
        chain: d
            .chain
            .into_iter()
            .map(|s| pb::ChainStep {
                timer: s.step.to_string(),
                on: s.on.as_str().to_owned(),
                status: s.status.as_str().to_owned(),
                run: s.run.map(|k| k.to_string()).unwrap_or_default(),
                reason: s.reason.unwrap_or_default(),
                at: Some(ts(s.at)),
            })
            .collect(),
        ..run_out(d.run)
    }
}

pub(super) fn calendar_out(c: chime_domain::Calendar) -> pb::Calendar {
    pb::Calendar {
        app: c.app.to_string(),
        name: c.name.to_string(),
        dates: c.dates.iter().map(ToString::to_string).collect(),
        updated_at: Some(ts(c.updated_at)),
    }
}

fn activity_counts(c: &chime_domain::Counts) -> pb::ActivityCounts {
    pb::ActivityCounts {
        fired: c.fired,
        succeeded: c.succeeded,
        failed: c.failed,
        dead: c.dead,
        lateness_p50_ms: c.lateness_quantile_ms(0.5),
        lateness_p99_ms: c.lateness_quantile_ms(0.99),
    }
}

pub(super) fn activity(r: &crate::activity::ActivityReport) -> pb::Activity {
    pb::Activity {
        app: r.app.clone().unwrap_or_default(),
        from: Some(ts(r.from)),
        now: Some(ts(r.now)),
        minutes: r
            .minutes
            .iter()
            .map(|(at, c)| pb::ActivityMinute {
                at: Some(ts(*at)),
                counts: Some(activity_counts(c)),
            })
            .collect(),
        total: Some(activity_counts(&r.total)),
    }
}

pub(super) fn notifications_out(
    n: crate::notifications::AppNotifications,
) -> pb::NotificationSettings {
    let s = n.settings;
    pb::NotificationSettings {
        app: s.app.to_string(),
        url: s.url.to_string(),
        on: s.on.iter().map(|o| o.as_str().to_owned()).collect(),
        failing_after: s.failing_after,
        updated_at: Some(ts(s.updated_at)),
        recent: n
            .recent
            .into_iter()
            .map(|sent| pb::SentNotification {
                run_at: Some(ts(sent.event.run_at)),
                sent_at: Some(ts(sent.at)),
                r#type: sent.event.kind,
                timer_id: sent.event.timer_id.get(),
                timer_name: sent.event.timer_name.to_string(),
                attempt: sent.event.attempt,
                error: sent.event.error.unwrap_or_default(),
                delivered: sent.delivered,
                attempts: sent.attempts,
                failure: sent.error.unwrap_or_default(),
            })
            .collect(),
    }
}
