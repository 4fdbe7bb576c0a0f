//! Backfill: a timer's fire times in a past range, added as occurrences that start at a
//! bounded pace from now. What `POST /v1/timers/{id}/backfill` and `BackfillTimer` use.

use std::collections::HashSet;

use chime_domain::{
    NewOccurrence, OverlapPolicy, Scope, TaskKey, Timer, TimerId, Timestamp, ValidationError,
    limits,
};

use crate::api::{BackfillRequest, Backfilled};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;
use crate::spec::timestamp;

/// A checked backfill request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub from: Timestamp,
    pub to: Timestamp,
    pub overlap: OverlapPolicy,
    /// Milliseconds between two runs' starts.
    pub spacing_ms: i64,
}

impl Range {
    /// `from` < `to` ≤ `now`; the pace within 1 to [`limits::MAX_BACKFILL_RATE`] per second.
    pub(crate) fn parse(
        req: &BackfillRequest,
        timer: &Timer,
        now: Timestamp,
    ) -> Result<Self, ValidationError> {
        let required = |raw: &str, field: &str| {
            if raw.is_empty() {
                return Err(ValidationError::new(field, "required (RFC 3339)"));
            }
            timestamp(&Some(raw.to_owned()), field).map(|t| t.unwrap_or(now))
        };
        let from = required(&req.from, "from")?;
        let to = required(&req.to, "to")?;
        if from >= to {
            return Err(ValidationError::new("to", "must be after from"));
        }
        if to > now {
            return Err(ValidationError::new(
                "to",
                "must not be in the future: a backfill fires past run times",
            ));
        }
        let rate = req.rate.unwrap_or(limits::DEFAULT_BACKFILL_RATE);
        if rate == 0 || rate > limits::MAX_BACKFILL_RATE {
            return Err(ValidationError::new(
                "rate",
                format!(
                    "must be between 1 and {} runs per second",
                    limits::MAX_BACKFILL_RATE
                ),
            ));
        }
        Ok(Self {
            from,
            to,
            overlap: req.overlap.unwrap_or(timer.spec.overlap),
            spacing_ms: 1000 / i64::from(rate),
        })
    }

    /// The timer's fire times in `[from, to)`, each due at its place in the pace from
    /// `now`: the run time stays nominal (the callback's `X-Chime-Scheduled-At` and
    /// `Idempotency-Key`), the due instant spreads them. More than
    /// [`limits::MAX_BACKFILL_RUNS`] is refused.
    pub(crate) fn plan(&self, timer: &Timer, now: Timestamp) -> ApiResult<Vec<NewOccurrence>> {
        let runs: Vec<Timestamp> = timer
            .spec
            .schedule
            .occurrences_between(self.from, self.to)
            .take(limits::MAX_BACKFILL_RUNS + 1)
            .collect();
        if runs.len() > limits::MAX_BACKFILL_RUNS {
            let mut e = ApiError::new(
                ErrorCode::InvalidArgument,
                "BACKFILL_TOO_LARGE",
                format!(
                    "the range holds more than {} fire times; split it into smaller ranges",
                    limits::MAX_BACKFILL_RUNS
                ),
            );
            e.field = Some("to".into());
            return Err(e);
        }
        Ok(runs
            .into_iter()
            .zip(0i64..)
            .map(|(run_at, i)| NewOccurrence {
                key: TaskKey::new(timer.id, run_at),
                timer_version: timer.version,
                bucket: timer.bucket,
                due: Some(now.add_millis(i * self.spacing_ms)),
            })
            .collect())
    }
}

impl TimerService {
    /// [`crate::api::TimerApi::backfill_timer`].
    pub(crate) async fn backfill(
        &self,
        ctx: &RequestContext,
        id: TimerId,
        req: BackfillRequest,
    ) -> ApiResult<Backfilled> {
        ctx.require(Scope::Write)?;
        let timer = self.enabled_timer(ctx, id, "a backfill").await?;
        let now = self.clock.now();
        let range = Range::parse(&req, &timer, now)?;
        let rows = range.plan(&timer, now)?;
        let added: HashSet<TaskKey> = self
            .occurrences
            .backfill(&rows, range.overlap)
            .await?
            .into_iter()
            .collect();
        let added_rows: Vec<NewOccurrence> = rows
            .iter()
            .filter(|r| added.contains(&r.key))
            .copied()
            .collect();
        self.index.add(&added_rows).await;
        Ok(Backfilled {
            added: added_rows.len() as u32,
            existing: (rows.len() - added_rows.len()) as u32,
            overlap: range.overlap,
            first_due: added_rows.first().map(NewOccurrence::due_at),
            last_due: added_rows.last().map(NewOccurrence::due_at),
        })
    }
}
