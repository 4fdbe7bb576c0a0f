//! gRPC over [`TimerApi`]: converts messages to the API's types and back, and errors to
//! statuses with `google.rpc.ErrorInfo` and `BadRequest` details. Handlers only translate.

use std::collections::HashMap;
use std::sync::Arc;

use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_server::TimerService as GrpcTimerService;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::api::{
    ApplyRequest, BackfillRequest, CalendarInput, ListDeadLetters, ListRuns, ListTimers,
    PreviewRequest, RedriveTarget, TimerApi, TimerPatch,
};
use crate::context::RequestContext;
use crate::error::ApiError;
use crate::notifications::NotificationsInput;

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

mod convert;

use convert::*;

pub struct GrpcApi(pub Arc<dyn TimerApi>);

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
                    state: state_in(r.state)?,
                    name_prefix: non_empty(r.name_prefix),
                    label: non_empty(r.label),
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
            labels: r.labels.map(|l| l.labels.into_iter().collect()),
            max_runs: r.max_runs,
            on_complete: on_complete_in(r.on_complete)?,
            catch_up_window: r.catch_up_window,
            overlap: overlap_in(r.overlap)?,
            window: r.window,
            exclude_calendars: r.exclude_calendars.map(|c| c.names),
            then: r.then.map(convert::then_in),
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
        let r = req.into_inner();
        let view = self
            .0
            .pause_timer(&ctx, id(r.id)?, non_empty(r.reason))
            .await?;
        Ok(Response::new(timer_out(view)))
    }

    async fn apply_timer(
        &self,
        req: Request<pb::ApplyTimerRequest>,
    ) -> Result<Response<pb::ApplyTimerResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let timer = timer_input(r.timer, r.enabled)?;
        let applied = self
            .0
            .apply_timer(
                &ctx,
                ApplyRequest {
                    app: timer.app.clone(),
                    name: timer.name.clone(),
                    timer,
                    dry_run: r.dry_run,
                },
            )
            .await?;
        Ok(Response::new(pb::ApplyTimerResponse {
            result: applied.result.as_str().to_owned(),
            changes: applied.changes,
            timer: applied.timer.map(timer_out),
        }))
    }

    async fn next_runs(
        &self,
        req: Request<pb::NextRunsRequest>,
    ) -> Result<Response<pb::RunTimes>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let runs = self
            .0
            .next_runs(&ctx, id(r.id)?, (r.count != 0).then_some(r.count))
            .await?;
        Ok(Response::new(run_times_out(runs)))
    }

    async fn preview_schedule(
        &self,
        req: Request<pb::PreviewScheduleRequest>,
    ) -> Result<Response<pb::RunTimes>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let preview = PreviewRequest {
            schedule: schedule_spec(r.schedule),
            start_at: r.start_at.as_ref().map(ts_to_rfc3339),
            end_at: r.end_at.as_ref().map(ts_to_rfc3339),
            max_runs: r.max_runs,
            count: (r.count != 0).then_some(r.count),
            from: r.from.as_ref().map(ts_to_rfc3339),
            app: non_empty(r.app),
            exclude_calendars: (!r.exclude_calendars.is_empty()).then_some(r.exclude_calendars),
        };
        Ok(Response::new(run_times_out(
            self.0.preview(&ctx, preview).await?,
        )))
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

    async fn put_calendar(
        &self,
        req: Request<pb::PutCalendarRequest>,
    ) -> Result<Response<pb::PutCalendarResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let put = self
            .0
            .put_calendar(&ctx, r.app, r.name, CalendarInput { dates: r.dates })
            .await?;
        Ok(Response::new(pb::PutCalendarResponse {
            calendar: Some(calendar_out(put.calendar)),
            created: put.created,
            timers_updated: put.timers_updated,
        }))
    }

    async fn put_notifications(
        &self,
        req: Request<pb::PutNotificationsRequest>,
    ) -> Result<Response<pb::PutNotificationsResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let input = NotificationsInput {
            url: r.url,
            on: r.on.map(|e| e.names),
            failing_after: r.failing_after,
        };
        let (created, view) = self.0.put_notifications(&ctx, r.app, input).await?;
        Ok(Response::new(pb::PutNotificationsResponse {
            settings: Some(convert::notifications_out(view)),
            created,
        }))
    }

    async fn get_notifications(
        &self,
        req: Request<pb::GetNotificationsRequest>,
    ) -> Result<Response<pb::NotificationSettings>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let view = self.0.get_notifications(&ctx, req.into_inner().app).await?;
        Ok(Response::new(convert::notifications_out(view)))
    }

    async fn get_calendar(
        &self,
        req: Request<pb::GetCalendarRequest>,
    ) -> Result<Response<pb::Calendar>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let c = self.0.get_calendar(&ctx, r.app, r.name).await?;
        Ok(Response::new(calendar_out(c)))
    }

    async fn list_calendars(
        &self,
        req: Request<pb::ListCalendarsRequest>,
    ) -> Result<Response<pb::ListCalendarsResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let all = self.0.list_calendars(&ctx, req.into_inner().app).await?;
        Ok(Response::new(pb::ListCalendarsResponse {
            calendars: all.into_iter().map(calendar_out).collect(),
        }))
    }

    async fn backfill_timer(
        &self,
        req: Request<pb::BackfillTimerRequest>,
    ) -> Result<Response<pb::BackfillTimerResponse>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let ask = BackfillRequest {
            from: r.from.as_ref().map(ts_to_rfc3339).unwrap_or_default(),
            to: r.to.as_ref().map(ts_to_rfc3339).unwrap_or_default(),
            overlap: overlap_in(r.overlap)?,
            rate: (r.rate != 0).then_some(r.rate),
        };
        let done = self.0.backfill_timer(&ctx, id(r.id)?, ask).await?;
        Ok(Response::new(pb::BackfillTimerResponse {
            added: done.added,
            existing: done.existing,
            overlap: overlap_out(done.overlap) as i32,
            first_start: done.first_due.map(ts),
            last_start: done.last_due.map(ts),
        }))
    }

    async fn get_run(&self, req: Request<pb::GetRunRequest>) -> Result<Response<pb::Run>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let run = self.0.get_run(&ctx, &req.into_inner().task_key).await?;
        Ok(Response::new(convert::run_detail_out(run)))
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

    async fn get_activity(
        &self,
        req: Request<pb::GetActivityRequest>,
    ) -> Result<Response<pb::Activity>, Status> {
        let ctx = RequestContext::of(req.extensions());
        let r = req.into_inner();
        let report = self
            .0
            .activity(
                &ctx,
                crate::activity::ActivityQuery {
                    app: non_empty(r.app),
                    minutes: (r.minutes != 0).then_some(r.minutes),
                },
            )
            .await?;
        Ok(Response::new(convert::activity(&report)))
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
