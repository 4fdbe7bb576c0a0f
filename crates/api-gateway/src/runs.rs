//! A timer's runs (a broadcast run with its shards), dead letters across timers, and
//! their redrive.

use chime_domain::{Occurrence, OccurrenceStatus, Page, PageSize, Scope, TaskKey};
use chime_storage::{DeadFilter, PageRequest, Redrive, RunFilter};

use crate::api::{ListDeadLetters, ListRuns, RedriveTarget, RunDetail};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;
use crate::visibility::listed_app;

impl TimerService {
    /// [`crate::api::TimerApi::list_runs`].
    pub(crate) async fn runs(
        &self,
        ctx: &RequestContext,
        query: ListRuns,
    ) -> ApiResult<Page<Occurrence>> {
        ctx.require(Scope::Read)?;
        // A deleted, unknown or out-of-scope timer has no runs to show.
        let timer = self.visible_timer(ctx, query.timer_id).await?;
        let filter = RunFilter {
            timer_id: query.timer_id,
            status: query
                .status
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<OccurrenceStatus>())
                .transpose()?,
            due_by: (!query.upcoming).then(|| self.clock.now()),
        };
        let page = PageRequest {
            size: PageSize::new(query.page_size)?,
            token: query.page_token,
        };
        let mut listed = self.occurrences.list_runs(&filter, &page).await?;
        if broadcasts(&timer) {
            self.attach_shards(&mut listed.items).await?;
        }
        Ok(listed)
    }

    /// A broadcast timer's runs with their shards, read in one go.
    async fn attach_shards(&self, runs: &mut [Occurrence]) -> ApiResult<()> {
        let (Some(store), Some(first), Some(last)) = (&self.shards, runs.first(), runs.last())
        else {
            return Ok(());
        };
        let (a, b) = (first.key.run_at, last.key.run_at);
        let (from, to) = if a <= b { (a, b) } else { (b, a) };
        let mut shards = store.shards_between(first.key.timer_id, from, to).await?;
        for run in runs.iter_mut() {
            run.shards = shards
                .extract_if(.., |(at, _)| *at == run.key.run_at)
                .map(|(_, s)| s)
                .collect();
        }
        Ok(())
    }

    /// [`crate::api::TimerApi::get_run`].
    pub(crate) async fn run(&self, ctx: &RequestContext, raw_key: &str) -> ApiResult<RunDetail> {
        ctx.require(Scope::Read)?;
        let key: TaskKey = raw_key.parse()?;
        let mut run = self.visible_run(ctx, key).await?;
        if let Some(store) = &self.shards {
            run.shards = store.shards_of(key).await?;
        }
        let chain = match &self.chains {
            Some(chains) if run.status.is_terminal() => chains.steps_of(key).await?,
            _ => Vec::new(),
        };
        Ok(RunDetail { run, chain })
    }

    /// Run `key` of a timer the caller may see; 404 otherwise, as for an unknown run.
    async fn visible_run(&self, ctx: &RequestContext, key: TaskKey) -> ApiResult<Occurrence> {
        let run = match self.check_visible(ctx, key.timer_id).await {
            Ok(()) => self.occurrences.get_occurrence(key).await?,
            Err(e) if e.code == ErrorCode::NotFound => None,
            Err(e) => return Err(e),
        };
        run.ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                "NOT_FOUND",
                format!("run {key} not found"),
            )
        })
    }

    /// [`crate::api::TimerApi::list_dead_letters`].
    pub(crate) async fn dead_letters(
        &self,
        ctx: &RequestContext,
        query: ListDeadLetters,
    ) -> ApiResult<Page<Occurrence>> {
        ctx.require(Scope::Read)?;
        let app = listed_app(ctx, query.app)?;
        if let Some(id) = query.timer_id {
            self.check_visible(ctx, id).await?;
        }
        let filter = DeadFilter {
            app,
            timer_id: query.timer_id,
        };
        let page = PageRequest {
            size: PageSize::new(query.page_size)?,
            token: query.page_token,
        };
        Ok(self.occurrences.list_dead(&filter, &page).await?)
    }

    /// [`crate::api::TimerApi::redrive`].
    pub(crate) async fn requeue_dead(
        &self,
        ctx: &RequestContext,
        what: RedriveTarget,
    ) -> ApiResult<u64> {
        ctx.require(Scope::Write)?;
        let now = self.clock.now();
        match what {
            RedriveTarget::Run(raw) => {
                let key: TaskKey = raw.parse()?;
                let run = self.visible_run(ctx, key).await?;
                if run.status != OccurrenceStatus::Dead {
                    return Err(ApiError::new(
                        ErrorCode::FailedPrecondition,
                        "NOT_DEAD",
                        format!("run {key} is {}, not dead", run.status),
                    ));
                }
                Ok(self.occurrences.redrive(Redrive::One(key), now).await?)
            }
            RedriveTarget::Timer(id) => {
                // Unknown, deleted or out-of-scope timers answer 404.
                self.visible_timer(ctx, id).await?;
                Ok(self.occurrences.redrive(Redrive::Timer(id), now).await?)
            }
        }
    }
}

/// Whether `timer` delivers each run to every worker of its group.
fn broadcasts(timer: &chime_domain::Timer) -> bool {
    matches!(&timer.spec.callback.target, chime_domain::Target::Worker(w) if w.broadcast)
}
