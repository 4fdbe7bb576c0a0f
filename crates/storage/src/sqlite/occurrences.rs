//! [`OccurrenceStore`] on SQLite: batches as JSON arrays through `json_each`.

use async_trait::async_trait;
use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, EarlySkip, NewOccurrence, Occurrence, Outcome, OverlapPolicy,
    Page, StoppedTimer, TaskKey, Timestamp,
};
use serde_json::json;

use super::SqliteStore;
use crate::rows;
use crate::sql;
use crate::{
    Absent, DeadFilter, Exclusive, HotEntry, OccurrenceStore, PageRequest, Redrive, RunFilter,
    StoreResult,
};

/// `OccurrenceStore::drop_pending` for the timers in `$1` ([`sql::stopped_timers_json`]),
/// after `$2`.
const DROP_PENDING: &str = "DELETE FROM occurrences \
     WHERE timer_id IN (SELECT value ->> 0 FROM json_each($1)) AND status = 'pending' \
       AND run_at > $2 \
       AND timer_version <= (SELECT value ->> 1 FROM json_each($1) \
                             WHERE value ->> 0 = occurrences.timer_id) \
     RETURNING timer_id, run_at, COALESCE(next_attempt_at, run_at), bucket";

#[async_trait]
impl OccurrenceStore for SqliteStore {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        insert_new(&self.writer, batch).await
    }

    async fn claim(&self, keys: &[TaskKey], claim: Claim) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "UPDATE occurrences SET status = 'running', attempt = attempt + 1, lease_until = ?3 \
             WHERE (timer_id, run_at) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1)) \
               AND (status IN ('pending', 'retrying') \
                    OR (status = 'running' AND lease_until < ?2)) \
               AND (backfill IS NULL OR backfill = 'allow_all') \
             RETURNING timer_id, run_at, timer_version, bucket, attempt, \
               COALESCE(next_attempt_at, run_at) AS due, backfill, parent, \
               (SELECT t.version FROM timers t WHERE t.id = occurrences.timer_id \
                AND t.deleted_at IS NULL) AS timer_now",
        )
        .bind(keys_json(keys))
        .bind(claim.now.as_millis())
        .bind(claim.lease_until.as_millis())
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn first_attempts(&self, keys: &[TaskKey]) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt + 1 AS attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
            crate::rows::timer_now_col!(),
            " FROM occurrences o \
             WHERE (o.timer_id, o.run_at) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1)) \
               AND o.status = 'pending' AND (o.backfill IS NULL OR o.backfill = 'allow_all')"
        ))
        .bind(keys_json(keys))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::leased).collect()
    }

    async fn held_for_exclusive(
        &self,
        keys: &[TaskKey],
        now: Timestamp,
    ) -> StoreResult<Vec<TaskKey>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = sqlx::query(
            "SELECT timer_id, run_at FROM occurrences \
             WHERE (timer_id, run_at) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1)) \
               AND backfill IS NOT NULL AND backfill <> 'allow_all' \
               AND (status IN ('pending', 'retrying') \
                    OR (status = 'running' AND lease_until < ?2))",
        )
        .bind(keys_json(keys))
        .bind(now.as_millis())
        .fetch_all(&self.writer)
        .await?;
        found.iter().map(rows::task_key).collect()
    }

    async fn claim_exclusive(
        &self,
        key: TaskKey,
        claim: Claim,
        overlap: OverlapPolicy,
    ) -> StoreResult<Exclusive> {
        // One writer connection: its transaction serializes every claimer already.
        let mut tx = self.writer.begin().await?;
        let done = crate::sql::claim_exclusive!(tx, key, claim, overlap, sql::Sqlite);
        tx.commit().await?;
        Ok(done)
    }

    async fn still_running(&self, claims: &[(TaskKey, u32)]) -> StoreResult<Vec<TaskKey>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<_> = claims
            .iter()
            .map(|(k, a)| json!([k.timer_id.get(), k.run_at.as_millis(), a]))
            .collect();
        let found = sqlx::query(
            "SELECT o.timer_id, o.run_at FROM occurrences o \
             JOIN (SELECT value ->> 0 AS timer_id, value ->> 1 AS run_at, value ->> 2 AS attempt \
                   FROM json_each(?1)) k \
               ON o.timer_id = k.timer_id AND o.run_at = k.run_at \
             WHERE o.status = 'running' AND o.attempt = k.attempt",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .fetch_all(&self.reader)
        .await?;
        found.iter().map(rows::task_key).collect()
    }

    async fn backfill(
        &self,
        batch: &[NewOccurrence],
        overlap: OverlapPolicy,
    ) -> StoreResult<Vec<TaskKey>> {
        let batch = crate::dedup_new_occurrences(batch);
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // `WHERE true` lets SQLite parse ON CONFLICT after a SELECT.
        let added = sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at, \
               backfill) \
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, ?2 \
             FROM json_each(?1) WHERE true \
             ON CONFLICT (timer_id, run_at) DO NOTHING RETURNING timer_id, run_at",
        )
        .bind(new_rows_json(&batch))
        .bind(overlap.as_str())
        .fetch_all(&self.writer)
        .await?;
        added.iter().map(rows::task_key).collect()
    }

    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        let (unwritten, outcomes): (Vec<&Outcome>, Vec<&Outcome>) =
            outcomes.iter().partition(|o| o.unwritten.is_some());
        let inserted = self.insert_ended(&unwritten).await?.len() as u64;
        if outcomes.is_empty() {
            return Ok(inserted);
        }
        let outcomes: Vec<Outcome> = outcomes.into_iter().cloned().collect();
        let c = crate::OutcomeColumns::new(&outcomes)?;
        let rows: Vec<_> = (0..outcomes.len())
            .map(|i| {
                json!([
                    c.timer_ids[i],
                    c.run_ats[i],
                    c.attempts[i],
                    c.statuses[i],
                    c.fired_ats[i],
                    c.http_statuses[i],
                    c.outputs[i],
                    c.errors[i],
                    c.next_attempt_ats[i],
                    c.from_statuses[i],
                    c.from_attempts[i]
                ])
            })
            .collect();
        let done = sqlx::query(
            "UPDATE occurrences SET status = u.status, attempt = u.attempt, fired_at = u.fired_at, \
               lateness_ms = u.fired_at - occurrences.run_at, http_status = u.http_status, \
               output = u.output, error = u.error, next_attempt_at = u.next_attempt_at, \
               lease_until = NULL \
             FROM (SELECT value ->> 0 AS timer_id, value ->> 1 AS run_at, value ->> 2 AS attempt, \
                          value ->> 3 AS status, value ->> 4 AS fired_at, \
                          value ->> 5 AS http_status, value ->> 6 AS output, \
                          value ->> 7 AS error, value ->> 8 AS next_attempt_at, \
                          value ->> 9 AS from_status, value ->> 10 AS from_attempt \
                   FROM json_each(?1)) AS u \
             WHERE occurrences.timer_id = u.timer_id AND occurrences.run_at = u.run_at \
               AND occurrences.status = u.from_status \
               AND occurrences.attempt = u.from_attempt",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .execute(&self.writer)
        .await?;
        Ok(inserted + done.rows_affected())
    }

    async fn absent(&self, keys: &[TaskKey]) -> StoreResult<Vec<Absent>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(
            "SELECT k.value ->> 0, k.value ->> 1, \
               (SELECT t.version FROM timers t WHERE t.id = k.value ->> 0 \
                  AND t.deleted_at IS NULL) \
             FROM json_each(?1) k \
             WHERE NOT EXISTS (SELECT 1 FROM occurrences o \
               WHERE o.timer_id = k.value ->> 0 AND o.run_at = k.value ->> 1)",
        )
        .bind(sql::keys_json(keys))
        .fetch_all(&self.reader)
        .await?;
        rows::absent(rows)
    }

    async fn get_occurrence(&self, key: TaskKey) -> StoreResult<Option<Occurrence>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE timer_id = ?1 AND run_at = ?2"
        ))
        .bind(key.timer_id.get())
        .bind(key.run_at.as_millis())
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(rows::occurrence).transpose()
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        sql::list_runs!(&self.reader, filter, page, sql::Sqlite)
    }

    async fn skip_occurrences(&self, keys: &[TaskKey], reason: &str) -> StoreResult<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        let done = sqlx::query(
            "UPDATE occurrences SET status = 'skipped', error = ?2, lease_until = NULL \
             WHERE (timer_id, run_at) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1)) \
               AND status IN ('pending', 'retrying')",
        )
        .bind(keys_json(keys))
        .bind(reason)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    async fn skip_before_claim(&self, runs: &[EarlySkip]) -> StoreResult<Vec<TaskKey>> {
        let written: Vec<Outcome> = runs.iter().filter_map(crate::skipped_row).collect();
        let mut marked = self
            .insert_ended(&written.iter().collect::<Vec<_>>())
            .await?;
        let runs: Vec<EarlySkip> = runs
            .iter()
            .filter(|r| r.unwritten.is_none())
            .cloned()
            .collect();
        if runs.is_empty() {
            return Ok(marked);
        }
        // One writer: no claimer holds a row while this runs.
        let skipped = sqlx::query(
            "UPDATE occurrences SET status = 'skipped', error = r.reason, lease_until = NULL \
             FROM (SELECT value ->> 0 AS timer_id, value ->> 1 AS run_at, value ->> 2 AS version, \
                     value ->> 3 AS due, value ->> 4 AS reason FROM json_each(?1)) AS r \
             WHERE occurrences.timer_id = r.timer_id AND occurrences.run_at = r.run_at \
               AND occurrences.status = 'pending' AND occurrences.attempt = 0 \
               AND (r.due IS NULL AND occurrences.timer_version <= r.version \
                    OR occurrences.backfill IS NULL AND occurrences.timer_version = r.version \
                       AND COALESCE(occurrences.next_attempt_at, occurrences.run_at) = r.due) \
             RETURNING occurrences.timer_id, occurrences.run_at",
        )
        .bind(sql::early_skips_json(&runs))
        .fetch_all(&self.writer)
        .await?;
        for row in &skipped {
            marked.push(rows::task_key(row)?);
        }
        Ok(marked)
    }

    async fn drop_pending(
        &self,
        timers: &[StoppedTimer],
        after: Timestamp,
    ) -> StoreResult<Vec<HotEntry>> {
        if timers.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, i64, i32)> = sqlx::query_as(DROP_PENDING)
            .bind(sql::stopped_timers_json(timers))
            .bind(after.as_millis())
            .fetch_all(&self.writer)
            .await?;
        rows::hot_entries(&rows)
    }

    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        sql::list_dead!(&self.reader, filter, page, sql::Sqlite)
    }

    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        sql::redrive!(&self.writer, what, now, sql::Sqlite)
    }

    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        sql::find_overdue!(&self.reader, due_before, now, limit, sql::Sqlite)
    }

    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        sql::due_in_bucket!(&self.reader, bucket, from, to, limit, sql::Sqlite)
    }
}

fn keys_json(keys: &[TaskKey]) -> String {
    serde_json::Value::Array(
        keys.iter()
            .map(|k| json!([k.timer_id.get(), k.run_at.as_millis()]))
            .collect(),
    )
    .to_string()
}

/// Inserts the occurrences that do not exist yet; a pending row of an older timer version
/// adopts the newer one. On `db`: the writer or a transaction.
pub(super) async fn insert_new<'e, E>(db: E, batch: &[NewOccurrence]) -> StoreResult<u64>
where
    E: sqlx::SqliteExecutor<'e>,
{
    let batch = crate::dedup_new_occurrences(batch);
    if batch.is_empty() {
        return Ok(0);
    }
    // `WHERE true` lets SQLite parse ON CONFLICT after a SELECT.
    let done = sqlx::query(
        "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at) \
         SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 \
         FROM json_each(?1) WHERE true \
         ON CONFLICT (timer_id, run_at) DO UPDATE \
           SET timer_version = excluded.timer_version, bucket = excluded.bucket, \
             next_attempt_at = excluded.next_attempt_at \
           WHERE occurrences.status = 'pending' \
             AND occurrences.timer_version < excluded.timer_version",
    )
    .bind(new_rows_json(&batch))
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// New occurrences as the JSON array of `[timer_id, run_at, version, bucket, due]` rows the
/// inserts read through `json_each`.
fn new_rows_json(batch: &[NewOccurrence]) -> String {
    let rows: Vec<_> = batch
        .iter()
        .map(|o| {
            json!([
                o.key.timer_id.get(),
                o.key.run_at.as_millis(),
                o.timer_version,
                o.bucket.get(),
                o.due.map(Timestamp::as_millis)
            ])
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

impl SqliteStore {
    /// Inserts the rows of unwritten runs that ended; a skip there already gives way to a
    /// real attempt, anything else stays. Returns the keys written.
    async fn insert_ended(&self, outcomes: &[&Outcome]) -> StoreResult<Vec<TaskKey>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        // `WHERE true`: SQLite reads an upsert's ON after a bare SELECT as a join's.
        let rows = sqlx::query(
            "INSERT INTO occurrences AS o (timer_id, run_at, timer_version, bucket, status, \
               attempt, fired_at, lateness_ms, http_status, output, error, next_attempt_at) \
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
               value ->> 5, value ->> 6, (value ->> 6) - (value ->> 1), value ->> 7, \
               value ->> 8, value ->> 9, value ->> 10 \
             FROM json_each(?1) WHERE true \
             ON CONFLICT (timer_id, run_at) DO UPDATE SET timer_version = excluded.timer_version, \
               status = excluded.status, attempt = excluded.attempt, \
               fired_at = excluded.fired_at, lateness_ms = excluded.lateness_ms, \
               http_status = excluded.http_status, output = excluded.output, \
               error = excluded.error, next_attempt_at = excluded.next_attempt_at \
             WHERE o.status = 'skipped' AND o.attempt = 0 AND excluded.attempt > 0 \
             RETURNING timer_id, run_at",
        )
        .bind(sql::ended_rows_json(outcomes)?)
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(rows::task_key).collect()
    }
}
