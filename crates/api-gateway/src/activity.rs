//! The activity overview (`GET /v1/activity`): attempts, failures, dead letters and lateness
//! per minute over the last `minutes`, summed from the executors' tallies. The console's
//! overview charts draw it.

use std::sync::Arc;

use chime_domain::{Counts, Scope, Timestamp, minute_of};
use chime_storage::Activity;

use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;
use crate::visibility::listed_app;

/// Minutes shown unless asked, and the most that may be asked for (a day).
pub const DEFAULT_MINUTES: u32 = 60;
pub const MAX_MINUTES: u32 = 1440;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActivityQuery {
    /// Only this app's; every app's the caller may see when `None`.
    pub app: Option<String>,
    pub minutes: Option<u32>,
}

/// A dense series: one entry per minute from `from`, the current (partial) minute last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityReport {
    pub app: Option<String>,
    pub from: Timestamp,
    pub now: Timestamp,
    pub minutes: Vec<(Timestamp, Counts)>,
    /// The whole span's counts.
    pub total: Counts,
}

impl TimerService {
    /// Lets [`crate::TimerApi::activity`] read the executors' tallies from `activity`.
    pub fn with_activity(mut self, activity: Arc<dyn Activity>) -> Self {
        self.activity = Some(activity);
        self
    }

    /// [`crate::api::TimerApi::activity`].
    pub(crate) async fn activity_report(
        &self,
        ctx: &RequestContext,
        query: ActivityQuery,
    ) -> ApiResult<ActivityReport> {
        ctx.require(Scope::Read)?;
        let app = listed_app(ctx, query.app)?;
        let count = query.minutes.unwrap_or(DEFAULT_MINUTES);
        if !(1..=MAX_MINUTES).contains(&count) {
            return Err(ApiError::invalid(
                "minutes",
                format!("must be 1 to {MAX_MINUTES}"),
            ));
        }
        let store = self.activity.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::FailedPrecondition,
                "NO_ACTIVITY",
                "this gateway has no activity store",
            )
        })?;
        let now = self.clock.now();
        let from = minute_of(now)
            .saturating_sub(std::time::Duration::from_secs(60 * u64::from(count - 1)));
        let tallies = store.read_activity(app.as_ref(), from).await?;
        let mut minutes: Vec<(Timestamp, Counts)> = (0..i64::from(count))
            .map(|i| {
                (
                    Timestamp::from_millis(from.as_millis() + i * 60_000),
                    Counts::default(),
                )
            })
            .collect();
        let mut total = Counts::default();
        for t in tallies {
            let slot = (t.minute.as_millis() - from.as_millis()) / 60_000;
            // A writer's clock ahead of ours can tally a minute past the last one shown.
            if let Some((_, counts)) = usize::try_from(slot).ok().and_then(|i| minutes.get_mut(i)) {
                counts.merge(&t.counts);
                total.merge(&t.counts);
            }
        }
        Ok(ActivityReport {
            app: app.map(|a| a.as_str().to_owned()),
            from,
            now,
            minutes,
            total,
        })
    }
}
