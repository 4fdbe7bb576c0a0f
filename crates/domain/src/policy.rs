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
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            jitter: true,
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
        })
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
}

impl RetryPolicyInput {
    pub fn parse(&self) -> Result<RetryPolicy, ValidationError> {
        let d = RetryPolicy::default();
        let dur = |raw: &Option<String>, field: &str, default: Duration| match raw {
            Some(s) => parse_duration(s).map_err(|m| ValidationError::new(field, m)),
            None => Ok(default),
        };
        RetryPolicy::new(
            self.max_attempts.unwrap_or(d.max_attempts),
            dur(
                &self.initial_backoff,
                "retry.initial_backoff",
                d.initial_backoff,
            )?,
            dur(&self.max_backoff, "retry.max_backoff", d.max_backoff)?,
            self.jitter.unwrap_or(d.jitter),
        )
    }
}

impl From<RetryPolicy> for RetryPolicyInput {
    fn from(p: RetryPolicy) -> Self {
        Self {
            max_attempts: Some(p.max_attempts),
            initial_backoff: Some(format_duration(p.initial_backoff)),
            max_backoff: Some(format_duration(p.max_backoff)),
            jitter: Some(p.jitter),
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
    /// Fire the latest overdue occurrence, mark the rest skipped.
    #[default]
    FireOnce,
    /// Fire every overdue occurrence.
    FireAll,
    /// Fire none of them; mark them skipped.
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
}
