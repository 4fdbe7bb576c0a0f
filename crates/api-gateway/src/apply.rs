//! Declarative timers: create the app's timer of a name, or change it to match, reporting
//! which fields differ. What `PUT /v1/apps/{app}/timers/{name}` and `chime apply` use.

use chime_domain::{AppName, Scope, Timer, TimerName};
use chime_storage::{PageRequest, TimerFilter};

use crate::api::{Applied, ApplyRequest, ApplyResult, CreateRequest, TimerApi};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult};
use crate::service::TimerService;
use crate::spec::parse_spec;

impl TimerService {
    /// [`TimerApi::apply_timer`].
    pub(crate) async fn apply(
        &self,
        ctx: &RequestContext,
        req: ApplyRequest,
    ) -> ApiResult<Applied> {
        ctx.require(Scope::Write)?;
        if req.timer.app != req.app {
            return Err(ApiError::invalid("app", "must be the app the path names"));
        }
        if req.timer.name != req.name {
            return Err(ApiError::invalid("name", "must be the name the path names"));
        }
        let app = AppName::parse(req.app.clone())?;
        ctx.scope.check(&app)?;
        let excluding = self
            .excluding(&app, req.timer.exclude_calendars.as_ref(), &[])
            .await?;
        let desired = parse_spec(&req.timer, self.clock.now(), excluding)?;
        self.check_callback(&desired)?;
        let Some(current) = self.timer_named(&desired.app, &desired.name).await? else {
            let timer = if req.dry_run {
                None
            } else {
                let create = CreateRequest {
                    timer: req.timer,
                    idempotency_key: None,
                };
                Some(self.create_timer(ctx, create).await?)
            };
            return Ok(Applied {
                result: ApplyResult::Created,
                changes: Vec::new(),
                timer,
            });
        };
        let mut changes: Vec<String> = current
            .spec
            .changes(&desired)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let enable = req.timer.enabled.filter(|e| *e != current.enabled);
        if enable.is_some() {
            changes.push("enabled".into());
        }
        if changes.is_empty() || req.dry_run {
            let result = if changes.is_empty() {
                ApplyResult::Unchanged
            } else {
                ApplyResult::Updated
            };
            return Ok(Applied {
                result,
                changes,
                timer: Some(self.view(current)),
            });
        }
        // Checked only when written: a dry run of a manifest may name steps it creates.
        if desired.then != current.spec.then {
            self.check_chain(&desired, Some(current.id)).await?;
        }
        let mut spec = desired;
        if current.spec.schedule.same_intent(&spec.schedule) {
            // Same schedule: keep its anchors (an `every`'s phase, a limit's last run).
            spec.schedule = current.spec.schedule.clone();
        }
        let mut timer = current;
        if spec != timer.spec {
            let written = self
                .timers
                .update_timer(timer.id, Some(timer.version), spec, self.horizon)
                .await?;
            timer = self.indexed(written).await.timer;
        }
        if let Some(enabled) = enable {
            let written = self
                .timers
                .set_timer_enabled(timer.id, enabled, self.horizon)
                .await?;
            timer = self.indexed(written).await.timer;
        }
        Ok(Applied {
            result: ApplyResult::Updated,
            changes,
            timer: Some(self.view(timer)),
        })
    }

    /// The live timer of `app` named `name`, if any.
    pub(crate) async fn timer_named(
        &self,
        app: &AppName,
        name: &TimerName,
    ) -> ApiResult<Option<Timer>> {
        let filter = TimerFilter {
            app: Some(app.clone()),
            name_prefix: Some(name.as_str().to_owned()),
            ..Default::default()
        };
        let mut page = PageRequest::default();
        loop {
            let listed = self.timers.list_timers(&filter, &page).await?;
            if let Some(t) = listed.items.into_iter().find(|t| t.spec.name == *name) {
                return Ok(Some(t));
            }
            match listed.next_page_token {
                Some(token) => page.token = Some(token.as_str().to_owned()),
                None => return Ok(None),
            }
        }
    }
}
