//! Failure notifications (`PUT|GET /v1/apps/{app}/notifications`): where an app's failed,
//! dead and recovered runs are told, and what was sent lately. The executors send them
//! (`chime_executor::notify`); this is where they are set and read back. Admin scope.

use std::sync::Arc;

use chime_domain::{NotificationSettings, SentNotification};
use chime_storage::Notifications;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::admin_of;
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;

/// Sent notifications a read returns, newest first.
pub const RECENT: u32 = 20;

/// An app's notification settings, as a request gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationsInput {
    /// Where the events are POSTed (JSON, signed like callbacks with the app's secret). The
    /// callback network policy applies.
    #[schema(example = "https://ops.example.com/chime")]
    pub url: String,
    /// Which events: `dead`, `failing`, `recovered`; default all three. Empty: none.
    #[schema(example = json!(["dead", "failing", "recovered"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<String>>,
    /// How many runs of a timer in a row must fail before `timer.failing`: 1 to 1000,
    /// default 3.
    #[schema(example = 3)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_after: Option<u32>,
}

/// One notification an executor sent, or gave up on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SentView {
    /// `run.dead`, `timer.failing` or `timer.recovered`.
    #[serde(rename = "type")]
    pub kind: String,
    pub timer_id: i64,
    pub timer_name: String,
    /// The run's scheduled instant, RFC 3339.
    pub run_at: String,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the URL took it (a 2xx answer).
    pub delivered: bool,
    /// POSTs made.
    pub attempts: u32,
    /// When the last POST ended, RFC 3339.
    pub sent_at: String,
    /// Why the last POST failed, when not delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl From<SentNotification> for SentView {
    fn from(s: SentNotification) -> Self {
        Self {
            kind: s.event.kind,
            timer_id: s.event.timer_id.get(),
            timer_name: s.event.timer_name.to_string(),
            run_at: s.event.run_at.to_rfc3339(),
            attempt: s.event.attempt,
            error: s.event.error,
            delivered: s.delivered,
            attempts: s.attempts,
            sent_at: s.at.to_rfc3339(),
            failure: s.error,
        }
    }
}

/// An app's notification settings and the notifications sent lately.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NotificationsView {
    pub app: String,
    pub url: String,
    #[schema(example = json!(["dead", "failing", "recovered"]))]
    pub on: Vec<String>,
    pub failing_after: u32,
    /// RFC 3339.
    pub updated_at: String,
    /// The latest 20 notifications sent, newest first.
    pub recent: Vec<SentView>,
}

/// An app's settings and the notifications sent lately, as both transports answer them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppNotifications {
    pub settings: NotificationSettings,
    pub recent: Vec<SentNotification>,
}

impl From<AppNotifications> for NotificationsView {
    fn from(
        AppNotifications {
            settings: s,
            recent,
        }: AppNotifications,
    ) -> Self {
        Self {
            app: s.app.to_string(),
            url: s.url.to_string(),
            on: s.on.iter().map(|o| o.as_str().to_owned()).collect(),
            failing_after: s.failing_after,
            updated_at: s.updated_at.to_rfc3339(),
            recent: recent.into_iter().map(SentView::from).collect(),
        }
    }
}

impl TimerService {
    fn notification_store(&self) -> ApiResult<&Arc<dyn Notifications>> {
        self.notifications.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::FailedPrecondition,
                "NO_NOTIFICATIONS",
                "this gateway has no notification store",
            )
        })
    }

    /// [`crate::api::TimerApi::put_notifications`]: `true` when created.
    pub(crate) async fn put_notification_settings(
        &self,
        ctx: &RequestContext,
        app: String,
        input: NotificationsInput,
    ) -> ApiResult<(bool, AppNotifications)> {
        let app = admin_of(ctx, &app)?;
        let settings = NotificationSettings::parse(
            app.clone(),
            &input.url,
            input.on.as_deref(),
            input.failing_after,
            self.clock.now(),
        )?;
        // A URL the executors would refuse is refused here, where the caller sees why.
        if let Err(blocked) = self.networks.check_url(settings.url.as_url()) {
            return Err(ApiError::invalid("url", blocked.to_string()));
        }
        let store = self.notification_store()?;
        let created = store.put_notifications(&settings).await?;
        tracing::info!(app = %app, url = %settings.url, "notification settings put");
        let recent = store.recent_notifications(&app, RECENT).await?;
        Ok((created, AppNotifications { settings, recent }))
    }

    /// [`crate::api::TimerApi::get_notifications`].
    pub(crate) async fn notification_settings(
        &self,
        ctx: &RequestContext,
        app: String,
    ) -> ApiResult<AppNotifications> {
        let app = admin_of(ctx, &app)?;
        let store = self.notification_store()?;
        let settings = store.get_notifications(&app).await?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                "NOT_FOUND",
                format!("app {app} has no notification settings"),
            )
        })?;
        let recent = store.recent_notifications(&app, RECENT).await?;
        Ok(AppNotifications { settings, recent })
    }
}
