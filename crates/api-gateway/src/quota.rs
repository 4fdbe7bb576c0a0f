//! Per-app quotas on creates: how many live timers an app may have, and how fast it may
//! create them. Both are kept per gateway replica, in memory, so a create costs no extra
//! round trip: the count is read from the database at most every [`COUNT_TTL`] and the
//! replica's own creates are added to it in between, so an app may overshoot its limit by
//! what other replicas created within that time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{AppName, Clock, Timestamp};
use chime_storage::TimerStore;

use crate::error::{ApiError, ApiResult, ErrorCode};

/// How long a replica trusts the timer count it read.
const COUNT_TTL: Duration = Duration::from_secs(5);
/// Apps remembered at most; the maps start over when full, so memory stays bounded.
const MAX_APPS: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSettings {
    /// Live timers one app may have.
    pub max_timers: u64,
    /// Creates per second one app may sustain on one replica.
    pub creates_per_second: f64,
    /// Creates one app may make at once before the rate applies.
    pub create_burst: f64,
}

impl QuotaSettings {
    /// No limits (tests of other concerns).
    pub const UNLIMITED: Self = Self {
        max_timers: u64::MAX,
        creates_per_second: f64::INFINITY,
        create_burst: f64::INFINITY,
    };
}

struct Counted {
    count: u64,
    read_at: Timestamp,
}

struct Bucket {
    tokens: f64,
    at: Timestamp,
}

pub struct Quotas {
    settings: QuotaSettings,
    timers: Arc<dyn TimerStore>,
    clock: Arc<dyn Clock>,
    counts: Mutex<HashMap<AppName, Counted>>,
    buckets: Mutex<HashMap<AppName, Bucket>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Quotas {
    pub fn new(
        settings: QuotaSettings,
        timers: Arc<dyn TimerStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            settings,
            timers,
            clock,
            counts: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Admits `n` creates for `app`, or refuses them all: 429 `RATE_LIMITED` with the wait
    /// after which they would pass, or 429 `TIMER_QUOTA` when the app would hold more live
    /// timers than allowed.
    pub async fn admit(&self, app: &AppName, n: u64) -> ApiResult<()> {
        if self.settings.max_timers != u64::MAX {
            let count = self.count(app).await?;
            if count.saturating_add(n) > self.settings.max_timers {
                return Err(ApiError::new(
                    ErrorCode::ResourceExhausted,
                    "TIMER_QUOTA",
                    format!(
                        "app {app} has {count} timers; at most {} are allowed: delete some first",
                        self.settings.max_timers
                    ),
                ));
            }
        }
        self.take_tokens(app, n)
    }

    /// Counts `n` timers created for `app` since the count was read.
    pub fn created(&self, app: &AppName, n: u64) {
        if let Some(c) = lock(&self.counts).get_mut(app) {
            c.count = c.count.saturating_add(n);
        }
    }

    fn take_tokens(&self, app: &AppName, n: u64) -> ApiResult<()> {
        let QuotaSettings {
            creates_per_second: rate,
            create_burst: burst,
            ..
        } = self.settings;
        if rate.is_infinite() {
            return Ok(());
        }
        let now = self.clock.now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= MAX_APPS && !buckets.contains_key(app) {
            buckets.clear();
        }
        let bucket = buckets.entry(app.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = (now.as_millis() - bucket.at.as_millis()).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.at = now;
        let wanted = n as f64;
        if bucket.tokens >= wanted {
            bucket.tokens -= wanted;
            return Ok(());
        }
        let wait = Duration::from_secs_f64(((wanted - bucket.tokens) / rate).max(0.001));
        let mut e = ApiError::new(
            ErrorCode::ResourceExhausted,
            "RATE_LIMITED",
            format!("app {app} creates timers faster than {rate}/s: retry after the wait"),
        );
        e.retry_after = Some(wait);
        Err(e)
    }

    async fn count(&self, app: &AppName) -> ApiResult<u64> {
        let now = self.clock.now();
        let cached = lock(&self.counts).get(app).and_then(|c| {
            let age = now.as_millis() - c.read_at.as_millis();
            (age < COUNT_TTL.as_millis() as i64).then_some(c.count)
        });
        if let Some(count) = cached {
            return Ok(count);
        }
        let count = self.timers.count_timers(app).await?;
        let mut counts = lock(&self.counts);
        if counts.len() >= MAX_APPS {
            counts.clear();
        }
        counts.insert(
            app.clone(),
            Counted {
                count,
                read_at: now,
            },
        );
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::ManualClock;

    #[tokio::test]
    async fn creates_are_limited_by_rate_and_by_count() {
        let fx = chime_storage::testkit::sqlite().await;
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
        let quotas = Quotas::new(
            QuotaSettings {
                max_timers: 3,
                creates_per_second: 10.0,
                create_burst: 5.0,
            },
            fx.store(),
            clock.clone(),
        );
        let app = AppName::parse("billing").unwrap();
        quotas.admit(&app, 2).await.unwrap();
        quotas.created(&app, 2);
        // The count (2 created here, none in the database yet) allows one more.
        let e = quotas.admit(&app, 2).await.unwrap_err();
        assert_eq!(
            (e.code, e.reason),
            (ErrorCode::ResourceExhausted, "TIMER_QUOTA")
        );
        assert_eq!(e.retry_after, None);
        quotas.admit(&app, 1).await.unwrap();

        // Another app: a burst of 5, then 10/s.
        let mail = AppName::parse("mail").unwrap();
        quotas.admit(&mail, 3).await.unwrap();
        quotas.admit(&mail, 2).await.unwrap();
        let e = quotas.admit(&mail, 1).await.unwrap_err();
        assert_eq!(e.reason, "RATE_LIMITED");
        assert_eq!(e.retry_after, Some(Duration::from_millis(100)));
        clock.advance(Duration::from_millis(100));
        quotas.admit(&mail, 1).await.unwrap();
    }
}
