//! Managing access: an app's API tokens and its callback signing secret. One trait,
//! [`AccessApi`], under REST; every method needs the `admin` scope on the app it names.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    ApiToken, AppName, Clock, MAX_TOKEN_NAME_CHARS, Scope, Scopes, SigningSecret, TokenId,
    ValidationError, parse_duration, plain_text,
};
use chime_storage::Credentials;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Authenticator, mint};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};

/// Longest lifetime a token may be given.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 366 * 86_400);

/// A token to mint. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenInput {
    /// What the token is for, shown in listings.
    #[schema(example = "billing-ci")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `read`, `write`, `admin`; default read and write.
    #[schema(example = json!(["read"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// Lifetime such as `30d` or `12h`; none: until revoked.
    #[schema(example = "90d")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
}

/// A token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenView {
    #[schema(example = "3f9a0c1d2e4b5a69")]
    pub id: String,
    pub app: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[schema(example = json!(["read", "write"]))]
    pub scopes: Vec<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; absent: does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl From<ApiToken> for TokenView {
    fn from(t: ApiToken) -> Self {
        Self {
            id: t.id.to_string(),
            app: t.app.to_string(),
            name: t.name,
            scopes: t.scopes.names().into_iter().map(String::from).collect(),
            created_at: t.created_at.to_rfc3339(),
            expires_at: t.expires_at.map(|e| e.to_rfc3339()),
        }
    }
}

/// A minted token: the only answer that ever shows its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    /// Send as `Authorization: Bearer <token>`. Shown once: Chime keeps only its hash.
    #[schema(example = "chime_3f9a0c1d2e4b5a69_…")]
    pub token: String,
    #[serde(flatten)]
    pub view: TokenView,
}

/// An app's callback signing secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SigningSecretView {
    /// The current secret (Standard Webhooks `whsec_…`): verify `webhook-signature` with it.
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    pub secret: String,
    /// Secrets a rotation retired that callbacks are still signed with, until their grace
    /// period ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<String>,
}

impl SigningSecretView {
    fn of(secrets: Vec<SigningSecret>) -> ApiResult<Self> {
        let mut texts = secrets.iter().map(|s| s.as_str().to_owned());
        let secret = texts.next().ok_or_else(|| {
            ApiError::new(
                ErrorCode::Internal,
                "INTERNAL",
                "no signing secret was stored",
            )
        })?;
        Ok(Self {
            secret,
            previous: texts.collect(),
        })
    }
}

#[async_trait]
pub trait AccessApi: Send + Sync + 'static {
    async fn create_token(
        &self,
        ctx: &RequestContext,
        app: &str,
        input: TokenInput,
    ) -> ApiResult<CreatedToken>;
    async fn list_tokens(&self, ctx: &RequestContext, app: &str) -> ApiResult<Vec<TokenView>>;
    async fn revoke_token(&self, ctx: &RequestContext, app: &str, id: &str) -> ApiResult<()>;
    /// The current secret, created on first use.
    async fn signing_secret(&self, ctx: &RequestContext, app: &str)
    -> ApiResult<SigningSecretView>;
    /// A new current secret; the old one keeps signing for the grace period.
    async fn rotate_signing_secret(
        &self,
        ctx: &RequestContext,
        app: &str,
    ) -> ApiResult<SigningSecretView>;
}

pub struct AccessService {
    credentials: Arc<dyn Credentials>,
    clock: Arc<dyn Clock>,
    /// Told of revocations, so this replica refuses a revoked token at once.
    auth: Option<Arc<Authenticator>>,
    grace: Duration,
}

impl AccessService {
    /// `grace`: how long a rotated-out signing secret still signs.
    pub fn new(
        credentials: Arc<dyn Credentials>,
        clock: Arc<dyn Clock>,
        auth: Option<Arc<Authenticator>>,
        grace: Duration,
    ) -> Self {
        Self {
            credentials,
            clock,
            auth,
            grace,
        }
    }
}

/// The app named, if the caller is an admin of it: the check of every admin-scoped route.
pub(crate) fn admin_of(ctx: &RequestContext, app: &str) -> ApiResult<AppName> {
    let app = AppName::parse(app).map_err(|e| ApiError::from(e.within("app")))?;
    ctx.scope.check(&app)?;
    ctx.require(Scope::Admin)?;
    Ok(app)
}

fn parse_input(
    input: TokenInput,
) -> Result<(Option<String>, Scopes, Option<Duration>), ValidationError> {
    let name = match input.name {
        Some(n) if n.trim().is_empty() || n.chars().count() > MAX_TOKEN_NAME_CHARS => {
            return Err(ValidationError::new(
                "name",
                format!("must be 1 to {MAX_TOKEN_NAME_CHARS} characters"),
            ));
        }
        Some(n) => {
            plain_text("name", &n, MAX_TOKEN_NAME_CHARS)?;
            Some(n)
        }
        None => None,
    };
    let scopes = match input.scopes {
        None => Scopes::DEFAULT,
        Some(list) => Scopes::parse(&list)?,
    };
    let lifetime = match input.expires_in {
        None => None,
        Some(text) => {
            let d = parse_duration(&text).map_err(|e| ValidationError::new("expires_in", e))?;
            if d.is_zero() || d > MAX_TOKEN_LIFETIME {
                return Err(ValidationError::new(
                    "expires_in",
                    "must be more than 0s and at most 10 years",
                ));
            }
            Some(d)
        }
    };
    Ok((name, scopes, lifetime))
}

#[async_trait]
impl AccessApi for AccessService {
    async fn create_token(
        &self,
        ctx: &RequestContext,
        app: &str,
        input: TokenInput,
    ) -> ApiResult<CreatedToken> {
        let app = admin_of(ctx, app)?;
        let (name, scopes, lifetime) = parse_input(input)?;
        let now = self.clock.now();
        let minted = mint(
            app,
            name,
            scopes,
            now,
            lifetime.map(|d| now.saturating_add(d)),
        );
        self.credentials.create_token(&minted.record).await?;
        tracing::info!(app = %minted.record.app, token_id = %minted.record.id, scopes = %scopes, "token created");
        Ok(CreatedToken {
            token: minted.token,
            view: minted.record.into(),
        })
    }

    async fn list_tokens(&self, ctx: &RequestContext, app: &str) -> ApiResult<Vec<TokenView>> {
        let app = admin_of(ctx, app)?;
        let tokens = self.credentials.list_tokens(&app).await?;
        Ok(tokens.into_iter().map(TokenView::from).collect())
    }

    async fn revoke_token(&self, ctx: &RequestContext, app: &str, id: &str) -> ApiResult<()> {
        let app = admin_of(ctx, app)?;
        let not_found = || ApiError::new(ErrorCode::NotFound, "NOT_FOUND", "no such token");
        let id = TokenId::parse(id).map_err(|_| not_found())?;
        if !self
            .credentials
            .revoke_token(&app, &id, self.clock.now())
            .await?
        {
            return Err(not_found());
        }
        if let Some(auth) = &self.auth {
            auth.forget(&id);
        }
        tracing::info!(app = %app, token_id = %id, "token revoked");
        Ok(())
    }

    async fn signing_secret(
        &self,
        ctx: &RequestContext,
        app: &str,
    ) -> ApiResult<SigningSecretView> {
        let app = admin_of(ctx, app)?;
        let fresh = SigningSecret::from_key(rand::random());
        SigningSecretView::of(
            self.credentials
                .signing_secrets(&app, &fresh, self.clock.now())
                .await?,
        )
    }

    async fn rotate_signing_secret(
        &self,
        ctx: &RequestContext,
        app: &str,
    ) -> ApiResult<SigningSecretView> {
        let app = admin_of(ctx, app)?;
        let now = self.clock.now();
        let fresh = SigningSecret::from_key(rand::random());
        let secrets = self
            .credentials
            .rotate_signing_secret(&app, &fresh, now, now.saturating_add(self.grace))
            .await?;
        tracing::info!(app = %app, "signing secret rotated");
        SigningSecretView::of(secrets)
    }
}
