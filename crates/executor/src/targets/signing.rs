//! Standard Webhooks signatures on callbacks: `webhook-id` (the occurrence, the same on every
//! attempt), `webhook-timestamp` (the attempt's unix seconds) and `webhook-signature` (one
//! `v1,<base64 HMAC-SHA256>` per secret the app signs with, space-separated while a rotated
//! secret is in its grace period). Secrets come from the database, created on an app's first
//! callback, and are cached per app for a short while.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;

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
    /// Held by the one task reading secrets from the database.
    fetching: Arc<tokio::sync::Mutex<()>>,
}

impl Signer {
    pub fn new(credentials: Arc<dyn Credentials>, clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self {
            credentials,
            clock,
            ttl,
            cache: Mutex::new(HashMap::new()),
            fetching: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<AppName, Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The secrets `app` signs with now. Past the TTL the last ones read are still used
    /// while one task reads them again, so a burst of callbacks costs one query per app, not
    /// one per callback. While the database is unreachable the last ones read are used
    /// however old; with none read yet, the error.
    async fn secrets(self: &Arc<Self>, app: &AppName) -> Result<Arc<[SigningSecret]>, StoreError> {
        let now = self.clock.now();
        let cached = self
            .cache()
            .get(app)
            .map(|c| (c.secrets.clone(), c.fetched));
        match cached {
            Some((secrets, fetched)) => {
                if now.as_millis() - fetched.as_millis() >= self.ttl.as_millis() as i64 {
                    self.refresh_in_background(app);
                }
                Ok(secrets)
            }
            None => {
                // First use: one task reads, the others wait for it and take its answer.
                let _one = self.fetching.lock().await;
                if let Some(c) = self.cache().get(app) {
                    return Ok(c.secrets.clone());
                }
                self.fetch(app).await
            }
        }
    }

    fn refresh_in_background(self: &Arc<Self>, app: &AppName) {
        let Ok(one) = self.fetching.clone().try_lock_owned() else {
            return; // another refresh is under way
        };
        let (this, app) = (self.clone(), app.clone());
        tokio::spawn(async move {
            let _one = one;
            if let Err(e) = this.fetch(&app).await {
                tracing::warn!(app = %app, error = %e, "cannot read the signing secret; signing with the last one read");
            }
        });
    }

    async fn fetch(&self, app: &AppName) -> Result<Arc<[SigningSecret]>, StoreError> {
        let now = self.clock.now();
        let fresh = SigningSecret::from_key(rand::random());
        let secrets: Arc<[SigningSecret]> = self
            .credentials
            .signing_secrets(app, &fresh, now)
            .await?
            .into();
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

    /// The three Standard Webhooks headers for one attempt of `key` with `body`.
    pub async fn headers(
        self: &Arc<Self>,
        app: &AppName,
        key: TaskKey,
        body: &[u8],
    ) -> Result<[(&'static str, String); 3], StoreError> {
        self.headers_for(app, key.to_string(), body).await
    }

    /// The three headers for message `id` (a failure notification's, say) with `body`.
    pub async fn headers_for(
        self: &Arc<Self>,
        app: &AppName,
        id: String,
        body: &[u8],
    ) -> Result<[(&'static str, String); 3], StoreError> {
        let secrets = self.secrets(app).await?;
        let timestamp = self.clock.now().as_millis().div_euclid(1000);
        let signature = webhook_signature(&secrets, &id, timestamp, body);
        Ok([
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ])
    }
}

impl Signer {
    /// How far a signature's time may be from this clock for [`Signer::verify`].
    pub const FRESH_WITHIN_S: i64 = 300;

    /// Whether `signatures` (a `webhook-signature` header) holds the signature of `body` for
    /// `id` at `timestamp`, made with one of `app`'s live secrets within
    /// [`Signer::FRESH_WITHIN_S`] of now: a peer executor's forwarded delivery proves so that
    /// Chime made it, lately.
    pub async fn verify(
        self: &Arc<Self>,
        app: &AppName,
        id: &str,
        timestamp: i64,
        body: &[u8],
        signatures: &str,
    ) -> Result<bool, StoreError> {
        let now_s = self.clock.now().as_millis().div_euclid(1000);
        if (now_s - timestamp).abs() > Self::FRESH_WITHIN_S {
            return Ok(false);
        }
        let secrets = self.secrets(app).await?;
        let given: Vec<&str> = signatures.split(' ').collect();
        Ok(secrets.iter().any(|s| {
            let expected = s.sign(id, timestamp, body);
            given
                .iter()
                .any(|g| bool::from(g.as_bytes().ct_eq(expected.as_bytes())))
        }))
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
        let signer = Arc::new(Signer::new(
            store.clone(),
            clock.clone(),
            Duration::from_secs(1),
        ));
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
        assert!(
            signer
                .verify(&app, "7:1000", 1_800_000_000, b"{}", &sig.1)
                .await
                .unwrap()
        );
        assert!(
            !signer
                .verify(&app, "7:1000", 1_800_000_000, b"{x}", &sig.1)
                .await
                .unwrap()
        );

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
        // Past the TTL the last secrets still sign while they are read again.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let [_, _, sig] = signer.headers(&app, key, b"{}").await.unwrap();
            if sig.1.split(' ').count() == 2 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the rotation was never read"
            );
            tokio::task::yield_now().await;
        }
    }
}
