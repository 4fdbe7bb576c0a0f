//! [`TimerStore`] on PostgreSQL. Every write that can make a timer fire stores its first
//! occurrences and watermark in the same transaction.

use async_trait::async_trait;
use chime_domain::{
    AppName, Bucket, BucketCount, Horizon, NewOccurrence, NewTimer, Page, PauseNote, Timer,
    TimerId, TimerSpec, Timestamp,
};
use sqlx::{Postgres, Transaction};

use super::PgStore;
use super::create::insert_timers;
use super::occurrences::insert_new;
use crate::rows::{self, needs_rows_ahead, spec_json};
use crate::sql;
use crate::{
    Behind, CreateTimer, PageRequest, StoreError, StoreResult, TimerFilter, TimerStore, Watermark,
    Written, first_occurrences,
};

impl PgStore {
    /// A timer about to be created: id, bucket, version 1, its first occurrences and
    /// watermark.
    fn new_written(&self, id: TimerId, new: &NewTimer, horizon: Horizon) -> (Written, Timestamp) {
        crate::create_queue::new_written(id, new, self.buckets, self.clock.now(), horizon)
    }

    /// After a change locked `timer` in `tx`: writes its first occurrences from now and its
    /// watermark, if it is enabled.
    async fn materialize_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        timer: &Timer,
        horizon: Horizon,
    ) -> StoreResult<Vec<NewOccurrence>> {
        if !timer.enabled {
            return Ok(Vec::new());
        }
        let (rows, watermark) = first_occurrences(timer, timer.updated_at, horizon);
        if timer.written_ahead {
            insert_new(&mut **tx, &rows).await?;
        }
        sqlx::query("UPDATE timers SET materialized_until = $2 WHERE id = $1")
            .bind(timer.id.get())
            .bind(watermark.as_millis())
            .execute(&mut **tx)
            .await?;
        Ok(rows)
    }
}

#[async_trait]
impl TimerStore for PgStore {
    async fn create_timer(&self, new: NewTimer, horizon: Horizon) -> StoreResult<Written> {
        let id = self
            .next_ids(1)
            .await?
            .pop()
            .ok_or_else(|| StoreError::internal("no timer id reserved"))?;
        let (written, watermark) = self.new_written(id, &new, horizon);
        crate::create_queue::submit(self.create_queue().await, written, watermark).await
    }

    async fn create_timers(
        &self,
        batch: Vec<CreateTimer>,
        horizon: Horizon,
    ) -> StoreResult<Vec<Written>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        sql::create_timers!(
            self,
            batch,
            sql::Postgres,
            |id, req, now| self.new_written(id, &req.timer, horizon),
            |tx, group| insert_timers(&mut *tx, &group)
        )
    }

    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = $1 AND deleted_at IS NULL"
        ))
        .bind(id.get())
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::timer_not_found(id))?;
        rows::timer(&row)
    }

    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        // One primary-key probe per id, whatever the plan cache decides: a LATERAL
        // subquery with OFFSET 0 is never flattened into a join. As a join, the custom plans
        // PostgreSQL makes for a statement's first executions on a connection may hash a
        // scan of the whole table (they did for small timers), and `id = ANY($1)`'s generic
        // plan walked the partial index timers_app_live, every entry of it per call.
        let rows = sqlx::query(concat!(
            "SELECT t.* FROM (SELECT DISTINCT UNNEST($1::bigint[]) AS id) k \
             CROSS JOIN LATERAL (SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = k.id AND deleted_at IS NULL OFFSET 0) t ORDER BY t.id"
        ))
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        rows::timers(&rows)
    }

    async fn count_timers(&self, app: &AppName) -> StoreResult<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE app = $1 AND deleted_at IS NULL")
                .bind(app.as_str())
                .fetch_one(&self.pool)
                .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>> {
        sql::list_timers!(&self.pool, filter, page, sql::Postgres)
    }

    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(concat!(
            "UPDATE timers SET app = $2, name = $3, schedule_kind = $4, spec = $5::json, \
             version = version + 1, updated_at = $6, written_ahead = written_ahead OR $8 \
             WHERE id = $1 AND deleted_at IS NULL AND ($7::bigint IS NULL OR version = $7) \
             RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(spec.app.as_str())
        .bind(spec.name.as_str())
        .bind(spec.schedule.kind_name())
        .bind(spec_json(&spec)?)
        .bind(self.clock.now().as_millis())
        .bind(expected_version)
        .bind(needs_rows_ahead(&spec, self.clock.now()))
        .fetch_optional(&mut *tx)
        .await
        .map_err(rows::name_taken_or(&spec))?;
        let Some(row) = row else {
            drop(tx);
            return match (self.current_version(id).await?, expected_version) {
                (Some(actual), Some(expected)) => {
                    Err(StoreError::VersionConflict { expected, actual })
                }
                _ => Err(StoreError::timer_not_found(id)),
            };
        };
        let timer = rows::timer(&row)?;
        let occurrences = self.materialize_in(&mut tx, &timer, horizon).await?;
        tx.commit().await?;
        Ok(Written { timer, occurrences })
    }

    async fn set_timer_enabled(
        &self,
        id: TimerId,
        enabled: bool,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let update = sqlx::query(concat!(
            "UPDATE timers SET enabled = $2, version = version + 1, updated_at = $3, \
               paused_reason = NULL, paused_by = NULL, \
               paused_at = CASE WHEN $2 THEN NULL ELSE $3 END \
             WHERE id = $1 AND deleted_at IS NULL AND enabled <> $2 RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(enabled)
        .bind(self.clock.now().as_millis());
        // Disabling writes nothing beside the row: one statement, without the round trips of
        // a transaction, which a flood of disables on a loaded database waits on.
        let (row, mut tx) = if enabled {
            let mut tx = self.pool.begin().await?;
            (update.fetch_optional(&mut *tx).await?, Some(tx))
        } else {
            (update.fetch_optional(&self.pool).await?, None)
        };
        let Some(row) = row else {
            // Already in that state (or gone): nothing changed, report what is stored.
            drop(tx);
            return Ok(Written {
                timer: self.get_timer(id).await?,
                occurrences: Vec::new(),
            });
        };
        let timer = rows::timer(&row)?;
        let Some(mut tx) = tx.take() else {
            return Ok(Written {
                timer,
                occurrences: Vec::new(),
            });
        };
        let occurrences = self.materialize_in(&mut tx, &timer, horizon).await?;
        tx.commit().await?;
        Ok(Written { timer, occurrences })
    }

    async fn pause_timer(&self, id: TimerId, note: &PauseNote) -> StoreResult<Timer> {
        sql::pause_timer!(&self.pool, id, note, sql::Postgres)
    }

    async fn remove_finished(&self, ids: &[TimerId], now: Timestamp) -> StoreResult<Vec<TimerId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let removed: Vec<i64> = sqlx::query_scalar(sql::REMOVE_FINISHED_PG)
            .bind(ids)
            .bind(now.as_millis())
            .fetch_all(&self.pool)
            .await?;
        removed.into_iter().map(rows::timer_id).collect()
    }

    async fn delete_timer(&self, id: TimerId) -> StoreResult<()> {
        let done = sqlx::query(
            "UPDATE timers SET deleted_at = $2, updated_at = $2, version = version + 1 \
             WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id.get())
        .bind(self.clock.now().as_millis())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::timer_not_found(id));
        }
        Ok(())
    }

    async fn timers_behind(
        &self,
        bucket: Bucket,
        before: Timestamp,
        after: Option<(Timestamp, TimerId)>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>> {
        let (after_mark, after_id) =
            after.map_or((i64::MIN, 0), |(m, id)| (m.as_millis(), id.get()));
        let rows = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            ", materialized_until FROM timers \
             WHERE bucket = $1 AND enabled AND deleted_at IS NULL \
               AND materialized_until < $2 AND (materialized_until, id) > ($3, $4) \
             ORDER BY materialized_until, id LIMIT $5"
        ))
        .bind(bucket.get() as i32)
        .bind(before.as_millis())
        .bind(after_mark)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::behind).collect()
    }

    async fn unwritten_timers(
        &self,
        bucket: Bucket,
        after: Option<TimerId>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>> {
        sql::unwritten_timers!(&self.pool, bucket, after, limit, sql::Postgres)
    }

    async fn advance_watermarks(&self, marks: &[Watermark]) -> StoreResult<u64> {
        if marks.is_empty() {
            return Ok(0);
        }
        let (mut ids, mut versions, mut untils) = (Vec::new(), Vec::new(), Vec::new());
        for m in marks {
            ids.push(m.id.get());
            versions.push(m.version);
            untils.push(m.until.as_millis());
        }
        let done = sqlx::query(
            "UPDATE timers t SET materialized_until = u.until \
             FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[]) AS u(id, version, until) \
             WHERE t.id = u.id AND t.version = u.version AND t.materialized_until < u.until",
        )
        .bind(ids)
        .bind(versions)
        .bind(untils)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn rebucket(&self, count: BucketCount, limit: u32) -> StoreResult<Vec<Bucket>> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM timers WHERE bucket >= $1 AND deleted_at IS NULL \
             ORDER BY id LIMIT $2 FOR UPDATE",
        )
        .bind(count.get() as i32)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (buckets, touched) = crate::new_buckets(&ids, count)?;
        sqlx::query(
            "UPDATE timers t SET bucket = u.bucket \
             FROM UNNEST($1::bigint[], $2::integer[]) AS u(id, bucket) WHERE t.id = u.id",
        )
        .bind(&ids)
        .bind(&buckets)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE occurrences o SET bucket = u.bucket \
             FROM UNNEST($1::bigint[], $2::integer[]) AS u(id, bucket) \
             WHERE o.timer_id = u.id AND o.status IN ('pending', 'retrying')",
        )
        .bind(&ids)
        .bind(&buckets)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(touched)
    }
}
