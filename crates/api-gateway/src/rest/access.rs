//! Access handlers: an app's tokens and its callback signing secret.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::access::{AccessApi, CreatedToken, SigningSecretView, TokenInput, TokenView};
use crate::error::ApiError;

use super::*;

/// Shared state of the access routes.
pub(super) type Access = Arc<dyn AccessApi>;

/// An app's tokens, without their secrets.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// Mint a token for an app (admin scope). The token is shown in this answer only.
#[utoipa::path(post, path = "/v1/apps/{app}/tokens", tag = "access",
    params(("app" = String, Path, description = "The app the token acts for")),
    request_body(content = Option<TokenInput>, content_type = "application/json",
        description = "Optional: name, scopes (default read and write), expires_in"),
    responses(
        (status = 201, description = "Created", body = CreatedToken),
        (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        BodyErrors,
        ServerErrors,
    ))]
pub(super) async fn create_token(
    State(access): State<Access>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
    OptionalJsonBody(input): OptionalJsonBody<TokenInput>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let created = access.create_token(&ctx, &app, input).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// List an app's live tokens (admin scope), never their secrets.
#[utoipa::path(get, path = "/v1/apps/{app}/tokens", tag = "access",
    params(("app" = String, Path, description = "The app")),
    responses(
        (status = 200, description = "The app's tokens, oldest first", body = TokenList),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn list_tokens(
    State(access): State<Access>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
) -> Result<Json<TokenList>, ApiError> {
    let tokens = access.list_tokens(&ctx, &app).await?;
    Ok(Json(TokenList { tokens }))
}

/// Revoke a token (admin scope): every gateway replica refuses it within `auth.cache_ttl`.
#[utoipa::path(delete, path = "/v1/apps/{app}/tokens/{id}", tag = "access",
    params(("app" = String, Path, description = "The app"),
           ("id" = String, Path, description = "The token's id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such live token in this app", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn revoke_token(
    State(access): State<Access>,
    Ctx(ctx): Ctx,
    Path((app, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    access.revoke_token(&ctx, &app, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The app's callback signing secret (admin scope), created on first use.
#[utoipa::path(get, path = "/v1/apps/{app}/signing-secret", tag = "access",
    params(("app" = String, Path, description = "The app")),
    responses(
        (status = 200, description = "The current secret, and any still in their grace period", body = SigningSecretView),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn signing_secret(
    State(access): State<Access>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
) -> Result<Json<SigningSecretView>, ApiError> {
    Ok(Json(access.signing_secret(&ctx, &app).await?))
}

/// Rotate the signing secret (admin scope): callbacks carry both signatures for the grace
/// period (`auth.signing_grace`, default 24 h).
#[utoipa::path(post, path = "/v1/apps/{app}/signing-secret/rotate", tag = "access",
    params(("app" = String, Path, description = "The app")),
    responses(
        (status = 200, description = "The new secret, and the previous one still signing", body = SigningSecretView),
        (status = 400, description = "Invalid app name", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn rotate_signing_secret(
    State(access): State<Access>,
    Ctx(ctx): Ctx,
    Path(app): Path<String>,
) -> Result<Json<SigningSecretView>, ApiError> {
    Ok(Json(access.rotate_signing_secret(&ctx, &app).await?))
}
