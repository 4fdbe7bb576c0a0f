//! [`TimerStore`] on SQLite. Every write that can make a timer fire stores its first
//! occurrences and watermark in the same transaction.

use async_trait::async_trait;
use chime_domain::{
    AppName, Bucket, BucketCount, Horizon, NewTimer, Page, PauseNote, Timer, TimerId, TimerSpec,
    Timestamp,
};
use serde_json::json;

use super::SqliteStore;
use crate::rows::{self, spec_json};
use crate::sql;
use crate::{
    Behind, CreateTimer, PageRequest, StoreError, StoreResult, TimerFilter, TimerStore, Watermark,
    Written,
};

#[async_trait]
impl TimerStore for SqliteStore {
    async fn create_timer(&self, new: NewTimer, horizon: Horizon) -> StoreResult<Written> {
        let mut tx = self.writer.begin().await?;
        let id = self.reserve_ids(&mut tx, 1).await?.pop();
        let id = id.ok_or_else(|| StoreError::internal("no timer id reserved"))?;
        let written = self.insert_timer(&mut tx, id, &new, horizon).await?;
        tx.commit().await?;
        Ok(written)
    }

    async fn create_timers(
        &self,
        batch: Vec<CreateTimer>,
        horizon: Horizon,
    ) -> StoreResult<Vec<Written>> {
        let mut tx = self.writer.begin().await?;
        let ids = self.reserve_ids(&mut tx, batch.len()).await?;
        let now = self.clock.now();
        let mut created = Vec::with_capacity(batch.len());
        for (req, id) in batch.iter().zip(ids) {
            let written = match sql::claim_idempotency_key!(tx, req, id, now, sql::Sqlite) {
                Some(original) => original,
                None => self.insert_timer(&mut tx, id, &req.timer, horizon).await?,
            };
            created.push(written);
        }
        tx.commit().await?;
        Ok(created)
    }

    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = ?1 AND deleted_at IS NULL"
        ))
        .bind(id.get())
        .fetch_optional(&self.reader)
        .await?
        .ok_or_else(|| StoreError::timer_not_found(id))?;
        rows::timer(&row)
    }

    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let ids = serde_json::to_string(&ids)
            .map_err(|e| StoreError::internal(format!("encoding timer ids: {e}")))?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE id IN (SELECT value FROM json_each(?1)) \
              AND deleted_at IS NULL ORDER BY id"
        ))
        .bind(ids)
        .fetch_all(&self.reader)
        .await?;
        rows::timers(&rows)
    }

    async fn count_timers(&self, app: &AppName) -> StoreResult<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE app = ?1 AND deleted_at IS NULL")
                .bind(app.as_str())
                .fetch_one(&self.reader)
                .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>> {
        sql::list_timers!(&self.reader, filter, page, sql::Sqlite)
    }

    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(concat!(
            "UPDATE timers SET app = ?2, name = ?3, schedule_kind = ?4, spec = ?5, \
             version = version + 1, updated_at = ?6, written_ahead = written_ahead OR ?8 \
             WHERE id = ?1 AND deleted_at IS NULL AND (?7 IS NULL OR version = ?7) RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(spec.app.as_str())
        .bind(spec.name.as_str())
        .bind(spec.schedule.kind_name())
        .bind(spec_json(&spec)?)
        .bind(self.clock.now().as_millis())
        .bind(expected_version)
        .bind(rows::needs_rows_ahead(&spec, self.clock.now()))
        .fetch_optional(&mut *tx)
        .await
        .map_err(rows::name_taken_or(&spec))?;
        if let Some(row) = row {
            let timer = rows::timer(&row)?;
            let occurrences = self.materialize_in(&mut tx, &timer, horizon).await?;
            tx.commit().await?;
            return Ok(Written { timer, occurrences });
        }
        let actual: Option<i64> =
            sqlx::query_scalar("SELECT version FROM timers WHERE id = ?1 AND deleted_at IS NULL")
                .bind(id.get())
                .fetch_optional(&mut *tx)
                .await?;
        match (actual, expected_version) {
            (Some(actual), Some(expected)) => Err(StoreError::VersionConflict { expected, actual }),
            _ => Err(StoreError::timer_not_found(id)),
        }
    }

    async fn set_timer_enabled(
        &self,
        id: TimerId,
        enabled: bool,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(concat!(
            "UPDATE timers SET enabled = ?2, version = version + 1, updated_at = ?3, \
               paused_reason = NULL, paused_by = NULL, \
               paused_at = CASE WHEN ?2 THEN NULL ELSE ?3 END \
             WHERE id = ?1 AND deleted_at IS NULL AND enabled <> ?2 RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(enabled)
        .bind(self.clock.now().as_millis())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            drop(tx);
            return Ok(Written {
                timer: self.get_timer(id).await?,
                occurrences: Vec::new(),
            });
        };
        let timer = rows::timer(&row)?;
        let occurrences = self.materialize_in(&mut tx, &timer, horizon).await?;
        tx.commit().await?;
        Ok(Written { timer, occurrences })
    }

    async fn pause_timer(&self, id: TimerId, note: &PauseNote) -> StoreResult<Timer> {
        sql::pause_timer!(&self.writer, id, note, sql::Sqlite)
    }

    async fn remove_finished(&self, ids: &[TimerId], now: Timestamp) -> StoreResult<Vec<TimerId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let ids = serde_json::to_string(&ids)
            .map_err(|e| StoreError::internal(format!("encoding ids: {e}")))?;
        let removed: Vec<i64> = sqlx::query_scalar(sql::REMOVE_FINISHED_SQLITE)
            .bind(ids)
            .bind(now.as_millis())
            .fetch_all(&self.writer)
            .await?;
        removed.into_iter().map(rows::timer_id).collect()
    }

    async fn delete_timer(&self, id: TimerId) -> StoreResult<()> {
        let done = sqlx::query(
            "UPDATE timers SET deleted_at = ?2, updated_at = ?2, version = version + 1 \
             WHERE id = ?1 AND deleted_at IS NULL",
        )
        .bind(id.get())
        .bind(self.clock.now().as_millis())
        .execute(&self.writer)
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
             WHERE bucket = ?1 AND enabled = 1 AND deleted_at IS NULL \
               AND materialized_until < ?2 AND (materialized_until, id) > (?3, ?4) \
             ORDER BY materialized_until, id LIMIT ?5"
        ))
        .bind(bucket.get() as i32)
        .bind(before.as_millis())
        .bind(after_mark)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::behind).collect()
    }

    async fn unwritten_timers(
        &self,
        bucket: Bucket,
        after: Option<TimerId>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>> {
        sql::unwritten_timers!(&self.reader, bucket, after, limit, sql::Sqlite)
    }

    async fn advance_watermarks(&self, marks: &[Watermark]) -> StoreResult<u64> {
        if marks.is_empty() {
            return Ok(0);
        }
        let marks: Vec<_> = marks
            .iter()
            .map(|m| json!([m.id.get(), m.version, m.until.as_millis()]))
            .collect();
        let done = sqlx::query(
            "UPDATE timers SET materialized_until = u.until \
             FROM (SELECT value ->> 0 AS id, value ->> 1 AS version, value ->> 2 AS until \
                   FROM json_each(?1)) AS u \
             WHERE timers.id = u.id AND timers.version = u.version \
               AND timers.materialized_until < u.until",
        )
        .bind(serde_json::Value::Array(marks).to_string())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    async fn rebucket(&self, count: BucketCount, limit: u32) -> StoreResult<Vec<Bucket>> {
        let mut tx = self.writer.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM timers WHERE bucket >= ?1 AND deleted_at IS NULL ORDER BY id LIMIT ?2",
        )
        .bind(count.get() as i32)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (buckets, touched) = crate::new_buckets(&ids, count)?;
        let moves: Vec<_> = ids
            .iter()
            .zip(&buckets)
            .map(|(id, b)| json!([id, b]))
            .collect();
        let moves = serde_json::Value::Array(moves).to_string();
        sqlx::query(
            "UPDATE timers SET bucket = u.bucket \
             FROM (SELECT value ->> 0 AS id, value ->> 1 AS bucket FROM json_each(?1)) AS u \
             WHERE timers.id = u.id",
        )
        .bind(&moves)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE occurrences SET bucket = u.bucket \
             FROM (SELECT value ->> 0 AS id, value ->> 1 AS bucket FROM json_each(?1)) AS u \
             WHERE occurrences.timer_id = u.id AND occurrences.status IN ('pending', 'retrying')",
        )
        .bind(&moves)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(touched)
    }
}
