//! Exclusion calendars: an app's named dates its timers may exclude
//! (`PUT /v1/apps/{app}/calendars/{name}`, `exclude_calendars` on a timer). A timer's
//! schedule carries the dates resolved when it was written, so materialization, previews and
//! the executors need no calendar lookups; putting a calendar rewrites the timers naming it.

use std::collections::HashMap;

use chime_domain::{
    AppName, Calendar, CalendarName, Exclusions, Scope, Timer, limits, parse_dates,
};
use chime_storage::{PageRequest, StoreError, TimerFilter};

use crate::api::{CalendarInput, CalendarPut};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;
use crate::spec::{Excluding, calendar_names};

impl TimerService {
    /// The names `raw` gives (else `current`) and their dates, read now. A name the app has
    /// no calendar of is a 400.
    pub(crate) async fn excluding(
        &self,
        app: &AppName,
        raw: Option<&Vec<String>>,
        current: &[CalendarName],
    ) -> ApiResult<Excluding> {
        let names = match raw {
            Some(r) => calendar_names(r)?,
            None => current.to_vec(),
        };
        if names.is_empty() {
            return Ok(Excluding::default());
        }
        let found = self.calendar_store()?.get_calendars(app, &names).await?;
        if let Some(missing) = names.iter().find(|n| !found.iter().any(|c| c.name == **n)) {
            return Err(ApiError::invalid(
                "exclude_calendars",
                format!("app {app} has no calendar named {missing}"),
            ));
        }
        Ok(Excluding {
            dates: Exclusions::new(found.iter().flat_map(|c| c.dates.iter().copied())),
            names,
        })
    }

    fn calendar_store(&self) -> ApiResult<&std::sync::Arc<dyn chime_storage::Calendars>> {
        self.calendars.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::FailedPrecondition,
                "NO_CALENDARS",
                "this gateway has no calendar store",
            )
        })
    }

    /// [`crate::api::TimerApi::put_calendar`].
    pub(crate) async fn put(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
        input: CalendarInput,
    ) -> ApiResult<CalendarPut> {
        ctx.require(Scope::Write)?;
        let app = AppName::parse(app)?;
        ctx.scope.check(&app)?;
        let name = CalendarName::parse(name).map_err(|e| ApiError::invalid("name", e.message))?;
        let calendar = Calendar {
            dates: parse_dates(&input.dates)?,
            app,
            name,
            updated_at: self.clock.now(),
        };
        let store = self.calendar_store()?;
        let existing = store.list_calendars(&calendar.app).await?;
        if existing.len() >= limits::MAX_CALENDARS_PER_APP
            && !existing.iter().any(|c| c.name == calendar.name)
        {
            return Err(ApiError::invalid(
                "name",
                format!(
                    "app {} has {} calendars, the most it may have",
                    calendar.app,
                    limits::MAX_CALENDARS_PER_APP
                ),
            ));
        }
        let created = store.put_calendar(&calendar).await?;
        let timers_updated = self.rewrite_timers_naming(&calendar).await?;
        Ok(CalendarPut {
            calendar,
            created,
            timers_updated,
        })
    }

    /// Rewrites the app's live timers that name `changed` to skip its dates now: a new
    /// version each, so their pending occurrences on newly excluded dates are skipped and
    /// those on freed dates are written. Returns how many changed.
    async fn rewrite_timers_naming(&self, changed: &Calendar) -> ApiResult<u32> {
        let filter = TimerFilter {
            app: Some(changed.app.clone()),
            ..Default::default()
        };
        let mut page = PageRequest::default();
        let mut calendars: HashMap<CalendarName, Calendar> = HashMap::new();
        calendars.insert(changed.name.clone(), changed.clone());
        let mut rewritten = 0;
        loop {
            let listed = self.timers.list_timers(&filter, &page).await?;
            for timer in listed.items {
                if !timer.spec.exclude_calendars.contains(&changed.name) {
                    continue;
                }
                if self.rewrite(timer, &mut calendars).await? {
                    rewritten += 1;
                }
            }
            match listed.next_page_token {
                Some(token) => page.token = Some(token.as_str().to_owned()),
                None => return Ok(rewritten),
            }
        }
    }

    /// One timer's schedule with the dates of its calendars as they are now; `false` when
    /// that changes nothing. A timer changed meanwhile is read again once.
    async fn rewrite(
        &self,
        mut timer: Timer,
        calendars: &mut HashMap<CalendarName, Calendar>,
    ) -> ApiResult<bool> {
        let missing: Vec<CalendarName> = timer
            .spec
            .exclude_calendars
            .iter()
            .filter(|n| !calendars.contains_key(*n))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let store = self.calendar_store()?;
            for c in store.get_calendars(&timer.spec.app, &missing).await? {
                calendars.insert(c.name.clone(), c);
            }
        }
        let dates = Exclusions::new(
            timer
                .spec
                .exclude_calendars
                .iter()
                .filter_map(|n| calendars.get(n))
                .flat_map(|c| c.dates.iter().copied()),
        );
        for _ in 0..2 {
            if timer.spec.schedule.exclusions() == &dates {
                return Ok(false);
            }
            let mut spec = timer.spec.clone();
            spec.schedule = spec.schedule.with_exclusions(dates.clone());
            match self
                .timers
                .update_timer(timer.id, Some(timer.version), spec, self.horizon)
                .await
            {
                Ok(written) => {
                    self.indexed(written).await;
                    return Ok(true);
                }
                Err(StoreError::VersionConflict { .. }) => {
                    timer = self.timers.get_timer(timer.id).await?;
                }
                Err(StoreError::TimerNotFound(_)) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::new(
            ErrorCode::Unavailable,
            "TIMER_BUSY",
            format!("timer {} kept changing; put the calendar again", timer.id),
        ))
    }

    /// [`crate::api::TimerApi::get_calendar`].
    pub(crate) async fn get(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
    ) -> ApiResult<Calendar> {
        ctx.require(Scope::Read)?;
        let app = AppName::parse(app)?;
        ctx.scope.check(&app)?;
        let name = CalendarName::parse(name).map_err(|e| ApiError::invalid("name", e.message))?;
        self.calendar_store()?
            .get_calendars(&app, std::slice::from_ref(&name))
            .await?
            .pop()
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::NotFound,
                    "NOT_FOUND",
                    format!("app {app} has no calendar named {name}"),
                )
            })
    }

    /// [`crate::api::TimerApi::list_calendars`].
    pub(crate) async fn list(&self, ctx: &RequestContext, app: String) -> ApiResult<Vec<Calendar>> {
        ctx.require(Scope::Read)?;
        let app = AppName::parse(app)?;
        ctx.scope.check(&app)?;
        Ok(self.calendar_store()?.list_calendars(&app).await?)
    }
}
