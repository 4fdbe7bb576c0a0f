//! gRPC over [`TimerApi`]: converts messages to the API's types and back, and errors to
//! statuses with `google.rpc.ErrorInfo` and `BadRequest` details. Handlers only translate.

use std::collections::HashMap;
use std::sync::Arc;

use chime_domain::{
    CallbackInput, DeliveryMode, MisfirePolicy, Occurrence, Page, RetryPolicyInput, ScheduleInput,
    TimerId, Timestamp,
};
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_server::TimerService as GrpcTimerService;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::api::{
    CreateRequest, ListDeadLetters, ListRuns, ListTimers, RedriveTarget, TimerApi, TimerInput,
    TimerPatch, TimerView,
};
use crate::context::RequestContext;
use crate::error::ApiError;
use crate::view::ScheduleShown;

/// `ErrorInfo.domain` of every Chime error.
const ERROR_DOMAIN: &str = "chime.v1";

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        let mut details = ErrorDetails::new();
        let mut metadata = HashMap::new();
        if let Some(field) = &e.field {
            metadata.insert("field".to_owned(), field.clone());
            details.add_bad_request_violation(field.clone(), e.message.clone());
        }
        details.set_error_info(e.reason, ERROR_DOMAIN, metadata);
        if let Some(wait) = e.retry_after {
            details.set_retry_info(Some(wait));
        }
        Status::with_error_details(e.code.grpc_code(), e.to_string(), details)
    }
}

pub struct GrpcApi(pub Arc<dyn TimerApi>);

fn ts_to_rfc3339(t: &prost_types::Timestamp) -> String {
    let ms = t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000);
    Timestamp::from_millis(ms).to_rfc3339()
}

fn ts(t: Timestamp) -> prost_types::Timestamp {
    let ms = t.as_millis();
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn schedule_spec(s: Option<pb::Schedule>) -> ScheduleInput {
    use pb::schedule::Kind;
    let mut out = ScheduleInput::default();
    match s.and_then(|s| s.kind) {
        Some(Kind::Cron(c)) => {
            out.cron = Some(c.expression);
            out.time_zone = non_empty(c.time_zone);
        }
        Some(Kind::Every(e)) => out.every = Some(e),
        Some(Kind::At(at)) => out.at = Some(ts_to_rfc3339(&at)),
        Some(Kind::After(a)) => out.after = Some(a),
        None => {}
    }
    out
}

fn callback_spec(c: pb::Callback) -> CallbackInput {
    CallbackInput {
        url: c.url,
        method: non_empty(c.method),
        headers: c.headers.into_iter().collect(),
        body: c.body,
        timeout: non_empty(c.timeout),
    }
}

fn retry_spec(r: pb::RetryPolicy) -> RetryPolicyInput {
    RetryPolicyInput {
        max_attempts: (r.max_attempts != 0).then_some(r.max_attempts),
        initial_backoff: non_empty(r.initial_backoff),
        max_backoff: non_empty(r.max_backoff),
        jitter: r.jitter,
    }
}

fn misfire_in(raw: i32) -> Result<Option<MisfirePolicy>, ApiError> {
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

fn delivery_in(raw: i32) -> Result<Option<DeliveryMode>, ApiError> {
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

fn timer_input(spec: Option<pb::TimerSpec>, enabled: Option<bool>) -> Result<TimerInput, ApiError> {
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
    })
}

fn create_request(r: pb::CreateTimerRequest) -> Result<CreateRequest, ApiError> {
    Ok(CreateRequest {
        timer: timer_input(r.timer, r.enabled)?,
        idempotency_key: non_empty(r.request_id),
    })
}

fn id(raw: i64) -> Result<TimerId, ApiError> {
    TimerId::new(raw).map_err(|e| ApiError::invalid("id", e.message))
}

fn timer_out(v: TimerView) -> pb::Timer {
    let (kind, anchor) = match v.schedule_shown() {
        ScheduleShown::Cron {
            expression,
            time_zone,
        } => (
            pb::schedule::Kind::Cron(pb::CronSchedule {
                expression,
                time_zone,
            }),
            None,
        ),
        ScheduleShown::Every { interval, first } => {
            (pb::schedule::Kind::Every(interval), Some(ts(first)))
        }
        ScheduleShown::At { at } => (pb::schedule::Kind::At(ts(at)), None),
        ScheduleShown::After { delay, at } => (pb::schedule::Kind::After(delay), Some(ts(at))),
    };
    let cb = v.callback_shown();
    let retry = v.retry_shown();
    let next_runs = v
        .next_runs_shown()
        .into_iter()
        .map(|n| pb::NextRun {
            at: Some(ts(n.at)),
            local: n.local,
        })
        .collect();
    let t = v.timer;
    let s = &t.spec.schedule;
    pb::Timer {
        id: t.id.get(),
        spec: Some(pb::TimerSpec {
            app: t.spec.app.to_string(),
            name: t.spec.name.to_string(),
            schedule: Some(pb::Schedule {
                kind: Some(kind),
                anchor,
            }),
            start_at: s.start_at().map(ts),
            end_at: s.end_at().map(ts),
            callback: Some(pb::Callback {
                url: cb.url,
                method: cb.method,
                headers: cb.headers.into_iter().collect(),
                body: cb.body,
                timeout: cb.timeout,
            }),
            retry: Some(pb::RetryPolicy {
                max_attempts: retry.max_attempts,
                initial_backoff: retry.initial_backoff,
                max_backoff: retry.max_backoff,
                jitter: Some(retry.jitter),
            }),
            misfire: match t.spec.misfire {
                MisfirePolicy::FireOnce => pb::MisfirePolicy::FireOnce,
                MisfirePolicy::FireAll => pb::MisfirePolicy::FireAll,
                MisfirePolicy::Skip => pb::MisfirePolicy::Skip,
            } as i32,
            delivery: match t.spec.delivery {
                DeliveryMode::AtLeastOnce => pb::DeliveryMode::AtLeastOnce,
                DeliveryMode::AtMostOnce => pb::DeliveryMode::AtMostOnce,
            } as i32,
        }),
        enabled: t.enabled,
        version: t.version,
        created_at: Some(ts(t.created_at)),
        updated_at: Some(ts(t.updated_at)),
        next_runs,
    }
}

/// A page of runs as the gRPC responses carry it: the runs and the next token ("" at the end).
fn runs_page(page: Page<Occurrence>) -> (Vec<pb::Run>, String) {
    (
        page.items.into_iter().map(run_out).collect(),
        page.next_page_token
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
    )
}

fn run_out(o: Occurrence) -> pb::Run {
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
    }
}

#[tonic::async_trait]
impl GrpcTimerService for GrpcApi {
    async fn create_timer(
        &self,
        req: Request<pb::CreateTimerRequest>,
    ) -> Result<Response<pb::Timer>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let view = self
            .0
            .create_timer(&ctx, create_request(req.into_inner())?)
            .await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn batch_create_timers(
        &self,
        req: Request<pb::BatchCreateTimersRequest>,
    ) -> Result<Response<pb::BatchCreateTimersResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let reqs = req
            .into_inner()
            .requests
            .into_iter()
            .map(create_request)
            .collect::<Result<Vec<_>, _>>()?;
        let views = self.0.batch_create_timers(&ctx, reqs).await?;
        Ok(Response::new(pb::BatchCreateTimersResponse {
            timers: views.into_iter().map(timer_out).collect(),
        }))
    }

    async fn get_timer(
        &self,
        req: Request<pb::GetTimerRequest>,
    ) -> Result<Response<pb::Timer>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let view = self.0.get_timer(&ctx, id(req.into_inner().id)?).await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn list_timers(
        &self,
        req: Request<pb::ListTimersRequest>,
    ) -> Result<Response<pb::ListTimersResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let page = self
            .0
            .list_timers(
                &ctx,
                ListTimers {
                    app: non_empty(r.app),
                    enabled: r.enabled,
                    page_size: (r.page_size != 0).then_some(r.page_size),
                    page_token: non_empty(r.page_token),
                },
            )
            .await?;
        Ok(Response::new(pb::ListTimersResponse {
            timers: page.items.into_iter().map(timer_out).collect(),
            next_page_token: page
                .next_page_token
                .map(|t| t.as_str().to_owned())
                .unwrap_or_default(),
        }))
    }

    async fn update_timer(
        &self,
        req: Request<pb::UpdateTimerRequest>,
    ) -> Result<Response<pb::Timer>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let patch = TimerPatch {
            expected_version: r.expected_version,
            name: r.name,
            schedule: r.schedule.map(|s| schedule_spec(Some(s))),
            start_at: r.start_at.as_ref().map(ts_to_rfc3339),
            end_at: r.end_at.as_ref().map(ts_to_rfc3339),
            callback: r.callback.map(callback_spec),
            retry: r.retry.map(retry_spec),
            misfire: misfire_in(r.misfire)?,
            delivery: delivery_in(r.delivery)?,
        };
        let view = self.0.update_timer(&ctx, id(r.id)?, patch).await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn delete_timer(
        &self,
        req: Request<pb::DeleteTimerRequest>,
    ) -> Result<Response<pb::DeleteTimerResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        self.0.delete_timer(&ctx, id(req.into_inner().id)?).await?;
        Ok(Response::new(pb::DeleteTimerResponse {}))
    }

    async fn enable_timer(
        &self,
        req: Request<pb::EnableTimerRequest>,
    ) -> Result<Response<pb::Timer>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let view = self
            .0
            .set_timer_enabled(&ctx, id(req.into_inner().id)?, true)
            .await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn disable_timer(
        &self,
        req: Request<pb::DisableTimerRequest>,
    ) -> Result<Response<pb::Timer>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let view = self
            .0
            .set_timer_enabled(&ctx, id(req.into_inner().id)?, false)
            .await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn trigger_timer(
        &self,
        req: Request<pb::TriggerTimerRequest>,
    ) -> Result<Response<pb::TriggerTimerResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let t = self.0.trigger_timer(&ctx, id(req.into_inner().id)?).await?;
        Ok(Response::new(pb::TriggerTimerResponse {
            task_key: t.key.to_string(),
            run_at: Some(ts(t.key.run_at)),
        }))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let page = self
            .0
            .list_runs(
                &ctx,
                ListRuns {
                    timer_id: id(r.timer_id)?,
                    status: non_empty(r.status),
                    upcoming: r.upcoming,
                    page_size: (r.page_size != 0).then_some(r.page_size),
                    page_token: non_empty(r.page_token),
                },
            )
            .await?;
        let (runs, next_page_token) = runs_page(page);
        Ok(Response::new(pb::ListRunsResponse {
            runs,
            next_page_token,
        }))
    }

    async fn list_dead_letters(
        &self,
        req: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let page = self
            .0
            .list_dead_letters(
                &ctx,
                ListDeadLetters {
                    app: non_empty(r.app),
                    timer_id: (r.timer_id != 0).then(|| id(r.timer_id)).transpose()?,
                    page_size: (r.page_size != 0).then_some(r.page_size),
                    page_token: non_empty(r.page_token),
                },
            )
            .await?;
        let (runs, next_page_token) = runs_page(page);
        Ok(Response::new(pb::ListDeadLettersResponse {
            runs,
            next_page_token,
        }))
    }

    async fn redrive_run(
        &self,
        req: Request<pb::RedriveRunRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let redriven = self
            .0
            .redrive(&ctx, RedriveTarget::Run(req.into_inner().task_key))
            .await?;
        Ok(Response::new(pb::RedriveResponse { redriven }))
    }

    async fn redrive_timer(
        &self,
        req: Request<pb::RedriveTimerRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let redriven = self
            .0
            .redrive(&ctx, RedriveTarget::Timer(id(req.into_inner().timer_id)?))
            .await?;
        Ok(Response::new(pb::RedriveResponse { redriven }))
    }
}
