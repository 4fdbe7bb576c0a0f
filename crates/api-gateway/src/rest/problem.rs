//! RFC 9457 problem documents: how every REST error is written.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorCode};

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: `code` and `reason` say what went wrong.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// INVALID_ARGUMENT, UNAUTHENTICATED, NOT_FOUND, PERMISSION_DENIED, ALREADY_EXISTS, FAILED_PRECONDITION, PAYLOAD_TOO_LARGE,
    /// UNSUPPORTED_MEDIA_TYPE, RESOURCE_EXHAUSTED, METHOD_NOT_ALLOWED, UNAVAILABLE or INTERNAL.
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
        let unauthenticated = self.code == ErrorCode::Unauthenticated;
        let retry_after = self.retry_after;
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            )],
            body,
        )
            .into_response();
        if let Some(wait) = retry_after {
            // Whole seconds, rounded up, never 0 (RFC 9110 §10.2.3).
            let secs = wait.as_millis().div_ceil(1000).max(1);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if unauthenticated {
            // RFC 6750: tell the caller which scheme to use.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"chime\""),
            );
        }
        response
    }
}
