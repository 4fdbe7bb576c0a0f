//! REST over [`TimerApi`]: JSON in, JSON out, every error as RFC 9457 problem+json naming the
//! offending field. Handlers only translate.

use std::sync::Arc;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{TimerApi, TimerInput, TimerPatch};
use crate::error::{ApiError, ErrorCode};

/// Largest request body: room for a batch of 100 timers.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

type Api = Arc<dyn TimerApi>;

mod access;
mod activity;
mod bodies;
mod calendars;
mod extract;
mod notifications;
mod problem;
mod runs;
mod timers;

pub use access::TokenList;
use access::*;
use activity::*;
pub use activity::{ActivityBody, ActivityCounts, ActivityMinute};
pub use bodies::*;
use calendars::*;
pub use extract::*;
use notifications::*;
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

/// Statuses of every operation that needs a token.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum AuthErrors {
    /// No bearer token, or not a valid one (`WWW-Authenticate: Bearer`)
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthenticated(Problem),
    /// The token may not act on this app, or lacks the scope
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
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

/// The document's frame; its paths come from [`routes`], the router's own table.
#[derive(OpenApi)]
#[openapi(
    info(title = "Chime timer API", description = "Create and manage timers. Errors are RFC 9457 problem+json. \
        Every operation needs `Authorization: Bearer <token>` (an app token, or the bootstrap admin token)."),
    modifiers(&BearerAuth),
    components(schemas(Problem, TimerInput, TimerPatch, TimerBody, TimerList, BatchCreateBody,
                       BatchCreated, RunList, Triggered, Redriven)),
    tags((name = "timers", description = "Timer management"),
         (name = "dead letters", description = "Runs whose attempts are exhausted, and their redrive"),
         (name = "activity", description = "What the executors did, per minute: the console's overview"),
         (name = "calendars", description = "An app's exclusion calendars: dates its timers may skip"),
         (name = "notifications", description = "Where an app's failed, dead and recovered runs are told (admin scope)"),
         (name = "access", description = "An app's API tokens and callback signing secret (admin scope)"))
)]
pub struct ApiDoc;

/// Declares the bearer scheme and requires it of every operation.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// Every API route with its OpenAPI operation, registered together: the document and the
/// router are one table, so a route cannot exist undocumented (the tenancy test walks it).
pub fn routes(api: Api, access: Access) -> OpenApiRouter {
    let timers = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_timer, list_timers))
        .routes(routes!(batch_create_timers))
        .routes(routes!(get_timer, update_timer, delete_timer))
        .routes(routes!(enable_timer))
        .routes(routes!(disable_timer))
        .routes(routes!(next_runs))
        .routes(routes!(preview_schedule))
        .routes(routes!(apply_timer))
        .routes(routes!(trigger_timer))
        .routes(routes!(backfill_timer))
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(redrive_timer))
        .routes(routes!(list_dead_letters))
        .routes(routes!(redrive_run))
        .routes(routes!(put_calendar, get_calendar))
        .routes(routes!(list_calendars))
        .routes(routes!(put_notifications, get_notifications))
        .routes(routes!(get_activity))
        .with_state(api);
    let access = OpenApiRouter::new()
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
        .routes(routes!(signing_secret))
        .routes(routes!(rotate_signing_secret))
        .with_state(access);
    timers.merge(access)
}

/// The REST routes (API, OpenAPI, docs); health and metrics are added by the server.
pub fn router(api: Api, access: Access) -> Router {
    let (routes, doc) = routes(api, access).split_for_parts();
    routes
        .merge(utoipa_swagger_ui::SwaggerUi::new("/docs").url("/openapi.json", doc))
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
