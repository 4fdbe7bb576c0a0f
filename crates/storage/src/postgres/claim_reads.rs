//! [`OccurrenceStore::timers_and_first_attempts`](crate::OccurrenceStore::timers_and_first_attempts)
//! on PostgreSQL: a batch's timers and the rows waiting for their first attempt in one
//! statement. Apart, the two reads probed the timers twice per key (once for the timer,
//! once for the row's `timer_now`) and paid a statement each.

use std::collections::HashSet;

use chime_domain::TaskKey;

use super::PgStore;
use super::occurrences::{span, split_keys};
use crate::rows::{self, ChimeRow};
use crate::{StoreResult, TimersAndFirstAttempts};

impl PgStore {
    pub(super) async fn read_timers_and_first_attempts(
        &self,
        keys: &[TaskKey],
    ) -> StoreResult<TimersAndFirstAttempts> {
        if keys.is_empty() {
            return Ok(TimersAndFirstAttempts::default());
        }
        let (ids, run_ats) = split_keys(keys);
        let (from, to) = span(&run_ats);
        // One primary-key probe into each table per key (LATERAL with OFFSET 0 is never
        // flattened into a join, as in `get_timers` and `first_attempts`). The timer's own
        // version is the row's `timer_now`, read in the same snapshot.
        let rows = sqlx::query(concat!(
            "SELECT t.*, t.version AS timer_now, o.* \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             LEFT JOIN LATERAL (SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = k.timer_id AND deleted_at IS NULL OFFSET 0) t ON true \
             LEFT JOIN LATERAL ( \
               SELECT o.timer_id, o.run_at, o.timer_version, o.bucket AS o_bucket, \
                 o.attempt + 1 AS attempt, COALESCE(o.next_attempt_at, o.run_at) AS due, \
                 o.backfill, o.parent \
               FROM occurrences o \
               WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
                 AND o.run_at BETWEEN $3 AND $4 AND o.status = 'pending' \
                 AND (o.backfill IS NULL OR o.backfill = 'allow_all') OFFSET 0) o ON true \
             WHERE t.id IS NOT NULL OR o.timer_id IS NOT NULL"
        ))
        .bind(ids)
        .bind(run_ats)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let mut read = TimersAndFirstAttempts {
            timers: Vec::with_capacity(rows.len()),
            first: Vec::with_capacity(rows.len()),
        };
        let mut seen = HashSet::with_capacity(rows.len());
        for row in &rows {
            // A timer named by several keys is parsed once.
            if let Some(id) = row.opt_i64("id")?
                && seen.insert(id)
            {
                read.timers.push(rows::timer(row)?);
            }
            if row.opt_i64("timer_id")?.is_some() {
                read.first.push(chime_domain::ClaimedOccurrence {
                    leased: true,
                    ..rows::claimed_with_bucket(row, "o_bucket")?
                });
            }
        }
        read.timers.sort_unstable_by_key(|t| t.id);
        Ok(read)
    }
}
