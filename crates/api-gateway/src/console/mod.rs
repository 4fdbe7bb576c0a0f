//! The web console at `/console`: a few static files compiled into the binary (no build step,
//! no Node needed to build or run Chime) that call the REST API from the browser with the
//! token the operator signs in with. Every response carries a strict Content-Security-Policy:
//! scripts and styles only from these files, requests only to this origin, no framing.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The console's files: (name, content type, content).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/views.js"),
    ),
    (
        "timers.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/timers.js"),
    ),
    (
        "form.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/form.js"),
    ),
    (
        "notifications.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/notifications.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/charts.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

const INDEX: &str = include_str!("assets/index.html");

/// Only this origin's files and API; no inline script or style; never inside a frame.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// `/console` and its files. They are public (the page asks for a token; the API checks it).
/// `auth`: whether the gateway checks tokens, so the page knows whether to ask for one.
pub fn router(auth: bool) -> Router {
    let config = serde_json::json!({ "auth": auth }).to_string();
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route(
            "/console/config.json",
            get(move || async move {
                (
                    secured(),
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    config,
                )
            }),
        )
        .route("/console/{file}", get(asset))
}

async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => page(content_type, body),
        None => (
            StatusCode::NOT_FOUND,
            secured(),
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such console file",
        )
            .into_response(),
    }
}

fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        secured(),
        [
            (header::CONTENT_TYPE, content_type),
            // Served from the binary: a new release brings new files, so revalidate.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn secured() -> [(HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ]
}
