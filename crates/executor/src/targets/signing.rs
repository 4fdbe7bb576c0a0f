//! Standard Webhooks signatures on callbacks: `webhook-id` (the occurrence, the same on every
//! attempt), `webhook-timestamp` (the attempt's unix seconds) and `webhook-signature` (one
//! `v1,<base64 HMAC-SHA256>` per secret the app signs with, space-separated while a rotated
//! secret is in its grace period). Secrets come from the database, created on an app's first
//! callback, and are cached per app for a short while.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{AppName, Clock, SigningSecret, TaskKey, Timestamp, webhook_signature};
use chime_storage::{Credentials, StoreError};

/// Apps whose secrets are remembered at most; the cache starts over when full.
const CACHE_MAX: usize = 10_000;

struct Cached {
    secrets: Arc<[SigningSecret]>,
    fetched: Timestamp,
}

/// Signs callbacks with their app's secrets.
pub struct Signer {
    credentials: Arc<dyn Credentials>,
    clock: Arc<dyn Clock>,
    /// How long fetched secrets are used before asking again: a rotation reaches the
    /// callbacks within it.
    ttl: Duration,
    cache: Mutex<HashMap<AppName, Cached>>,
}

impl Signer {
    pub fn new(credentials: Arc<dyn Credentials>, clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self {
            credentials,
            clock,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<AppName, Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The secrets `app` signs with now. While the database is unreachable, the last ones
    /// read are used however old; with none read yet, the error.
    async fn secrets(&self, app: &AppName) -> Result<Arc<[SigningSecret]>, StoreError> {
        let now = self.clock.now();
        let stale = {
            let cache = self.cache();
            match cache.get(app) {
                Some(c)
                    if now.as_millis() - c.fetched.as_millis() < self.ttl.as_millis() as i64 =>
                {
                    return Ok(c.secrets.clone());
                }
                Some(c) => Some(c.secrets.clone()),
                None => None,
            }
        };
        let fresh = SigningSecret::from_key(rand::random());
        match self.credentials.signing_secrets(app, &fresh, now).await {
            Ok(secrets) => {
                let secrets: Arc<[SigningSecret]> = secrets.into();
                let mut cache = self.cache();
                if cache.len() >= CACHE_MAX {
                    cache.clear();
                }
                cache.insert(
                    app.clone(),
                    Cached {
                        secrets: secrets.clone(),
                        fetched: now,
                    },
                );
                Ok(secrets)
            }
            Err(e) => {
                tracing::warn!(app = %app, error = %e, "cannot read the signing secret");
                stale.ok_or(e)
            }
        }
    }

    /// The three Standard Webhooks headers for one attempt of `key` with `body`.
    pub async fn headers(
        &self,
        app: &AppName,
        key: TaskKey,
        body: &[u8],
    ) -> Result<[(&'static str, String); 3], StoreError> {
        let secrets = self.secrets(app).await?;
        let id = key.to_string();
        let timestamp = self.clock.now().as_millis().div_euclid(1000);
        let signature = webhook_signature(&secrets, &id, timestamp, body);
        Ok([
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::{ManualClock, TimerId};

    #[tokio::test]
    async fn secrets_are_created_once_cached_and_both_sign_after_a_rotation() {
        let fx = chime_storage::testkit::sqlite().await;
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
        let store: Arc<dyn Credentials> = fx.store();
        let signer = Signer::new(store.clone(), clock.clone(), Duration::from_secs(1));
        let app = AppName::parse("billing").unwrap();
        let key = TaskKey::new(TimerId::new(7).unwrap(), Timestamp::from_millis(1_000));
        let [id, ts, sig] = signer.headers(&app, key, b"{}").await.unwrap();
        assert_eq!(id, ("webhook-id", "7:1000".to_owned()));
        assert_eq!(ts.1, "1800000000");
        let secrets = store
            .signing_secrets(&app, &SigningSecret::from_key([0; 32]), clock.now())
            .await
            .unwrap();
        assert_eq!(sig.1, secrets[0].sign("7:1000", 1_800_000_000, b"{}"));

        let now = clock.now();
        store
            .rotate_signing_secret(
                &app,
                &SigningSecret::from_key([1; 32]),
                now,
                now.add_millis(60_000),
            )
            .await
            .unwrap();
        // Cached: still one signature until the TTL has passed.
        let [_, _, sig] = signer.headers(&app, key, b"{}").await.unwrap();
        assert_eq!(sig.1.split(' ').count(), 1);
        clock.advance(Duration::from_secs(1));
        let [_, _, sig] = signer.headers(&app, key, b"{}").await.unwrap();
        assert_eq!(sig.1.split(' ').count(), 2);
    }
}
