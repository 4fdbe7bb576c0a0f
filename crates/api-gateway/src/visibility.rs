//! Who may see what: a timer or a listing within the caller's app scope. Another app's timer
//! answers "not found", never revealed.

use chime_domain::{AppName, Timer, TimerId};
use chime_storage::StoreError;

use crate::context::{AppScope, RequestContext};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;

impl TimerService {
    /// The timer `id` if it exists and the caller may see it; another app's timer is "not
    /// found", never revealed.
    pub(crate) async fn visible_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
    ) -> ApiResult<Timer> {
        let timer = self.timers.get_timer(id).await?;
        if ctx.scope.permits(&timer.spec.app) {
            Ok(timer)
        } else {
            Err(StoreError::timer_not_found(id).into())
        }
    }

    /// [`Self::visible_timer`] if it is enabled: 409 `TIMER_DISABLED` before `doing`.
    pub(crate) async fn enabled_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        doing: &str,
    ) -> ApiResult<Timer> {
        let timer = self.visible_timer(ctx, id).await?;
        if !timer.enabled {
            return Err(ApiError::new(
                ErrorCode::FailedPrecondition,
                "TIMER_DISABLED",
                format!("timer {id} is disabled; enable it before {doing}"),
            ));
        }
        Ok(timer)
    }

    /// [`Self::visible_timer`] for operations that need not read the timer when every app
    /// is in scope.
    pub(crate) async fn check_visible(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<()> {
        if ctx.scope != AppScope::All {
            self.visible_timer(ctx, id).await?;
        }
        Ok(())
    }
}

/// The app a listing is limited to: the one asked for (empty means none), within the
/// caller's scope.
pub(crate) fn listed_app(
    ctx: &RequestContext,
    asked: Option<String>,
) -> ApiResult<Option<AppName>> {
    let asked = asked
        .filter(|a| !a.is_empty())
        .map(AppName::parse)
        .transpose()?;
    ctx.scope.narrow(asked)
}
