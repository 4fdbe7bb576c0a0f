use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::{format_duration, parse_duration};
use crate::error::ValidationError;
use crate::limits;

/// How failed attempts are retried: exponential backoff from `initial_backoff`, ×2 per
/// attempt, capped at `max_backoff`, with optional full jitter on the upper half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    jitter: bool,
    max_age: Option<MaxAge>,
}

/// A duration from 1 s to 366 days bounding how old an occurrence may be: `retry.max_age`
/// and `catch_up_window`. Written as a duration string ("90s", "1h").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaxAge(Duration);

impl MaxAge {
    pub fn parse(raw: &str, field: &str) -> Result<Self, ValidationError> {
        let d = parse_duration(raw).map_err(|m| ValidationError::new(field, m))?;
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if !(1_000..=limits::MAX_AGE_MS).contains(&ms) {
            return Err(ValidationError::new(field, "must be between 1s and 366d"));
        }
        Ok(Self(d))
    }

    pub fn get(self) -> Duration {
        self.0
    }

    /// Whether something due at `due` is older than this at `now`.
    pub fn exceeded(self, due: crate::Timestamp, now: crate::Timestamp) -> bool {
        now > due.saturating_add(self.0)
    }
}

/// A flexible window (1 s to 1 d): each occurrence fires at its own offset in
/// `[run_at, run_at + window)`, the same for every replica and retry (a hash of the task key),
/// spreading timers that share a schedule ("midnight") over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window(Duration);

impl Window {
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let d = parse_duration(raw).map_err(|m| ValidationError::new("window", m))?;
        if d < Duration::from_secs(1) || d > Duration::from_secs(86_400) {
            return Err(ValidationError::new("window", "must be between 1s and 1d"));
        }
        Ok(Self(d))
    }

    pub fn get(self) -> Duration {
        self.0
    }

    /// Where in the window the occurrence at `key` fires.
    pub fn offset(self, key: crate::TaskKey) -> Duration {
        let span = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX).max(1);
        let seed = (key.timer_id.get() as u64).rotate_left(32) ^ key.run_at.as_millis() as u64;
        Duration::from_millis(crate::horizon::mix(seed) % span)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl fmt::Display for MaxAge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// Serde as the duration string a request gives ("90s"), parsed again when read.
macro_rules! duration_string_serde {
    ($t:ty, |$raw:ident| $parse:expr) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let $raw = String::deserialize(d)?;
                $parse.map_err(serde::de::Error::custom)
            }
        }
    };
}

duration_string_serde!(MaxAge, |raw| MaxAge::parse(&raw, "max_age"));
duration_string_serde!(Window, |raw| Window::parse(&raw));

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            jitter: true,
            max_age: None,
        }
    }
}

impl RetryPolicy {
    pub fn new(
        max_attempts: u32,
        initial_backoff: Duration,
        max_backoff: Duration,
        jitter: bool,
    ) -> Result<Self, ValidationError> {
        if !(1..=limits::MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(ValidationError::new(
                "retry.max_attempts",
                format!("must be between 1 and {}", limits::MAX_ATTEMPTS),
            ));
        }
        if initial_backoff < Duration::from_millis(100)
            || initial_backoff > Duration::from_secs(3600)
        {
            return Err(ValidationError::new(
                "retry.initial_backoff",
                "must be between 100ms and 1h",
            ));
        }
        if max_backoff < initial_backoff || max_backoff > Duration::from_secs(24 * 3600) {
            return Err(ValidationError::new(
                "retry.max_backoff",
                "must be at least initial_backoff and at most 1d",
            ));
        }
        Ok(Self {
            max_attempts,
            initial_backoff,
            max_backoff,
            jitter,
            max_age: None,
        })
    }

    /// No retry starts later than `max_age` after the occurrence's scheduled time.
    pub fn with_max_age(mut self, max_age: Option<MaxAge>) -> Self {
        self.max_age = max_age;
        self
    }

    pub fn max_age(&self) -> Option<MaxAge> {
        self.max_age
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    pub fn initial_backoff(&self) -> Duration {
        self.initial_backoff
    }

    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    pub fn jitter(&self) -> bool {
        self.jitter
    }

    /// The wait before attempt `failed_attempt + 1`, given the 1-based attempt that just
    /// failed, or `None` when the budget is spent. `random` in `[0, 1)` is the caller's, so
    /// the computation stays deterministic under test.
    pub fn backoff_after(&self, failed_attempt: u32, random: f64) -> Option<Duration> {
        if failed_attempt >= self.max_attempts {
            return None;
        }
        let exp = failed_attempt.saturating_sub(1).min(31);
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        if !self.jitter {
            return Some(base);
        }
        // Keep at least half the base so retries still back off, spread the rest.
        let half = base / 2;
        Some(half + half.mul_f64(random.clamp(0.0, 1.0)))
    }
}

/// The retry policy as a request spells it; absent fields take the defaults.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicyInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_backoff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<bool>,
    /// No retry starts later than this after the scheduled time ("1h"); default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

impl RetryPolicyInput {
    pub fn parse(&self) -> Result<RetryPolicy, ValidationError> {
        let d = RetryPolicy::default();
        let dur = |raw: &Option<String>, field: &str, default: Duration| match raw {
            Some(s) => parse_duration(s).map_err(|m| ValidationError::new(field, m)),
            None => Ok(default),
        };
        let max_age = self
            .max_age
            .as_deref()
            .map(|a| MaxAge::parse(a, "retry.max_age"))
            .transpose()?;
        let policy = RetryPolicy::new(
            self.max_attempts.unwrap_or(d.max_attempts),
            dur(
                &self.initial_backoff,
                "retry.initial_backoff",
                d.initial_backoff,
            )?,
            dur(&self.max_backoff, "retry.max_backoff", d.max_backoff)?,
            self.jitter.unwrap_or(d.jitter),
        )?;
        Ok(policy.with_max_age(max_age))
    }
}

impl From<RetryPolicy> for RetryPolicyInput {
    fn from(p: RetryPolicy) -> Self {
        Self {
            max_attempts: Some(p.max_attempts),
            initial_backoff: Some(format_duration(p.initial_backoff)),
            max_backoff: Some(format_duration(p.max_backoff)),
            jitter: Some(p.jitter),
            max_age: p.max_age.map(|a| a.to_string()),
        }
    }
}

impl Serialize for RetryPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RetryPolicyInput::from(*self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RetryPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RetryPolicyInput::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What to do with occurrences of a recurring timer found overdue after an outage.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// Fire the latest overdue occurrence, mark the rest skipped: a run whose timer's next
    /// run is due already when it comes to fire is skipped.
    #[default]
    FireOnce,
    /// Fire every overdue occurrence, however late.
    FireAll,
    /// Fire none of them (overdue beyond `scheduler.misfire_threshold`, or overtaken by the
    /// next run); mark them skipped.
    Skip,
}

/// Whether a callback may be repeated.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Retried until acknowledged or dead; the callee de-duplicates by `Idempotency-Key`.
    #[default]
    AtLeastOnce,
    /// Marked done when claimed, never retried.
    AtMostOnce,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_backoff_doubles_from_one_second() {
        let p =
            RetryPolicy::new(5, Duration::from_secs(1), Duration::from_secs(60), false).unwrap();
        let waits: Vec<_> = (1..=5).map(|a| p.backoff_after(a, 0.5)).collect();
        assert_eq!(
            waits,
            vec![
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                Some(Duration::from_secs(8)),
                None
            ]
        );
    }

    #[test]
    fn backoff_is_capped_and_jitter_stays_in_the_upper_half() {
        let p =
            RetryPolicy::new(25, Duration::from_secs(1), Duration::from_secs(60), true).unwrap();
        assert_eq!(
            p.backoff_after(20, 0.999_999).map(|d| d.as_secs()),
            Some(59)
        );
        assert_eq!(p.backoff_after(20, 0.0), Some(Duration::from_secs(30)));
        assert_eq!(p.backoff_after(1, 0.0), Some(Duration::from_millis(500)));
    }

    #[test]
    fn input_defaults_and_limits() {
        assert_eq!(
            RetryPolicyInput::default().parse(),
            Ok(RetryPolicy::default())
        );
        let bad = RetryPolicyInput {
            max_attempts: Some(0),
            ..Default::default()
        };
        assert_eq!(bad.parse().unwrap_err().field, "retry.max_attempts");
        let bad = RetryPolicyInput {
            initial_backoff: Some("10s".into()),
            max_backoff: Some("5s".into()),
            ..Default::default()
        };
        assert_eq!(bad.parse().unwrap_err().field, "retry.max_backoff");
        let json = serde_json::to_string(&RetryPolicy::default()).unwrap();
        assert_eq!(
            serde_json::from_str::<RetryPolicy>(&json).unwrap(),
            RetryPolicy::default()
        );
    }

    #[test]
    fn window_offsets_are_fixed_per_occurrence_and_spread_within_it() {
        let w = Window::parse("5m").unwrap();
        let key = |id: i64, at: i64| {
            crate::TaskKey::new(
                crate::TimerId::new(id).unwrap(),
                crate::Timestamp::from_millis(at),
            )
        };
        assert_eq!(w.offset(key(7, 1_000)), w.offset(key(7, 1_000)));
        let offsets: Vec<u128> = (1..=200)
            .map(|id| w.offset(key(id, 86_400_000)).as_millis())
            .collect();
        assert!(offsets.iter().all(|o| *o < 300_000));
        // Timers sharing a time land all over the window, not in one corner of it.
        let quarters = offsets.iter().fold([0; 4], |mut q, o| {
            q[(*o / 75_000) as usize] += 1;
            q
        });
        assert!(quarters.iter().all(|n| *n >= 30), "{quarters:?}");
        assert!(Window::parse("0s").is_err() && Window::parse("2d").is_err());
    }
}
