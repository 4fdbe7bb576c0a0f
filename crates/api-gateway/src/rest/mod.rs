//! REST over [`TimerApi`]: JSON in, JSON out, every error as RFC 9457 problem+json naming the
//! offending field. Handlers only translate.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use utoipa::OpenApi;

use crate::api::{TimerApi, TimerInput, TimerPatch};
use crate::error::{ApiError, ErrorCode};

/// Largest request body: room for a batch of 100 timers.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

type Api = Arc<dyn TimerApi>;

mod bodies;
mod extract;
mod problem;
mod runs;
mod timers;

pub use bodies::*;
pub use extract::*;
pub use problem::*;
use runs::*;
pub use runs::{ListDeadLettersParams, Redriven};
use timers::*;

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
