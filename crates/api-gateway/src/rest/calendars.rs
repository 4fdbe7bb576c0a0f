//! Calendar handlers: an app's exclusion calendars, put, read and listed by name.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::CalendarInput;
use crate::error::ApiError;

use super::*;

/// Create or replace an app's exclusion calendar. The app's timers that name it are
/// rewritten (a new version each) to skip its new dates before this answers.
#[utoipa::path(put, path = "/v1/apps/{app}/calendars/{name}", tag = "calendars",
    params(("app" = String, Path, description = "The calendar's app"),
           ("name" = String, Path, description = "The calendar's name: 1 to 64 of A-Z a-z 0-9 _ - .")),
    request_body(content = CalendarInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced", body = CalendarBody),
        (status = 201, description = "Created", body = CalendarBody),
        (status = 400, description = "Invalid name or dates, or the app has 100 calendars", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn put_calendar(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path((app, name)): Path<(String, String)>,
    JsonBody(input): JsonBody<CalendarInput>,
) -> Result<(StatusCode, Json<CalendarBody>), ApiError> {
    let put = api.put_calendar(&ctx, app, name, input).await?;
    let status = if put.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = CalendarBody::from(put.calendar);
    body.timers_updated = Some(put.timers_updated);
    Ok((status, Json(body)))
}

/// One of an app's exclusion calendars.
#[utoipa::path(get, path = "/v1/apps/{app}/calendars/{name}", tag = "calendars",
    params(("app" = String, Path, description = "The calendar's app"),
           ("name" = String, Path, description = "The calendar's name")),
    responses(
        (status = 200, description = "The calendar", body = CalendarBody),
        (status = 400, description = "Invalid app or name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such calendar", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn get_calendar(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path((app, name)): Path<(String, String)>,
) -> Result<Json<CalendarBody>, ApiError> {
    Ok(Json(api.get_calendar(&ctx, app, name).await?.into()))
}

/// An app's exclusion calendars, by name.
#[utoipa::path(get, path = "/v1/apps/{app}/calendars", tag = "calendars",
    params(("app" = String, Path, description = "The app")),
    responses(
        (status = 200, description = "The app's calendars", body = CalendarList),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn list_calendars(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
) -> Result<Json<CalendarList>, ApiError> {
    let all = api.list_calendars(&ctx, app).await?;
    Ok(Json(CalendarList {
        calendars: all.into_iter().map(Into::into).collect(),
    }))
}
