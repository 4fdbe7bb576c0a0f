//! Notification handlers: where an app's failed, dead and recovered runs are told.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::notifications::{NotificationsInput, NotificationsView};

use super::*;

/// Set where an app's failure notifications go (admin scope): `run.dead`, `timer.failing`
/// and `timer.recovered` events, POSTed as JSON and signed like callbacks.
#[utoipa::path(put, path = "/v1/apps/{app}/notifications", tag = "notifications",
    params(("app" = String, Path, description = "The app")),
    request_body(content = NotificationsInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced", body = NotificationsView),
        (status = 201, description = "Created", body = NotificationsView),
        (status = 400, description = "Invalid URL, event or failing_after, or a URL the callback network policy refuses", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn put_notifications(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
    JsonBody(input): JsonBody<NotificationsInput>,
) -> Result<(StatusCode, Json<NotificationsView>), ApiError> {
    let (created, view) = api.put_notifications(&ctx, app, input).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view.into())))
}

/// An app's notification settings and the 20 notifications sent last (admin scope).
#[utoipa::path(get, path = "/v1/apps/{app}/notifications", tag = "notifications",
    params(("app" = String, Path, description = "The app")),
    responses(
        (status = 200, description = "The settings and what was sent", body = NotificationsView),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The app has no notification settings", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn get_notifications(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
) -> Result<Json<NotificationsView>, ApiError> {
    Ok(Json(api.get_notifications(&ctx, app).await?.into()))
}
