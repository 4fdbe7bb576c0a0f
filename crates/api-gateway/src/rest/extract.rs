//! Extractors whose rejections are problems, and the request context.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{StatusCode, header, request::Parts};
use bytes::Bytes;
use chime_domain::TimerId;
use serde::de::DeserializeOwned;

use crate::context::RequestContext;
use crate::error::{ApiError, ErrorCode};

use super::*;

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

/// A JSON body that may be left out: no body at all reads as `T::default()`.
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "BODY_TOO_LARGE",
                    format!("the body exceeds {MAX_BODY_BYTES} bytes"),
                )
            })?;
        if bytes.is_empty() {
            return Ok(Self(T::default()));
        }
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        JsonBody::from_request(req, state)
            .await
            .map(|JsonBody(v)| Self(v))
    }
}

/// serde reads a struct from a JSON array too (`[null, null]` as a patch); every request
/// object here must be a JSON object, and the only array a body may hold is a batch's
/// top-level `requests`.
fn reject_misplaced_arrays(root: &serde_json::Value) -> Result<(), ApiError> {
    /// The fields that are lists of strings.
    const LISTS: [&str; 6] = [
        "scopes",
        "dates",
        "exclude_calendars",
        "on",
        "on_success",
        "on_failure",
    ];
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
                // Lists of names or dates: a token's scopes, a calendar's dates, a timer's
                // exclusion calendars, the events an app is notified of.
                Value::Array(items)
                    if LISTS.contains(&key.as_str()) && items.iter().all(Value::is_string) => {}
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

pub(super) fn timer_id(raw: &str) -> Result<TimerId, ApiError> {
    raw.parse::<TimerId>()
        .map_err(|_| ApiError::invalid("id", format!("{raw:?} is not a timer id")))
}
