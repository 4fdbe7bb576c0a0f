//! [`Chains`]: the steps of chains, started once per parent run and name. The SQL backends
//! share one impl (`sql::chains_impl!`).

use async_trait::async_trait;
use chime_domain::{
    ChainOn, ChainStep, NewOccurrence, StepRecord, StepStatus, TaskKey, TimerId, TimerName,
    Timestamp,
};

use crate::{StoreError, StoreResult};

/// How many instants after `now` a step tries for its occurrence, when the named timer has
/// one at that millisecond already (as a trigger does).
pub(crate) const FREE_INSTANT_TRIES: i64 = 10;

#[async_trait]
pub trait Chains: Send + Sync + 'static {
    /// Starts each step not started before: the named timer of the step's app gets one
    /// occurrence due at `now` (or the next free millisecond), carrying its parent run. A
    /// step whose timer is gone or disabled is recorded as skipped. Each parent run and name
    /// is recorded once, in one transaction with its occurrence, so a step given twice (an
    /// outcome recorded twice, on any executor) starts once. Returns the occurrences started,
    /// for the hot index.
    async fn start_steps(
        &self,
        steps: &[ChainStep],
        now: Timestamp,
    ) -> StoreResult<Vec<NewOccurrence>>;

    /// The steps run `parent` started, by name.
    async fn steps_of(&self, parent: TaskKey) -> StoreResult<Vec<StepRecord>>;
}

/// A `chain_steps` row: step, on_outcome, status, run_timer_id, run_at, reason, at.
pub(crate) type StepRow = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<String>,
    i64,
);

pub(crate) fn step_record(parent: TaskKey, row: StepRow) -> StoreResult<StepRecord> {
    let (step, on, status, run_timer, run_at, reason, at) = row;
    let run = match (run_timer, run_at) {
        (Some(id), Some(at)) => Some(TaskKey::new(
            TimerId::new(id).map_err(StoreError::corrupt)?,
            Timestamp::from_millis(at),
        )),
        _ => None,
    };
    Ok(StepRecord {
        parent,
        on: ChainOn::parse(&on).ok_or_else(|| StoreError::corrupt(format!("chain on {on}")))?,
        step: TimerName::parse(step).map_err(StoreError::corrupt)?,
        status: StepStatus::parse(&status)
            .ok_or_else(|| StoreError::corrupt(format!("chain step status {status}")))?,
        run,
        reason,
        at: Timestamp::from_millis(at),
    })
}
