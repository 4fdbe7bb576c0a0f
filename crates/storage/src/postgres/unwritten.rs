//! Unwritten runs on PostgreSQL ([`chime_domain::UnwrittenRun`]): which have no row yet, and
//! their rows inserted once, when they end or are skipped.

use chime_domain::{Outcome, TaskKey};

use super::PgStore;
use crate::{Absent, StoreResult, rows};

/// Inserts a finished run's row. A row there already was written by another attempt: a
/// skip (attempt 0) gives way to a real attempt (the skip raced a delivery under its lease),
/// anything else stays. The conflict is rare, so `DO UPDATE`'s lock on it costs nothing.
const INSERT_ENDED: &str = "INSERT INTO occurrences AS o (timer_id, run_at, timer_version, \
       bucket, status, attempt, fired_at, lateness_ms, http_status, output, error, \
       next_attempt_at) \
     SELECT u.timer_id, u.run_at, u.version, u.bucket, u.status, u.attempt, u.fired_at, \
       u.fired_at - u.run_at, u.http_status, u.output, u.error, u.next_attempt_at \
     FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::integer[], $5::text[], \
       $6::integer[], $7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[]) \
       AS u(timer_id, run_at, version, bucket, status, attempt, fired_at, http_status, output, \
            error, next_attempt_at) \
     ON CONFLICT (timer_id, run_at) DO UPDATE SET timer_version = EXCLUDED.timer_version, \
       status = EXCLUDED.status, attempt = EXCLUDED.attempt, fired_at = EXCLUDED.fired_at, \
       lateness_ms = EXCLUDED.lateness_ms, http_status = EXCLUDED.http_status, \
       output = EXCLUDED.output, error = EXCLUDED.error, \
       next_attempt_at = EXCLUDED.next_attempt_at \
     WHERE o.status = 'skipped' AND o.attempt = 0 AND EXCLUDED.attempt > 0 \
     RETURNING o.timer_id, o.run_at";

impl PgStore {
    /// Those of `keys` without a row, each with its timer's version now. Each key is one
    /// primary-key probe whatever the plan cache decides: a LATERAL subquery with OFFSET 0
    /// is never flattened into a join. As `NOT EXISTS`, the generic plan made while the
    /// day's partition was small hashed a scan of all of it (75 µs per key at 5,000/s).
    /// The run_at range prunes the other day partitions from that plan.
    pub(super) async fn absent_runs(&self, keys: &[TaskKey]) -> StoreResult<Vec<Absent>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = super::occurrences::split_keys(keys);
        let (from, to) = super::occurrences::span(&run_ats);
        let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(
            "SELECT k.timer_id, k.run_at, \
               (SELECT t.version FROM timers t WHERE t.id = k.timer_id AND t.deleted_at IS NULL) \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             LEFT JOIN LATERAL (SELECT 1 AS found FROM occurrences o \
               WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
                 AND o.run_at BETWEEN $3 AND $4 OFFSET 0) r ON true \
             WHERE r.found IS NULL",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows::absent(rows)
    }

    /// Inserts the rows of unwritten runs that ended (`outcomes`, each with its
    /// `unwritten`). Returns the keys written.
    pub(super) async fn insert_ended(&self, outcomes: &[&Outcome]) -> StoreResult<Vec<TaskKey>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let owned: Vec<Outcome> = outcomes.iter().map(|o| (*o).clone()).collect();
        let cols = crate::OutcomeColumns::new(&owned)?;
        let (versions, buckets): (Vec<i64>, Vec<i32>) = outcomes
            .iter()
            .map(|o| {
                o.unwritten
                    .map_or((0, 0), |u| (u.timer_version, u.bucket.get() as i32))
            })
            .unzip();
        let rows = sqlx::query(INSERT_ENDED)
            .bind(cols.timer_ids)
            .bind(cols.run_ats)
            .bind(versions)
            .bind(buckets)
            .bind(cols.statuses)
            .bind(cols.attempts)
            .bind(cols.fired_ats)
            .bind(cols.http_statuses)
            .bind(cols.outputs)
            .bind(cols.errors)
            .bind(cols.next_attempt_ats)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(rows::task_key).collect()
    }
}
