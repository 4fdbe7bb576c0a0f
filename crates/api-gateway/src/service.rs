//! The one implementation of [`TimerApi`]: parses input into domain types and calls the
//! stores. A write that can make a timer fire stores the timer with its first occurrences in
//! one transaction (no other service on the request path), then adds them to the hot index.

use std::sync::Arc;

use async_trait::async_trait;
use chime_domain::BrokerUrl;
use chime_domain::{
    AppName, Clock, Horizon, Labels, NetworkPolicy, NewOccurrence, Occurrence, Page, PageSize,
    PauseNote, Scope, StoppedTimer, TaskKey, TimerId, TimerState, ValidationError, plain_text,
};
use chime_storage::{
    Calendars, HotIndex, OccurrenceStore, PageRequest, TimerFilter, TimerStore, Written,
};

use crate::api::{
    Applied, ApplyRequest, BackfillRequest, Backfilled, CalendarInput, CalendarPut, CreateRequest,
    ListDeadLetters, ListRuns, ListTimers, MAX_BATCH, PreviewRequest, PreviewRun, RedriveTarget,
    RunDetail, TimerApi, TimerPatch, TimerView, Triggered,
};
use crate::context::{Caller, RequestContext};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::index::IndexWriter;
use crate::notifications::{AppNotifications, NotificationsInput};
use crate::preview;
use crate::quota::{QuotaSettings, Quotas};
use crate::spec::apply_patch;
use crate::unschedule::{Unscheduler, unwritten_members};
use crate::visibility::listed_app;

/// How many fire times a timer response previews.
const NEXT_RUNS: usize = 5;

pub struct TimerService {
    pub(crate) timers: Arc<dyn TimerStore>,
    pub(crate) occurrences: Arc<dyn OccurrenceStore>,
    pub(crate) index: Arc<IndexWriter>,
    unscheduler: Unscheduler,
    pub(crate) horizon: Horizon,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) networks: NetworkPolicy,
    pub(crate) brokers: Arc<Vec<BrokerUrl>>,
    /// Limits on each app's creates; none unless set.
    quotas: Option<Quotas>,
    /// Where exclusion calendars are kept; without one, timers cannot name any.
    pub(crate) calendars: Option<Arc<dyn Calendars>>,
    /// The executors' activity tallies, for the overview.
    pub(crate) activity: Option<Arc<dyn chime_storage::Activity>>,
    /// Each app's failure-notification settings and what was sent.
    pub(crate) notifications: Option<Arc<dyn chime_storage::Notifications>>,
    /// The chain steps runs started, shown with a run.
    pub(crate) chains: Option<Arc<dyn chime_storage::Chains>>,
    /// Broadcast runs' shards, shown with their runs.
    pub(crate) shards: Option<Arc<dyn chime_storage::Shards>>,
    /// New timers may leave their runs unwritten ([`chime_domain::UnwrittenRun`]).
    pub(crate) runs_unwritten: bool,
}

impl TimerService {
    /// `index`: the hot index (`None` without Redis: the schedulers then read the database).
    /// `horizon`: how far ahead a timer's first occurrences are written with it.
    pub fn new(
        timers: Arc<dyn TimerStore>,
        occurrences: Arc<dyn OccurrenceStore>,
        index: Option<Arc<dyn HotIndex>>,
        horizon: Horizon,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let index = Arc::new(IndexWriter::new(index, clock.clone()));
        Self {
            timers,
            unscheduler: Unscheduler::new(occurrences.clone(), index.clone(), clock.clone()),
            occurrences,
            index,
            horizon,
            clock,
            networks: NetworkPolicy::default(),
            brokers: Arc::default(),
            quotas: None,
            calendars: None,
            activity: None,
            notifications: None,
            chains: None,
            shards: None,
            runs_unwritten: false,
        }
    }

    /// Lets fast recurring timers created from now on leave their runs unwritten
    /// (`migrator.unwritten_runs`), when the hot index keeps the run leases they are taken
    /// under.
    pub fn with_unwritten_runs(mut self, on: bool) -> Self {
        self.runs_unwritten = on && self.index.keeps_run_leases();
        self
    }

    /// Keeps the apps' failure-notification settings in `store`.
    /// Shows broadcast runs with their shards, as recorded in `store`.
    pub fn with_shards(mut self, store: Arc<dyn chime_storage::Shards>) -> Self {
        self.shards = Some(store);
        self
    }

    /// Shows with each run the chain steps it started, as recorded in `store`.
    pub fn with_chains(mut self, store: Arc<dyn chime_storage::Chains>) -> Self {
        self.chains = Some(store);
        self
    }

    pub fn with_notifications(mut self, store: Arc<dyn chime_storage::Notifications>) -> Self {
        self.notifications = Some(store);
        self
    }

    /// Lets timers name the exclusion calendars kept in `calendars`.
    pub fn with_calendars(mut self, calendars: Arc<dyn Calendars>) -> Self {
        self.calendars = Some(calendars);
        self
    }

    /// Limits each app's timer count and create rate.
    pub fn with_quotas(mut self, settings: QuotaSettings) -> Self {
        self.quotas = Some(Quotas::new(
            settings,
            self.timers.clone(),
            self.clock.clone(),
        ));
        self
    }

    /// Where callbacks may go; IP literals outside it are refused at create and update
    /// (host names are judged by the executors, after DNS). Strict unless widened.
    pub fn with_networks(mut self, networks: NetworkPolicy) -> Self {
        self.networks = networks;
        self
    }

    /// The NATS and AMQP servers timers may publish to; none unless given.
    pub fn with_brokers(mut self, brokers: Vec<BrokerUrl>) -> Self {
        self.brokers = Arc::new(brokers);
        self
    }

    pub(crate) fn view(&self, timer: chime_domain::Timer) -> TimerView {
        let now = self.clock.now();
        let next_runs = if timer.enabled {
            timer.spec.schedule.next_runs(now, NEXT_RUNS)
        } else {
            Vec::new()
        };
        TimerView {
            state: timer.state(now),
            remaining_runs: timer.spec.schedule.remaining_runs(now),
            timer,
            next_runs,
        }
    }

    /// Indexes what a committed write stored, and shows the timer.
    pub(crate) async fn indexed(&self, written: Written) -> TimerView {
        self.index.add(&written.occurrences).await;
        self.view(written.timer)
    }
}

#[async_trait]
impl TimerApi for TimerService {
    async fn create_timer(&self, ctx: &RequestContext, req: CreateRequest) -> ApiResult<TimerView> {
        ctx.require(Scope::Write)?;
        let mut views = self.batch_create_timers(ctx, vec![req]).await?;
        views
            .pop()
            .ok_or_else(|| ApiError::new(ErrorCode::Internal, "INTERNAL", "nothing created"))
    }

    #[tracing::instrument(name = "create", skip_all, fields(timers = reqs.len()))]
    async fn batch_create_timers(
        &self,
        ctx: &RequestContext,
        reqs: Vec<CreateRequest>,
    ) -> ApiResult<Vec<TimerView>> {
        ctx.require(Scope::Write)?;
        if reqs.is_empty() || reqs.len() > MAX_BATCH {
            return Err(ApiError::invalid(
                "requests",
                format!("a batch holds 1 to {MAX_BATCH} timers"),
            ));
        }
        let now = self.clock.now();
        let mut batch = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let prepared = self.prepare(ctx, r, now).await.map_err(|mut e| {
                if reqs.len() > 1 {
                    e.field = Some(format!("requests[{i}].{}", e.field.unwrap_or_default()));
                }
                e
            })?;
            batch.push(prepared);
        }
        let mut per_app: Vec<(AppName, u64)> = Vec::new();
        for c in &batch {
            match per_app.iter_mut().find(|(a, _)| *a == c.timer.spec.app) {
                Some((_, n)) => *n += 1,
                None => per_app.push((c.timer.spec.app.clone(), 1)),
            }
        }
        if let Some(quotas) = &self.quotas {
            for (app, n) in &per_app {
                quotas.admit(app, *n).await?;
            }
        }
        let created = if batch.len() == 1 && batch[0].idempotency.is_none() {
            let single = batch.into_iter().next().map(|c| c.timer);
            match single {
                Some(t) => vec![self.timers.create_timer(t, self.horizon).await?],
                None => Vec::new(),
            }
        } else {
            self.timers.create_timers(batch, self.horizon).await?
        };
        metrics::counter!("chime_gateway_timers_created_total").increment(created.len() as u64);
        if let Some(quotas) = &self.quotas {
            for (app, n) in &per_app {
                quotas.created(app, *n);
            }
        }
        let rows: Vec<NewOccurrence> = created
            .iter()
            .flat_map(|w| w.occurrences.iter().copied())
            .collect();
        self.index.add(&rows).await;
        Ok(created.into_iter().map(|w| self.view(w.timer)).collect())
    }

    async fn get_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<TimerView> {
        ctx.require(Scope::Read)?;
        Ok(self.view(self.visible_timer(ctx, id).await?))
    }

    async fn list_timers(
        &self,
        ctx: &RequestContext,
        query: ListTimers,
    ) -> ApiResult<Page<TimerView>> {
        ctx.require(Scope::Read)?;
        let state = query
            .state
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<TimerState>())
            .transpose()?;
        let filter = TimerFilter {
            app: listed_app(ctx, query.app)?,
            enabled: query.enabled,
            bucket: None,
            state: state.map(|s| (s, self.clock.now())),
            name_prefix: name_prefix(query.name_prefix)?,
            labels: match query.label.as_deref() {
                Some(sel) => Labels::parse_selector(sel)?,
                None => Vec::new(),
            },
        };
        let page = PageRequest {
            size: PageSize::new(query.page_size)?,
            token: query.page_token,
        };
        let listed = self.timers.list_timers(&filter, &page).await?;
        Ok(Page {
            items: listed.items.into_iter().map(|t| self.view(t)).collect(),
            next_page_token: listed.next_page_token,
        })
    }

    async fn update_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        patch: TimerPatch,
    ) -> ApiResult<TimerView> {
        ctx.require(Scope::Write)?;
        let current = self.visible_timer(ctx, id).await?;
        let now = self.clock.now();
        let excluding = self
            .excluding(
                &current.spec.app,
                patch.exclude_calendars.as_ref(),
                &current.spec.exclude_calendars,
            )
            .await?;
        let spec = apply_patch(&current.spec, &patch, now, excluding)?;
        self.check_callback(&spec)?;
        if spec.then != current.spec.then || spec.name != current.spec.name {
            self.check_chain(&spec, Some(id)).await?;
        }
        if spec == current.spec {
            // Nothing changes: no new version, but the precondition still holds.
            if let Some(expected) = patch.expected_version
                && expected != current.version
            {
                return Err(chime_storage::StoreError::VersionConflict {
                    expected,
                    actual: current.version,
                }
                .into());
            }
            return Ok(self.view(current));
        }
        let updated = self
            .timers
            .update_timer(id, patch.expected_version, spec, self.horizon)
            .await?;
        Ok(self.indexed(updated).await)
    }

    async fn delete_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<()> {
        ctx.require(Scope::Write)?;
        self.check_visible(ctx, id).await?;
        self.timers.delete_timer(id).await?;
        // A deleted timer's unwritten runs still in the index are dropped by executors.
        self.unscheduler.stopped(
            StoppedTimer {
                id,
                version: i64::MAX,
            },
            Vec::new(),
        );
        Ok(())
    }

    async fn set_timer_enabled(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        enabled: bool,
    ) -> ApiResult<TimerView> {
        ctx.require(Scope::Write)?;
        self.check_visible(ctx, id).await?;
        let written = self
            .timers
            .set_timer_enabled(id, enabled, self.horizon)
            .await?;
        if !enabled {
            self.unscheduler.stopped(
                StoppedTimer {
                    id,
                    version: written.timer.version,
                },
                unwritten_members(&written.timer, self.clock.now(), self.horizon),
            );
        }
        Ok(self.indexed(written).await)
    }

    async fn pause_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        reason: Option<String>,
    ) -> ApiResult<TimerView> {
        ctx.require(Scope::Write)?;
        let reason = PauseNote::reason(reason.as_deref().unwrap_or(""))?;
        self.check_visible(ctx, id).await?;
        let note = PauseNote {
            reason,
            at: self.clock.now(),
            by: match &ctx.caller {
                Caller::Anonymous => None,
                Caller::Admin => Some("bootstrap".to_owned()),
                Caller::Token { id, .. } => Some(id.to_string()),
            },
        };
        let paused = self.timers.pause_timer(id, &note).await?;
        self.unscheduler.stopped(
            StoppedTimer {
                id,
                version: paused.version,
            },
            unwritten_members(&paused, self.clock.now(), self.horizon),
        );
        Ok(self.view(paused))
    }

    async fn next_runs(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        count: Option<u32>,
    ) -> ApiResult<Vec<PreviewRun>> {
        ctx.require(Scope::Read)?;
        let timer = self.visible_timer(ctx, id).await?;
        let count = preview::count(count)?;
        Ok(preview::runs(&timer.spec.schedule, self.clock.now(), count))
    }

    async fn preview(
        &self,
        ctx: &RequestContext,
        req: PreviewRequest,
    ) -> ApiResult<Vec<PreviewRun>> {
        ctx.require(Scope::Read)?;
        let now = self.clock.now();
        let excluding = match (&req.app, &req.exclude_calendars) {
            (_, None) => Default::default(),
            (None, Some(_)) => {
                return Err(ApiError::invalid(
                    "app",
                    "required with exclude_calendars: whose calendars they are",
                ));
            }
            (Some(app), Some(names)) => {
                let app = AppName::parse(app.clone())?;
                ctx.scope.check(&app)?;
                self.excluding(&app, Some(names), &[]).await?
            }
        };
        let (schedule, from, count) = preview::parse(&req, now, excluding.dates)?;
        Ok(preview::runs(&schedule, from, count))
    }

    async fn apply_timer(&self, ctx: &RequestContext, req: ApplyRequest) -> ApiResult<Applied> {
        self.apply(ctx, req).await
    }

    async fn trigger_timer(&self, ctx: &RequestContext, id: TimerId) -> ApiResult<Triggered> {
        ctx.require(Scope::Write)?;
        let timer = self.enabled_timer(ctx, id, "triggering").await?;
        // Another occurrence may hold this exact millisecond; take the next free one.
        let mut at = self.clock.now();
        for _ in 0..10 {
            let row = NewOccurrence {
                key: TaskKey::new(id, at),
                timer_version: timer.version,
                bucket: timer.bucket,
                due: None,
            };
            // One statement: the occurrence is durable once it returns.
            if self.occurrences.insert_occurrences(&[row]).await? == 1 {
                self.index.add(&[row]).await;
                return Ok(Triggered { key: row.key });
            }
            at = at.add_millis(1);
        }
        Err(ApiError::new(
            ErrorCode::Unavailable,
            "TRIGGER_BUSY",
            "could not find a free instant to trigger at; retry",
        ))
    }

    async fn put_calendar(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
        input: CalendarInput,
    ) -> ApiResult<CalendarPut> {
        self.put(ctx, app, name, input).await
    }

    async fn get_calendar(
        &self,
        ctx: &RequestContext,
        app: String,
        name: String,
    ) -> ApiResult<chime_domain::Calendar> {
        self.get(ctx, app, name).await
    }

    async fn list_calendars(
        &self,
        ctx: &RequestContext,
        app: String,
    ) -> ApiResult<Vec<chime_domain::Calendar>> {
        self.list(ctx, app).await
    }

    async fn activity(
        &self,
        ctx: &RequestContext,
        query: crate::activity::ActivityQuery,
    ) -> ApiResult<crate::activity::ActivityReport> {
        self.activity_report(ctx, query).await
    }

    async fn put_notifications(
        &self,
        ctx: &RequestContext,
        app: String,
        input: NotificationsInput,
    ) -> ApiResult<(bool, AppNotifications)> {
        self.put_notification_settings(ctx, app, input).await
    }

    async fn get_notifications(
        &self,
        ctx: &RequestContext,
        app: String,
    ) -> ApiResult<AppNotifications> {
        self.notification_settings(ctx, app).await
    }

    async fn backfill_timer(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        req: BackfillRequest,
    ) -> ApiResult<Backfilled> {
        self.backfill(ctx, id, req).await
    }

    async fn list_runs(
        &self,
        ctx: &RequestContext,
        query: ListRuns,
    ) -> ApiResult<Page<Occurrence>> {
        self.runs(ctx, query).await
    }

    async fn get_run(&self, ctx: &RequestContext, key: &str) -> ApiResult<RunDetail> {
        self.run(ctx, key).await
    }

    async fn list_dead_letters(
        &self,
        ctx: &RequestContext,
        query: ListDeadLetters,
    ) -> ApiResult<Page<Occurrence>> {
        self.dead_letters(ctx, query).await
    }

    async fn redrive(&self, ctx: &RequestContext, what: RedriveTarget) -> ApiResult<u64> {
        self.requeue_dead(ctx, what).await
    }

    async fn ready(&self) -> ApiResult<()> {
        let probe = PageRequest {
            size: PageSize::new(Some(1))?,
            token: None,
        };
        self.timers
            .list_timers(&TimerFilter::default(), &probe)
            .await?;
        Ok(())
    }
}

/// A listing's name prefix as given: one no name can start with is the caller's mistake.
fn name_prefix(prefix: Option<String>) -> Result<Option<String>, ValidationError> {
    if let Some(p) = &prefix {
        plain_text("name_prefix", p, chime_domain::limits::MAX_NAME_CHARS)?;
    }
    Ok(prefix.filter(|p| !p.is_empty()))
}
