//! Run handlers: a timer's runs, dead letters and their redrive.

use axum::Json;
use axum::extract::{Path, State};
use chime_domain::TimerId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::{ListDeadLetters, ListRuns, RedriveTarget};
use crate::error::ApiError;

use super::*;

/// A timer's occurrences, newest first.
#[utoipa::path(get, path = "/v1/timers/{id}/runs", tag = "timers",
    params(("id" = i64, Path, description = "Timer id"), ListRunsParams),
    responses(
        (status = 200, description = "A page of runs", body = RunList),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn list_runs(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ListRunsParams>,
) -> Result<Json<RunList>, ApiError> {
    let page = api
        .list_runs(
            &ctx,
            ListRuns {
                timer_id: timer_id(&id)?,
                status: q.status,
                upcoming: q.upcoming.unwrap_or(false),
                page_size: q.page_size,
                page_token: q.page_token,
            },
        )
        .await?;
    Ok(Json(page.into()))
}

/// One run by its task key, with its whole output (up to 4 KiB).
#[utoipa::path(get, path = "/v1/runs/{task_key}", tag = "timers",
    params(("task_key" = String, Path, description = "`{timer_id}:{run_at_ms}`")),
    responses(
        (status = 200, description = "The run", body = RunBody),
        (status = 400, description = "Malformed task key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn get_run(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(task_key): Path<String>,
) -> Result<Json<RunBody>, ApiError> {
    Ok(Json(api.get_run(&ctx, &task_key).await?.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListDeadLettersParams {
    /// Only this app's timers.
    pub app: Option<String>,
    /// Only this timer.
    pub timer_id: Option<i64>,
    /// 1 to 1000; default 100.
    pub page_size: Option<u32>,
    pub page_token: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Redriven {
    /// Occurrences re-queued with a fresh attempt budget; the sweeper hands them to
    /// executors within seconds.
    pub redriven: u64,
}

/// Dead letters: occurrences whose attempts are exhausted, by timer then run time.
#[utoipa::path(get, path = "/v1/dead-letters", tag = "dead letters",
    params(ListDeadLettersParams),
    responses(
        (status = 200, description = "A page of dead runs", body = RunList),
        (status = 400, description = "Invalid filter or page token", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn list_dead_letters(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    QueryParams(q): QueryParams<ListDeadLettersParams>,
) -> Result<Json<RunList>, ApiError> {
    let page = api
        .list_dead_letters(
            &ctx,
            ListDeadLetters {
                app: q.app,
                timer_id: q.timer_id.map(TimerId::new).transpose()?,
                page_size: q.page_size,
                page_token: q.page_token,
            },
        )
        .await?;
    Ok(Json(page.into()))
}

/// Re-queue one dead run with a fresh attempt budget.
#[utoipa::path(post, path = "/v1/dead-letters/{task_key}/redrive", tag = "dead letters",
    params(("task_key" = String, Path, description = "`{timer_id}:{run_at_ms}`")),
    responses(
        (status = 200, description = "Re-queued", body = Redriven),
        (status = 400, description = "Malformed task key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is not dead", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn redrive_run(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(task_key): Path<String>,
) -> Result<Json<Redriven>, ApiError> {
    let redriven = api.redrive(&ctx, RedriveTarget::Run(task_key)).await?;
    Ok(Json(Redriven { redriven }))
}

/// Re-queue every dead run of a timer with a fresh attempt budget.
#[utoipa::path(post, path = "/v1/timers/{id}/redrive", tag = "dead letters",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 200, description = "Re-queued", body = Redriven),
        IdErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn redrive_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Json<Redriven>, ApiError> {
    let redriven = api
        .redrive(&ctx, RedriveTarget::Timer(timer_id(&id)?))
        .await?;
    Ok(Json(Redriven { redriven }))
}
