//! Batch helpers shared by the SQL backends.

use std::collections::HashSet;

use chime_domain::{
    EarlySkip, EarlySkipKind, NewOccurrence, Occurrence, OccurrenceStatus, Outcome, Timestamp,
};

use crate::{StoreError, StoreResult};

/// Drops repeated keys (the last wins): one statement may not touch a row twice.
pub(crate) fn dedup_new_occurrences(batch: &[NewOccurrence]) -> Vec<NewOccurrence> {
    let mut seen = HashSet::with_capacity(batch.len());
    let mut out: Vec<NewOccurrence> = batch
        .iter()
        .rev()
        .filter(|o| seen.insert(o.key))
        .copied()
        .collect();
    out.reverse();
    out
}

/// Outcomes as parallel columns, checked to be statuses an attempt may end in.
pub(crate) struct OutcomeColumns {
    pub timer_ids: Vec<i64>,
    pub run_ats: Vec<i64>,
    pub attempts: Vec<i32>,
    pub statuses: Vec<&'static str>,
    pub fired_ats: Vec<Option<i64>>,
    pub http_statuses: Vec<Option<i32>>,
    pub outputs: Vec<Option<String>>,
    pub errors: Vec<Option<String>>,
    pub next_attempt_ats: Vec<Option<i64>>,
    /// What the row must hold for the outcome to count: `running` at the attempt, or, for
    /// a leased first attempt, `pending` at the attempt before.
    pub from_statuses: Vec<&'static str>,
    pub from_attempts: Vec<i32>,
}

impl OutcomeColumns {
    pub fn new(outcomes: &[Outcome]) -> StoreResult<Self> {
        let n = outcomes.len();
        let mut c = Self {
            timer_ids: Vec::with_capacity(n),
            run_ats: Vec::with_capacity(n),
            attempts: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            fired_ats: Vec::with_capacity(n),
            http_statuses: Vec::with_capacity(n),
            outputs: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            next_attempt_ats: Vec::with_capacity(n),
            from_statuses: Vec::with_capacity(n),
            from_attempts: Vec::with_capacity(n),
        };
        for o in outcomes {
            if !o.status.is_outcome() {
                return Err(StoreError::Invalid(chime_domain::ValidationError::new(
                    "status",
                    format!("an attempt cannot end in status {}", o.status),
                )));
            }
            c.timer_ids.push(o.key.timer_id.get());
            c.run_ats.push(o.key.run_at.as_millis());
            let attempt = i32::try_from(o.attempt).unwrap_or(i32::MAX);
            c.attempts.push(attempt);
            let (from, before) = if o.leased {
                (OccurrenceStatus::Pending, attempt - 1)
            } else {
                (OccurrenceStatus::Running, attempt)
            };
            c.from_statuses.push(from.as_str());
            c.from_attempts.push(before);
            c.statuses.push(o.status.as_str());
            c.fired_ats.push(o.fired_at.map(Timestamp::as_millis));
            c.http_statuses.push(o.http_status.map(i32::from));
            c.outputs.push(o.output.clone());
            c.errors.push(o.error.clone());
            c.next_attempt_ats
                .push(o.next_attempt_at.map(Timestamp::as_millis));
        }
        Ok(c)
    }
}

/// Merges the two halves of an overdue query, oldest due first.
pub(crate) fn oldest_first(mut items: Vec<Occurrence>, limit: u32) -> Vec<Occurrence> {
    items.sort_by_key(|o| match o.status {
        chime_domain::OccurrenceStatus::Running => o.lease_until.unwrap_or(o.key.run_at),
        _ => o.due_at(),
    });
    items.truncate(limit as usize);
    items
}

/// An overtaken unwritten run as the skipped row it is written as (a stopped timer's are
/// only dropped: nothing of them was ever written). `None` for any other run.
pub(crate) fn skipped_row(run: &EarlySkip) -> Option<Outcome> {
    let unwritten = run.unwritten?;
    matches!(run.kind, EarlySkipKind::Overtaken { .. }).then(|| Outcome {
        unwritten: Some(unwritten),
        ..Outcome::ended(
            run.key,
            0,
            OccurrenceStatus::Skipped,
            None,
            Some(run.reason.clone()),
        )
    })
}
