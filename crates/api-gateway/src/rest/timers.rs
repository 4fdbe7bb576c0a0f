//! Timer handlers: create, read, list, change, delete, enable, disable, trigger, backfill.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};

use crate::api::{
    ApplyRequest, ApplyResult, BackfillRequest, CreateRequest, ListTimers, PreviewRequest,
    TimerInput, TimerPatch,
};
use crate::error::ApiError;

use super::*;

/// Create a timer.
#[utoipa::path(post, path = "/v1/timers", tag = "timers",
    request_body(content = TimerInput, content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Repeat-safe create: the same key with the same body returns the original timer")),
    responses(
        (status = 201, description = "Created", body = TimerBody),
        (status = 400, description = "Invalid input or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken, or idempotency key reused for another body", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The app's timer quota or create rate is exceeded (Retry-After for the rate)", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn create_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    JsonBody(timer): JsonBody<TimerInput>,
) -> Result<
    (
        StatusCode,
        [(header::HeaderName, String); 1],
        Json<TimerBody>,
    ),
    ApiError,
> {
    let idempotency_key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|_| ApiError::invalid("Idempotency-Key", "must be visible ASCII"))
        })
        .transpose()?;
    let view = api
        .create_timer(
            &ctx,
            CreateRequest {
                timer,
                idempotency_key,
            },
        )
        .await?;
    let location = format!("/v1/timers/{}", view.timer.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view.into()),
    ))
}

/// Create up to 100 timers, all or none.
#[utoipa::path(post, path = "/v1/timers:batchCreate", tag = "timers",
    request_body(content = BatchCreateBody, content_type = "application/json"),
    responses(
        (status = 201, description = "All created", body = BatchCreated),
        (status = 400, description = "Invalid input, malformed JSON, or batch size outside 1..100", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A name is taken or an idempotency key reused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The app's timer quota or create rate is exceeded (Retry-After for the rate)", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn batch_create_timers(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    JsonBody(body): JsonBody<BatchCreateBody>,
) -> Result<(StatusCode, Json<BatchCreated>), ApiError> {
    let reqs = body
        .requests
        .into_iter()
        .map(|i| CreateRequest {
            timer: i.timer,
            idempotency_key: i.idempotency_key,
        })
        .collect();
    let views = api.batch_create_timers(&ctx, reqs).await?;
    Ok((
        StatusCode::CREATED,
        Json(BatchCreated {
            timers: views.into_iter().map(Into::into).collect(),
        }),
    ))
}

/// List timers in id order.
#[utoipa::path(get, path = "/v1/timers", tag = "timers", params(ListTimersParams),
    responses(
        (status = 200, description = "A page of timers", body = TimerList),
        (status = 400, description = "Invalid query (page size, page token, app)", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn list_timers(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    QueryParams(q): QueryParams<ListTimersParams>,
) -> Result<Json<TimerList>, ApiError> {
    let page = api
        .list_timers(
            &ctx,
            ListTimers {
                app: q.app,
                enabled: q.enabled,
                state: q.state,
                name_prefix: q.name_prefix,
                label: q.label,
                page_size: q.page_size,
                page_token: q.page_token,
            },
        )
        .await?;
    Ok(Json(TimerList {
        timers: page.items.into_iter().map(Into::into).collect(),
        next_page_token: page.next_page_token.map(|t| t.as_str().to_owned()),
    }))
}

/// Get one timer.
#[utoipa::path(get, path = "/v1/timers/{id}", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 200, description = "The timer", body = TimerBody),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn get_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Json<TimerBody>, ApiError> {
    Ok(Json(api.get_timer(&ctx, timer_id(&id)?).await?.into()))
}

/// Change some fields of a timer; bumps its version.
#[utoipa::path(patch, path = "/v1/timers/{id}", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    request_body(content = TimerPatch, content_type = "application/json"),
    responses(
        (status = 200, description = "The updated timer", body = TimerBody),
        IdErrors,
        (status = 409, description = "Stale expected_version, or name taken", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn update_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody<TimerPatch>,
) -> Result<Json<TimerBody>, ApiError> {
    Ok(Json(
        api.update_timer(&ctx, timer_id(&id)?, patch).await?.into(),
    ))
}

/// Delete a timer (it stops firing; its runs stay listed by id until purged).
#[utoipa::path(delete, path = "/v1/timers/{id}", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 204, description = "Deleted"),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn delete_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    api.delete_timer(&ctx, timer_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Enable a timer.
#[utoipa::path(post, path = "/v1/timers/{id}/enable", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 200, description = "The timer", body = TimerBody),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn enable_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Json<TimerBody>, ApiError> {
    Ok(Json(
        api.set_timer_enabled(&ctx, timer_id(&id)?, true)
            .await?
            .into(),
    ))
}

/// Disable (pause) a timer, optionally with a reason shown until it is enabled again;
/// pending occurrences are skipped when due.
#[utoipa::path(post, path = "/v1/timers/{id}/disable", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    request_body(content = Option<PauseBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The timer", body = TimerBody),
        (status = 400, description = "Invalid reason or malformed JSON", body = Problem, content_type = "application/problem+json"),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn disable_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<PauseBody>,
) -> Result<Json<TimerBody>, ApiError> {
    Ok(Json(
        api.pause_timer(&ctx, timer_id(&id)?, body.reason)
            .await?
            .into(),
    ))
}

/// Create or replace the app's timer of this name (declarative). Idempotent: a body that
/// says what the timer already is changes nothing, not even its version. `enabled` left out
/// keeps an existing timer enabled or paused as it is.
#[utoipa::path(put, path = "/v1/apps/{app}/timers/{name}", tag = "timers",
    params(("app" = String, Path, description = "The timer's app"),
           ("name" = String, Path, description = "The timer's name"), ApplyParams),
    request_body(content = TimerInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Changed, or already as declared", body = ApplyBody),
        (status = 201, description = "Created", body = ApplyBody),
        (status = 400, description = "Invalid input, or app or name other than the path's", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Changed concurrently; apply again", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The app's timer quota or create rate is exceeded", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn apply_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path((app, name)): Path<(String, String)>,
    QueryParams(q): QueryParams<ApplyParams>,
    JsonBody(timer): JsonBody<TimerInput>,
) -> Result<(StatusCode, Json<ApplyBody>), ApiError> {
    let applied = api
        .apply_timer(
            &ctx,
            ApplyRequest {
                app,
                name,
                timer,
                dry_run: q.dry_run.unwrap_or(false),
            },
        )
        .await?;
    let status = if applied.result == ApplyResult::Created && applied.timer.is_some() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ApplyBody::from(applied))))
}

/// A timer's next run times, each marked where a daylight-saving change moved it.
#[utoipa::path(get, path = "/v1/timers/{id}/next", tag = "timers",
    params(("id" = i64, Path, description = "Timer id"), NextParams),
    responses(
        (status = 200, description = "The next run times", body = RunTimes),
        (status = 400, description = "Invalid count", body = Problem, content_type = "application/problem+json"),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn next_runs(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<NextParams>,
) -> Result<Json<RunTimes>, ApiError> {
    let runs = api.next_runs(&ctx, timer_id(&id)?, q.count).await?;
    Ok(Json(RunTimes::from(runs)))
}

/// The run times a schedule would have, without creating a timer.
#[utoipa::path(post, path = "/v1/schedules/preview", tag = "timers",
    request_body(content = PreviewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The run times", body = RunTimes),
        (status = 400, description = "Invalid schedule, count or from", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn preview_schedule(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    JsonBody(req): JsonBody<PreviewRequest>,
) -> Result<Json<RunTimes>, ApiError> {
    Ok(Json(RunTimes::from(api.preview(&ctx, req).await?)))
}

/// Fire a timer once more, now.
#[utoipa::path(post, path = "/v1/timers/{id}/trigger", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 202, description = "Occurrence queued", body = Triggered),
        IdErrors,
        (status = 409, description = "Timer disabled", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn trigger_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Triggered>), ApiError> {
    let t = api.trigger_timer(&ctx, timer_id(&id)?).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Triggered {
            task_key: t.key.to_string(),
            run_at: t.key.run_at.to_rfc3339(),
        }),
    ))
}

/// Fire a timer's run times of a past range: each becomes a run marked as a backfill,
/// started at `rate` per second from now. Run times that have a run already are left alone.
#[utoipa::path(post, path = "/v1/timers/{id}/backfill", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    request_body(content = BackfillRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "Runs added", body = BackfillBody),
        (status = 400, description = "Invalid range, overlap or rate, or more than 1,000 run times in the range (BACKFILL_TOO_LARGE)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such timer", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Timer disabled", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn backfill_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<BackfillRequest>,
) -> Result<(StatusCode, Json<BackfillBody>), ApiError> {
    let done = api.backfill_timer(&ctx, timer_id(&id)?, req).await?;
    Ok((StatusCode::ACCEPTED, Json(done.into())))
}
