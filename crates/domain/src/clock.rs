use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// A timestamp that is not RFC 3339; `reason` is the parser's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RFC 3339 timestamp {input:?}: {reason}")]
pub struct TimestampError {
    pub input: String,
    pub reason: String,
}

/// An instant as Unix milliseconds (UTC): the unit of every due time, score and lateness in
/// Chime, so comparisons and storage never deal with time zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        Self(dt.timestamp_millis())
    }

    pub fn to_datetime(self) -> DateTime<Utc> {
        // Every i64 ms value chrono cannot represent is beyond year 262,000: clamp rather than panic.
        DateTime::from_timestamp_millis(self.0).unwrap_or(if self.0 < 0 {
            DateTime::<Utc>::MIN_UTC
        } else {
            DateTime::<Utc>::MAX_UTC
        })
    }

    /// Parses RFC 3339 (`2026-11-22T10:00:00Z`, any offset).
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        DateTime::parse_from_rfc3339(s.trim())
            .map(|dt| Self(dt.timestamp_millis()))
            .map_err(|e| TimestampError {
                input: s.to_owned(),
                reason: e.to_string(),
            })
    }

    /// RFC 3339 in UTC with millisecond precision, as sent in `X-Chime-Scheduled-At`.
    pub fn to_rfc3339(self) -> String {
        self.to_datetime()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    pub fn add_millis(self, ms: i64) -> Self {
        Self(self.0.saturating_add(ms))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// A wait on a [`Clock`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The source of "now" for all scheduling logic, and of every wait for a scheduling reason
/// (ticks, sweeps, due instants), injected so tests can drive time. Waits paced by another
/// system's real time (lease renewal, network retries) stay on tokio's timer.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> Timestamp;

    /// Resolves once this clock reads `at` or later.
    fn sleep_until(&self, at: Timestamp) -> Sleep;

    fn sleep(&self, d: Duration) -> Sleep {
        self.sleep_until(self.now().saturating_add(d))
    }
}

/// Wall-clock time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_datetime(Utc::now())
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep {
        // From the current microsecond: truncating now to its millisecond woke sleepers up
        // to a millisecond late, and sleepers of the same instant at different moments.
        let now_us = Utc::now().timestamp_micros();
        let us = at
            .as_millis()
            .saturating_mul(1_000)
            .saturating_sub(now_us)
            .max(0);
        Box::pin(tokio::time::sleep(Duration::from_micros(us.unsigned_abs())))
    }

    // Keeps sub-millisecond precision, which a round trip through Timestamp would lose.
    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

/// Ticks every `period` on a clock, the first tick at once. A late tick delays the ones after
/// it rather than bursting to catch up.
#[derive(Debug)]
pub struct Ticker {
    clock: Arc<dyn Clock>,
    period: Duration,
    next: Option<Timestamp>,
}

impl Ticker {
    pub fn new(clock: Arc<dyn Clock>, period: Duration) -> Self {
        Self {
            clock,
            period,
            next: None,
        }
    }

    pub async fn tick(&mut self) {
        if let Some(at) = self.next {
            self.clock.sleep_until(at).await;
        }
        self.next = Some(self.clock.now().saturating_add(self.period));
    }
}

/// A clock that moves only when told to; its sleepers wake when it is moved past their
/// instant. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    moved: Arc<tokio::sync::watch::Sender<()>>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start.as_millis())),
            moved: Arc::new(tokio::sync::watch::Sender::new(())),
        }
    }

    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
        self.moved.send_replace(());
    }

    pub fn set(&self, t: Timestamp) {
        self.now.store(t.as_millis(), Ordering::SeqCst);
        self.moved.send_replace(());
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.now.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep {
        // Subscribed before the check, so a move between the two still wakes this sleeper.
        let mut moved = self.moved.subscribe();
        let now = self.now.clone();
        Box::pin(async move {
            while now.load(Ordering::SeqCst) < at.as_millis() {
                if moved.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip_keeps_milliseconds() {
        let t = Timestamp::parse_rfc3339("2026-11-22T10:00:00.123+01:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-22T09:00:00.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Ok(t));
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000));
        let shared = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_millis(1_000));
        shared.advance(Duration::from_millis(500));
        assert_eq!(clock.now(), Timestamp::from_millis(1_500));
    }

    #[tokio::test]
    async fn a_manual_sleeper_wakes_only_when_the_clock_reaches_its_instant() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let sleep = tokio::spawn(clock.sleep(Duration::from_secs(3600)));
        clock.advance(Duration::from_secs(3599));
        // Not woken a second early: still pending after the runtime had every chance to run it.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!sleep.is_finished());
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(10), sleep)
            .await
            .expect("woken by the move")
            .expect("sleeper ran");
    }
}
