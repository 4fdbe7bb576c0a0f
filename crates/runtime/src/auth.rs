//! Who a bearer token says the caller is. [`Authenticator`] checks the bootstrap (admin)
//! token and app tokens: the gateway's context layer calls it once per request, in front of
//! REST and gRPC alike, and the executors when a worker connects; nothing else looks at
//! credentials.
//!
//! An app token reads `chime_<id>_<secret>`: the id finds its row, the SHA-256 of the whole
//! text must match the stored hash. Tokens are compared in constant time and never logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chime_domain::{ApiToken, AppName, Clock, Scopes, Timestamp, TokenId};
use chime_storage::{Credentials, StoreError};
use http::HeaderValue;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every app token.
const TOKEN_PREFIX: &str = "chime_";
/// Lookups remembered at most; the cache starts over when full, so memory stays bounded
/// however many made-up tokens callers send.
const CACHE_MAX: usize = 10_000;

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// The bootstrap token: every app, every scope.
    Admin,
    /// An app token: its app, with its scopes.
    App {
        id: TokenId,
        app: AppName,
        scopes: Scopes,
    },
}

impl Verified {
    /// Whether this caller may act for `app`.
    pub fn may_act_for(&self, app: &AppName) -> bool {
        match self {
            Self::Admin => true,
            Self::App { app: own, .. } => own == app,
        }
    }
}

/// Why a request was not authenticated: the `reason` label of
/// `chime_gateway_auth_failures_total`. Callers only ever see "missing" or "invalid".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Missing,
    Malformed,
    Unknown,
    Expired,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Unknown => "unknown",
            Self::Expired => "expired",
        }
    }
}

/// A freshly minted token: its text (shown once) and its stored record.
pub struct Minted {
    pub token: String,
    pub record: ApiToken,
}

struct Cached {
    token: Option<ApiToken>,
    fetched: Timestamp,
}

pub struct Authenticator {
    bootstrap: [u8; 32],
    credentials: Arc<dyn Credentials>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    cache: Mutex<HashMap<TokenId, Cached>>,
}

fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Authenticator {
    /// `bootstrap`: the admin token; `ttl`: how long a looked-up token is trusted, so a
    /// revocation reaches this replica within it.
    pub fn new(
        bootstrap: &str,
        credentials: Arc<dyn Credentials>,
        clock: Arc<dyn Clock>,
        ttl: Duration,
    ) -> Self {
        Self {
            bootstrap: sha256(bootstrap),
            credentials,
            clock,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Checks an `Authorization` header. `Err(Ok(refused))` is a bad credential,
    /// `Err(Err(e))` a store failure (the caller is answered 503, not 401).
    pub async fn authenticate(
        &self,
        header: Option<&HeaderValue>,
    ) -> Result<Verified, Result<Refused, StoreError>> {
        let Some(header) = header else {
            return Err(Ok(Refused::Missing));
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|h| {
                let (scheme, token) = h.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(Ok(Refused::Malformed))?;
        if bool::from(sha256(token).ct_eq(&self.bootstrap)) {
            return Ok(Verified::Admin);
        }
        let id = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .and_then(|(id, _)| TokenId::parse(id).ok())
            .ok_or(Ok(Refused::Malformed))?;
        let stored = self.lookup(&id).await.map_err(Err)?;
        let record = stored.ok_or(Ok(Refused::Unknown))?;
        let presented = hex(&sha256(token));
        if !bool::from(presented.as_bytes().ct_eq(record.hash.as_bytes())) {
            return Err(Ok(Refused::Unknown));
        }
        if record.expired(self.clock.now()) {
            return Err(Ok(Refused::Expired));
        }
        Ok(Verified::App {
            id: record.id,
            app: record.app,
            scopes: record.scopes,
        })
    }

    /// The live record of `id`, from the cache while fresh.
    async fn lookup(&self, id: &TokenId) -> Result<Option<ApiToken>, StoreError> {
        let now = self.clock.now();
        let fresh =
            |c: &Cached| now.as_millis() - c.fetched.as_millis() < self.ttl.as_millis() as i64;
        if let Some(hit) = self.cache().get(id).filter(|c| fresh(c)) {
            return Ok(hit.token.clone());
        }
        let token = self.credentials.find_token(id).await?;
        let mut cache = self.cache();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(
            id.clone(),
            Cached {
                token: token.clone(),
                fetched: now,
            },
        );
        Ok(token)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<TokenId, Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a token at once on this replica (others within the cache TTL).
    pub fn forget(&self, id: &TokenId) {
        self.cache().remove(id);
    }
}

/// A new token for `app`: random id and secret, stored only as the hash of its text.
pub fn mint(
    app: AppName,
    name: Option<String>,
    scopes: Scopes,
    created_at: Timestamp,
    expires_at: Option<Timestamp>,
) -> Minted {
    let id = TokenId::from_bytes(rand::random());
    let secret: [u8; 32] = rand::random();
    let token = format!("{TOKEN_PREFIX}{id}_{}", URL_SAFE_NO_PAD.encode(secret));
    let record = ApiToken {
        id,
        app,
        name,
        scopes,
        hash: hex(&sha256(&token)),
        created_at,
        expires_at,
    };
    Minted { token, record }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::ManualClock;
    use chime_storage::testkit;

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
    }

    #[tokio::test]
    async fn tokens_are_checked_by_hash_expiry_and_revocation() {
        let fx = testkit::sqlite().await;
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
        let store: Arc<dyn Credentials> = fx.store();
        let auth = Authenticator::new(
            "bootstrap-token-0123",
            store.clone(),
            clock.clone(),
            Duration::from_secs(1),
        );
        let admin = auth
            .authenticate(Some(&bearer("bootstrap-token-0123")))
            .await;
        assert_eq!(admin.unwrap(), Verified::Admin);
        let app = AppName::parse("billing").unwrap();
        let now = clock.now();
        let minted = mint(app.clone(), None, Scopes::DEFAULT, now, None);
        store.create_token(&minted.record).await.unwrap();
        let ok = auth
            .authenticate(Some(&bearer(&minted.token)))
            .await
            .unwrap();
        assert!(matches!(
            &ok,
            Verified::App { app: a, scopes, .. } if *a == app && *scopes == Scopes::DEFAULT
        ));

        let refused = |r: Result<Verified, Result<Refused, StoreError>>| r.unwrap_err().unwrap();
        assert_eq!(refused(auth.authenticate(None).await), Refused::Missing);
        assert_eq!(
            refused(
                auth.authenticate(Some(&HeaderValue::from_static("Basic abc")))
                    .await
            ),
            Refused::Malformed
        );
        // Right id, wrong secret.
        let forged = format!("{}x", &minted.token[..minted.token.len() - 1]);
        assert_eq!(
            refused(auth.authenticate(Some(&bearer(&forged))).await),
            Refused::Unknown
        );

        // Revoked: still trusted from the cache until its TTL, refused after.
        store
            .revoke_token(&app, &minted.record.id, now)
            .await
            .unwrap();
        assert!(
            auth.authenticate(Some(&bearer(&minted.token)))
                .await
                .is_ok()
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            refused(auth.authenticate(Some(&bearer(&minted.token))).await),
            Refused::Unknown
        );

        let expiring = mint(
            app,
            None,
            Scopes::DEFAULT,
            now,
            Some(clock.now().add_millis(10)),
        );
        store.create_token(&expiring.record).await.unwrap();
        assert!(
            auth.authenticate(Some(&bearer(&expiring.token)))
                .await
                .is_ok()
        );
        clock.advance(Duration::from_millis(10));
        assert_eq!(
            refused(auth.authenticate(Some(&bearer(&expiring.token))).await),
            Refused::Expired
        );
    }
}
