use serde::{Deserialize, Serialize};

use crate::{
    AppName, Bucket, Callback, DeliveryMode, MisfirePolicy, RetryPolicy, Schedule, TimerId,
    TimerName, Timestamp,
};

/// Everything a user decides about a timer. Immutable per version: an update replaces the
/// whole spec and bumps the timer's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    pub app: AppName,
    pub name: TimerName,
    pub schedule: Schedule,
    pub callback: Callback,
    #[serde(default)]
    pub retry: RetryPolicy,
    #[serde(default)]
    pub misfire: MisfirePolicy,
    #[serde(default)]
    pub delivery: DeliveryMode,
}

/// A timer to be created; the store assigns id, bucket, version and timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTimer {
    pub spec: TimerSpec,
    pub enabled: bool,
}

/// A stored timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    pub id: TimerId,
    pub spec: TimerSpec,
    pub enabled: bool,
    /// Starts at 1 and grows by one on every change (update, enable, disable, delete).
    pub version: i64,
    pub bucket: Bucket,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub deleted_at: Option<Timestamp>,
}

impl Timer {
    /// Whether occurrences of `version` should still fire.
    pub fn fires_version(&self, version: i64) -> bool {
        self.enabled && self.deleted_at.is_none() && self.version == version
    }
}
