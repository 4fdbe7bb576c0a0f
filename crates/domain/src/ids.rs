use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, Timelike};
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::error::ValidationError;
use crate::limits;

/// A timer's identity: a positive 64-bit integer assigned by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TimerId(i64);

impl TimerId {
    pub fn new(id: i64) -> Result<Self, ValidationError> {
        if id > 0 {
            Ok(Self(id))
        } else {
            Err(ValidationError::new(
                "id",
                "timer ids are positive integers",
            ))
        }
    }

    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for TimerId {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let id = s
            .parse::<i64>()
            .map_err(|_| ValidationError::new("id", format!("{s:?} is not a timer id")))?;
        Self::new(id)
    }
}

/// A tenant namespace: lowercase letters, digits, `-`, `_` and `.`, starting with a letter or
/// digit, at most 64 bytes. Names are unique within an app.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AppName(String);

impl AppName {
    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        let err = |m: &str| Err(ValidationError::new("app", m));
        if s.is_empty() {
            return err("must not be empty");
        }
        if s.len() > limits::MAX_APP_LEN {
            return err("must be at most 64 characters");
        }
        let mut bytes = s.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
        if !(first_ok && rest_ok) {
            return err(
                "must be lowercase letters, digits, '-', '_' or '.', starting with a letter or digit",
            );
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AppName {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<AppName> for String {
    fn from(a: AppName) -> Self {
        a.0
    }
}

impl fmt::Display for AppName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A timer's human name, unique within its app: 1 to 128 characters, no control characters,
/// no leading or trailing white space.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TimerName(String);

impl TimerName {
    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        let err = |m: &str| Err(ValidationError::new("name", m));
        if s.is_empty() {
            return err("must not be empty");
        }
        crate::plain_text("name", &s, limits::MAX_NAME_CHARS)?;
        if s.trim() != s {
            return err("must not start or end with white space");
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TimerName {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<TimerName> for String {
    fn from(n: TimerName) -> Self {
        n.0
    }
}

impl fmt::Display for TimerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How many buckets the hot index and the migrator split work into (`CHIME_BUCKETS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct BucketCount(u32);

impl BucketCount {
    pub const DEFAULT: Self = Self(16);
    pub const MAX: u32 = 4096;

    pub fn new(n: u32) -> Result<Self, ValidationError> {
        if (1..=Self::MAX).contains(&n) {
            Ok(Self(n))
        } else {
            Err(ValidationError::new(
                "buckets",
                format!("must be between 1 and {}", Self::MAX),
            ))
        }
    }

    pub const fn get(self) -> u32 {
        self.0
    }

    pub fn all(self) -> impl Iterator<Item = Bucket> {
        (0..self.0).map(Bucket)
    }
}

impl Default for BucketCount {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for BucketCount {
    type Error = ValidationError;
    fn try_from(n: u32) -> Result<Self, Self::Error> {
        Self::new(n)
    }
}

impl From<BucketCount> for u32 {
    fn from(b: BucketCount) -> Self {
        b.0
    }
}

/// One slice of the work: a stable hash of the timer id modulo the bucket count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bucket(u32);

impl Bucket {
    /// The bucket of a timer. The hash is the splitmix64 finalizer: fixed here, so it never
    /// changes with a library upgrade, and it spreads sequential ids evenly.
    pub fn of(id: TimerId, count: BucketCount) -> Self {
        let mut z = (id.get() as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self((z % u64::from(count.get())) as u32)
    }

    /// A bucket index as stored, without a range check against the current count.
    pub const fn from_stored(index: u32) -> Self {
        Self(index)
    }

    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The identity of one occurrence on the wire and in the hot index: `{timer_id}:{run_at_ms}`.
/// It doubles as the callback's `Idempotency-Key`, identical on every attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub timer_id: TimerId,
    pub run_at: Timestamp,
}

impl TaskKey {
    pub const fn new(timer_id: TimerId, run_at: Timestamp) -> Self {
        Self { timer_id, run_at }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.timer_id, self.run_at.as_millis())
    }
}

impl FromStr for TaskKey {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            ValidationError::new(
                "task_key",
                format!("{s:?} is not {{timer_id}}:{{run_at_ms}}"),
            )
        };
        let (id, run_at) = s.split_once(':').ok_or_else(bad)?;
        let timer_id = id.parse::<TimerId>().map_err(|_| bad())?;
        let run_at = run_at.parse::<i64>().map_err(|_| bad())?;
        Ok(Self::new(timer_id, Timestamp::from_millis(run_at)))
    }
}

impl Serialize for TaskKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One shard of the hot index: the UTC minute an occurrence is due in, and its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardKey {
    /// Start of the minute, Unix ms (always a multiple of 60,000).
    minute_start: i64,
    pub bucket: Bucket,
}

impl ShardKey {
    pub fn new(due: Timestamp, bucket: Bucket) -> Self {
        Self {
            minute_start: due.as_millis().div_euclid(60_000) * 60_000,
            bucket,
        }
    }

    pub fn minute_start(self) -> Timestamp {
        Timestamp::from_millis(self.minute_start)
    }

    /// First instant after this shard's minute.
    pub fn minute_end(self) -> Timestamp {
        Timestamp::from_millis(self.minute_start + 60_000)
    }

    /// The same bucket one minute earlier (the scheduler also sweeps the previous minute).
    pub fn previous_minute(self) -> Self {
        Self {
            minute_start: self.minute_start - 60_000,
            bucket: self.bucket,
        }
    }

    /// `yyyymmddHHMM` in UTC.
    pub fn minute_label(self) -> String {
        let dt = self.minute_start().to_datetime();
        format!(
            "{:04}{:02}{:02}{:02}{:02}",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute()
        )
    }
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.minute_label(), self.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_follow_the_documented_alphabet() {
        assert!(AppName::parse("billing").is_ok());
        assert!(AppName::parse("team-a.billing_v2").is_ok());
        for bad in ["", "Billing", "-x", "a b", "ä", &"a".repeat(65)] {
            assert!(AppName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn timer_names_reject_control_characters_and_padding() {
        assert!(TimerName::parse("nightly invoice (EU)").is_ok());
        for bad in ["", " x", "x ", "a\nb", &"n".repeat(129)] {
            assert!(TimerName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn task_key_round_trips_and_rejects_garbage() {
        let key = TaskKey::new(
            TimerId::new(42).unwrap(),
            Timestamp::from_millis(1_700_000_000_123),
        );
        assert_eq!(key.to_string(), "42:1700000000123");
        assert_eq!("42:1700000000123".parse::<TaskKey>(), Ok(key));
        for bad in ["", "42", "x:1", "0:1", "-1:5", "42:", "42:1.5"] {
            assert!(bad.parse::<TaskKey>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shard_key_names_the_utc_minute_and_bucket() {
        let due = Timestamp::parse_rfc3339("2026-11-22T10:07:59.999Z").unwrap();
        let shard = ShardKey::new(due, Bucket::from_stored(3));
        assert_eq!(shard.to_string(), "202611221007:3");
        assert_eq!(shard.previous_minute().minute_label(), "202611221006");
        assert_eq!(
            shard.minute_end().as_millis() - shard.minute_start().as_millis(),
            60_000
        );
    }

    #[test]
    fn buckets_are_stable_and_spread_sequential_ids() {
        let count = BucketCount::new(16).unwrap();
        // Pinned values: changing the hash would silently re-shard every deployment.
        assert_eq!(
            Bucket::of(TimerId::new(1).unwrap(), count).get(),
            Bucket::of(TimerId::new(1).unwrap(), count).get()
        );
        let mut hist = [0u32; 16];
        for id in 1..=16_000 {
            hist[Bucket::of(TimerId::new(id).unwrap(), count).get() as usize] += 1;
        }
        assert!(hist.iter().all(|&n| (800..1200).contains(&n)), "{hist:?}");
    }
}
