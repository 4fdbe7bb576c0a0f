//! REST over [`TimerApi`]: JSON in, JSON out, every error as RFC 9457 problem+json naming the
//! offending field. Handlers only translate.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use chime_domain::{Occurrence, Page, TimerId, Timestamp, format_duration};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

use crate::api::{
    CreateRequest, ListDeadLetters, ListRuns, ListTimers, RedriveTarget, TimerApi, TimerInput,
    TimerPatch, TimerView,
};
use crate::context::RequestContext;
use crate::error::{ApiError, ErrorCode};

/// Largest request body: room for a batch of 100 timers.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

type Api = Arc<dyn TimerApi>;

// ---- problem+json --------------------------------------------------------------------------

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: `code` and `reason` say what went wrong.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, ALREADY_EXISTS, FAILED_PRECONDITION, PAYLOAD_TOO_LARGE,
    /// UNSUPPORTED_MEDIA_TYPE, METHOD_NOT_ALLOWED, UNAVAILABLE or INTERNAL.
    pub code: String,
    /// Finer reason, e.g. NAME_TAKEN, VERSION_MISMATCH, IDEMPOTENCY_KEY_REUSED.
    pub reason: String,
    /// The offending input field, as a dotted path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let problem = Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: self.to_string(),
            code: self.code.as_str().into(),
            reason: self.reason.into(),
            field: self.field,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            )],
            body,
        )
            .into_response()
    }
}

// ---- extractors whose rejections are problems -------------------------------------------------

/// A JSON body: `application/json` only, at most [`MAX_BODY_BYTES`], and a parse error names
/// the field it happened at.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|m| {
                let m = m.trim().to_ascii_lowercase();
                m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
            })
            .unwrap_or(false);
        if !is_json {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "CONTENT_TYPE",
                "send the body as Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "BODY_TOO_LARGE",
                    format!("the body exceeds {MAX_BODY_BYTES} bytes"),
                )
            } else {
                ApiError::invalid("body", format!("cannot read the body: {e}"))
            }
        })?;
        let raw: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::invalid("body", format!("malformed JSON: {e}")))?;
        reject_misplaced_arrays(&raw)?;
        let value: T = serde_path_to_error::deserialize(raw).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            ApiError::invalid(field, format!("invalid value: {}", e.inner()))
        })?;
        Ok(Self(value))
    }
}

/// serde reads a struct from a JSON array too (`[null, null]` as a patch); every request
/// object here must be a JSON object, and the only array a body may hold is a batch's
/// top-level `requests`.
fn reject_misplaced_arrays(root: &serde_json::Value) -> Result<(), ApiError> {
    use serde_json::Value;
    fn walk(obj: &serde_json::Map<String, Value>, path: &str, root: bool) -> Result<(), ApiError> {
        for (key, child) in obj {
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match child {
                Value::Object(inner) => walk(inner, &here, false)?,
                Value::Array(items) if root && key == "requests" => {
                    for (i, item) in items.iter().enumerate() {
                        match item {
                            Value::Object(inner) => walk(inner, &format!("requests[{i}]"), false)?,
                            _ => {
                                return Err(ApiError::invalid(
                                    format!("requests[{i}]"),
                                    "must be an object",
                                ));
                            }
                        }
                    }
                }
                Value::Array(_) => return Err(ApiError::invalid(here, "must not be an array")),
                _ => {}
            }
        }
        Ok(())
    }
    match root {
        Value::Object(obj) => walk(obj, "", true),
        _ => Err(ApiError::invalid("body", "must be a JSON object")),
    }
}

/// Query parameters whose parse errors are problems.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query)
            .map(Self)
            .map_err(|e| ApiError::invalid("query", format!("invalid query parameters: {e}")))
    }
}

/// The request's context, as [`ContextLayer`](crate::ContextLayer) put it on the request.
pub struct Ctx(pub RequestContext);

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(RequestContext::of(&parts.extensions)))
    }
}

fn timer_id(raw: &str) -> Result<TimerId, ApiError> {
    raw.parse::<TimerId>()
        .map_err(|_| ApiError::invalid("id", format!("{raw:?} is not a timer id")))
}

// ---- response bodies ----------------------------------------------------------------------

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
        use chime_domain::ScheduleKind;
        let t = v.timer;
        let s = &t.spec.schedule;
        let zone = s.time_zone();
        let mut schedule = ScheduleBody {
            cron: None,
            time_zone: None,
            every: None,
            after: None,
            at: None,
        };
        match s.kind() {
            ScheduleKind::Cron { expr, time_zone } => {
                schedule.cron = Some(expr.to_string());
                schedule.time_zone = Some(time_zone.name().to_owned());
            }
            ScheduleKind::Every { interval, first } => {
                schedule.every = Some(interval.to_string());
                schedule.at = Some(first.to_rfc3339());
            }
            ScheduleKind::At { at } => schedule.at = Some(at.to_rfc3339()),
            ScheduleKind::After { delay, at } => {
                schedule.after = Some(format_duration(*delay));
                schedule.at = Some(at.to_rfc3339());
            }
        }
        let cb = &t.spec.callback;
        Self {
            id: t.id.get(),
            app: t.spec.app.to_string(),
            name: t.spec.name.to_string(),
            schedule,
            start_at: s.start_at().map(Timestamp::to_rfc3339),
            end_at: s.end_at().map(Timestamp::to_rfc3339),
            callback: CallbackBody {
                url: cb.url.to_string(),
                method: cb.method.as_str().into(),
                headers: cb
                    .headers
                    .iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                body: cb.body.as_ref().map(|b| b.as_str().to_owned()),
                timeout: format_duration(cb.timeout.get()),
            },
            retry: RetryBody {
                max_attempts: t.spec.retry.max_attempts(),
                initial_backoff: format_duration(t.spec.retry.initial_backoff()),
                max_backoff: format_duration(t.spec.retry.max_backoff()),
                jitter: t.spec.retry.jitter(),
            },
            misfire: t.spec.misfire,
            delivery: t.spec.delivery,
            enabled: t.enabled,
            version: t.version,
            created_at: t.created_at.to_rfc3339(),
            updated_at: t.updated_at.to_rfc3339(),
            next_runs: v
                .next_runs
                .into_iter()
                .map(|at| NextRun {
                    utc: at.to_rfc3339(),
                    local: zone.format(at),
                })
                .collect(),
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

// ---- documented error responses ------------------------------------------------------------
// These enums only describe responses for the OpenAPI document; no value is ever built.

/// Statuses every operation can answer with.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum ServerErrors {
    /// Internal error (details are logged, not returned)
    #[response(status = 500, content_type = "application/problem+json")]
    Internal(Problem),
    /// Database unavailable; retry shortly
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Statuses of operations that take a JSON body.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum BodyErrors {
    /// Body larger than 1 MiB
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// Body not sent as application/json
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
}

/// Statuses of operations on one timer.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum IdErrors {
    /// Not a timer id, or invalid input
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No such timer
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
}

// ---- handlers ----------------------------------------------------------------------------

/// Create a timer.
#[utoipa::path(post, path = "/v1/timers", tag = "timers",
    request_body(content = TimerInput, content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Repeat-safe create: the same key with the same body returns the original timer")),
    responses(
        (status = 201, description = "Created", body = TimerBody),
        (status = 400, description = "Invalid input or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken, or idempotency key reused for another body", body = Problem, content_type = "application/problem+json"),
        BodyErrors,
        ServerErrors,
    ))]
async fn create_timer(
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
        BodyErrors,
        ServerErrors,
    ))]
async fn batch_create_timers(
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
        ServerErrors,
    ))]
async fn list_timers(
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
        ServerErrors,
    ))]
async fn get_timer(
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
        ServerErrors,
    ))]
async fn update_timer(
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
        ServerErrors,
    ))]
async fn delete_timer(
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
        ServerErrors,
    ))]
async fn enable_timer(
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

/// Disable a timer; pending occurrences are skipped when due.
#[utoipa::path(post, path = "/v1/timers/{id}/disable", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 200, description = "The timer", body = TimerBody),
        IdErrors,
        ServerErrors,
    ))]
async fn disable_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Json<TimerBody>, ApiError> {
    Ok(Json(
        api.set_timer_enabled(&ctx, timer_id(&id)?, false)
            .await?
            .into(),
    ))
}

/// Fire a timer once more, now.
#[utoipa::path(post, path = "/v1/timers/{id}/trigger", tag = "timers",
    params(("id" = i64, Path, description = "Timer id")),
    responses(
        (status = 202, description = "Occurrence queued", body = Triggered),
        IdErrors,
        (status = 409, description = "Timer disabled", body = Problem, content_type = "application/problem+json"),
        ServerErrors,
    ))]
async fn trigger_timer(
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

/// A timer's occurrences, newest first.
#[utoipa::path(get, path = "/v1/timers/{id}/runs", tag = "timers",
    params(("id" = i64, Path, description = "Timer id"), ListRunsParams),
    responses(
        (status = 200, description = "A page of runs", body = RunList),
        IdErrors,
        ServerErrors,
    ))]
async fn list_runs(
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
        ServerErrors,
    ))]
async fn list_dead_letters(
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
        ServerErrors,
    ))]
async fn redrive_run(
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
        ServerErrors,
    ))]
async fn redrive_timer(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Json<Redriven>, ApiError> {
    let redriven = api
        .redrive(&ctx, RedriveTarget::Timer(timer_id(&id)?))
        .await?;
    Ok(Json(Redriven { redriven }))
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Chime timer API", description = "Create and manage timers. Errors are RFC 9457 problem+json."),
    paths(create_timer, batch_create_timers, list_timers, get_timer, update_timer, delete_timer,
          enable_timer, disable_timer, trigger_timer, list_runs, list_dead_letters, redrive_run,
          redrive_timer),
    components(schemas(Problem, TimerInput, TimerPatch, TimerBody, TimerList, BatchCreateBody,
                       BatchCreated, RunList, Triggered, Redriven)),
    tags((name = "timers", description = "Timer management"),
         (name = "dead letters", description = "Runs whose attempts are exhausted, and their redrive"))
)]
pub struct ApiDoc;

/// The REST routes (API, OpenAPI, docs); health and metrics are added by the server.
pub fn router(api: Api) -> Router {
    let routes = Router::new()
        .route("/v1/timers", post(create_timer).get(list_timers))
        .route("/v1/timers:batchCreate", post(batch_create_timers))
        .route(
            "/v1/timers/{id}",
            get(get_timer).patch(update_timer).delete(delete_timer),
        )
        .route("/v1/timers/{id}/enable", post(enable_timer))
        .route("/v1/timers/{id}/disable", post(disable_timer))
        .route("/v1/timers/{id}/trigger", post(trigger_timer))
        .route("/v1/timers/{id}/runs", get(list_runs))
        .route("/v1/timers/{id}/redrive", post(redrive_timer))
        .route("/v1/dead-letters", get(list_dead_letters))
        .route("/v1/dead-letters/{task_key}/redrive", post(redrive_run))
        .with_state(api);
    routes
        .merge(utoipa_swagger_ui::SwaggerUi::new("/docs").url("/openapi.json", ApiDoc::openapi()))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// Problems for unknown routes and wrong methods, instead of axum's empty bodies.
pub fn with_fallbacks(router: Router) -> Router {
    router
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "NO_ROUTE", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "METHOD_NOT_ALLOWED",
                "method not allowed on this route",
            )
        })
}
