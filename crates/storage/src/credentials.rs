//! [`Credentials`]: API tokens (stored as hashes) and each app's callback signing secrets.

use async_trait::async_trait;
use chime_domain::{ApiToken, AppName, Scopes, SigningSecret, Timestamp, TokenId};

use crate::{StoreError, StoreResult};

/// Tokens the gateway authenticates callers with, and the secrets executors sign callbacks
/// with. Time comes from the caller (`now`), so the rules are the caller's clock's.
#[async_trait]
pub trait Credentials: Send + Sync + 'static {
    async fn create_token(&self, token: &ApiToken) -> StoreResult<()>;

    /// The app's tokens that are not revoked, oldest first (expired ones included).
    async fn list_tokens(&self, app: &AppName) -> StoreResult<Vec<ApiToken>>;

    /// A token that is not revoked. Expiry is the caller's to judge.
    async fn find_token(&self, id: &TokenId) -> StoreResult<Option<ApiToken>>;

    /// Revokes the app's token `id`; `false` when the app has no such live token.
    async fn revoke_token(&self, app: &AppName, id: &TokenId, now: Timestamp) -> StoreResult<bool>;

    /// The app's secrets that sign at `now`, the current one first, then those a rotation
    /// retired whose grace has not ended. An app without one gets `fresh` as its current.
    async fn signing_secrets(
        &self,
        app: &AppName,
        fresh: &SigningSecret,
        now: Timestamp,
    ) -> StoreResult<Vec<SigningSecret>>;

    /// Makes `fresh` the app's current secret; the one it replaces keeps signing until
    /// `grace_until`. Returns [`Self::signing_secrets`] after the change.
    async fn rotate_signing_secret(
        &self,
        app: &AppName,
        fresh: &SigningSecret,
        now: Timestamp,
        grace_until: Timestamp,
    ) -> StoreResult<Vec<SigningSecret>>;
}

/// A stored token row: (id, app, name, scopes, hash, created_at, expires_at).
pub(crate) type TokenRow = (
    String,
    String,
    Option<String>,
    String,
    String,
    i64,
    Option<i64>,
);

/// Columns of a [`TokenRow`].
macro_rules! token_cols {
    () => {
        "id, app, name, scopes, hash, created_at, expires_at"
    };
}
pub(crate) use token_cols;

pub(crate) fn token_from_row(row: TokenRow) -> StoreResult<ApiToken> {
    let (id, app, name, scopes, hash, created_at, expires_at) = row;
    let corrupt = |e: chime_domain::ValidationError| {
        StoreError::internal(format!("stored token {id} is invalid: {e}"))
    };
    Ok(ApiToken {
        id: TokenId::parse(&id).map_err(corrupt)?,
        app: AppName::parse(app).map_err(corrupt)?,
        name,
        scopes: Scopes::parse(&scopes.split(',').collect::<Vec<_>>()).map_err(corrupt)?,
        hash,
        created_at: Timestamp::from_millis(created_at),
        expires_at: expires_at.map(Timestamp::from_millis),
    })
}

pub(crate) fn secrets_from_rows(rows: Vec<String>) -> StoreResult<Vec<SigningSecret>> {
    rows.iter()
        .map(|s| {
            SigningSecret::parse(s)
                .map_err(|e| StoreError::internal(format!("stored signing secret: {e}")))
        })
        .collect()
}
