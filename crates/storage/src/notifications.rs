//! [`Notifications`]: each app's failure-notification settings, the streaks of failed runs
//! that `timer.failing` and `timer.recovered` are told from, and the notifications sent
//! lately. The SQL backends share one impl (`sql::notifications_impl!`); settings and sent
//! notifications are stored as JSON.

use async_trait::async_trait;
use chime_domain::{AppName, NotificationSettings, SentNotification, TimerId, Timestamp};

use crate::{StoreError, StoreResult};

#[async_trait]
pub trait Notifications: Send + Sync + 'static {
    /// Creates or replaces the app's settings; `true` when they were created.
    async fn put_notifications(&self, settings: &NotificationSettings) -> StoreResult<bool>;

    /// The app's settings, if it has any.
    async fn get_notifications(&self, app: &AppName) -> StoreResult<Option<NotificationSettings>>;

    /// One more run in a row failed for each of `timers` (once per id given): each streak's
    /// length after it. Counted in the database, so the executor that sees the run fail need
    /// not be the one that saw the runs before.
    async fn count_failures(&self, timers: &[TimerId]) -> StoreResult<Vec<(TimerId, u32)>>;

    /// A run of each of `timers` succeeded: their streaks end. Returns the length each
    /// ended streak had, for the timers that had one; a streak is ended (and returned) once.
    async fn end_streaks(&self, timers: &[TimerId]) -> StoreResult<Vec<(TimerId, u32)>>;

    /// Keeps `sent` (replacing an earlier record of the same event) and drops the app's
    /// records older than `keep_since`.
    async fn record_notification(
        &self,
        sent: &SentNotification,
        keep_since: Timestamp,
    ) -> StoreResult<()>;

    /// The app's latest `limit` notifications, newest first.
    async fn recent_notifications(
        &self,
        app: &AppName,
        limit: u32,
    ) -> StoreResult<Vec<SentNotification>>;
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(StoreError::corrupt)
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(StoreError::corrupt)
}

/// `ids` as the JSON array the dialects' list statements read.
pub(crate) fn ids_json(ids: &[TimerId]) -> String {
    serde_json::Value::from(ids.iter().map(|i| i.get()).collect::<Vec<i64>>()).to_string()
}

pub(crate) fn streak(id: i64, failed: i64) -> StoreResult<(TimerId, u32)> {
    Ok((
        TimerId::new(id).map_err(StoreError::corrupt)?,
        u32::try_from(failed.max(0)).unwrap_or(u32::MAX),
    ))
}
