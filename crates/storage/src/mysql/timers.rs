//! [`TimerStore`] on MySQL. Every write that can make a timer fire stores its first
//! occurrences and watermark in the same transaction; a write's row is read back inside it
//! (no `UPDATE … RETURNING` in MySQL).

use async_trait::async_trait;
use chime_domain::{
    AppName, Bucket, BucketCount, Horizon, NewOccurrence, NewTimer, Page, PauseNote, Timer,
    TimerId, TimerSpec, Timestamp,
};
use serde_json::json;
use sqlx::MySqlConnection;

use super::create::insert_timers;
use super::dialect::{MySql as Dialect, finish_ms};
use super::occurrences::insert_new;
use super::{MySqlStore, json_rows};
use crate::create_queue::new_written;
use crate::rows::{self, spec_json};
use crate::sql;
use crate::{
    Behind, CreateTimer, PageRequest, StoreError, StoreResult, TimerFilter, TimerStore, Watermark,
    Written, first_occurrences,
};

/// Timer `id` if live, read inside the caller's transaction (after its write).
async fn live_timer(conn: &mut MySqlConnection, id: TimerId) -> StoreResult<Option<Timer>> {
    let row = sqlx::query(<Dialect as sql::Dialect>::LIVE_TIMER)
        .bind(id.get())
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(rows::timer).transpose()
}

impl MySqlStore {
    /// After a change to `timer` in `tx`: its first occurrences from now and its watermark,
    /// if it is enabled.
    async fn materialize_in(
        &self,
        conn: &mut MySqlConnection,
        timer: &Timer,
        horizon: Horizon,
    ) -> StoreResult<Vec<NewOccurrence>> {
        if !timer.enabled {
            return Ok(Vec::new());
        }
        let (rows, watermark) = first_occurrences(timer, timer.updated_at, horizon);
        if timer.written_ahead {
            insert_new(&mut *conn, &rows).await?;
        }
        sqlx::query("UPDATE timers SET materialized_until = ? WHERE id = ?")
            .bind(watermark.as_millis())
            .bind(timer.id.get())
            .execute(&mut *conn)
            .await?;
        Ok(rows)
    }

    /// Ids as the JSON array of a `JSON_TABLE` parameter.
    fn ids_json(ids: &[TimerId]) -> String {
        json_rows(ids.iter().map(|id| json!(id.get())))
    }
}

#[async_trait]
impl TimerStore for MySqlStore {
    async fn create_timer(&self, new: NewTimer, horizon: Horizon) -> StoreResult<Written> {
        let id = self.next_ids(1).await?.pop();
        let id = id.ok_or_else(|| StoreError::internal("no timer id reserved"))?;
        let (written, watermark) = new_written(id, &new, self.buckets, self.clock.now(), horizon);
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
            Dialect,
            |id, req, now| new_written(id, &req.timer, self.buckets, now, horizon),
            |tx, group| insert_timers(&mut tx, &group)
        )
    }

    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer> {
        let mut conn = self.pool.acquire().await?;
        live_timer(&mut conn, id)
            .await?
            .ok_or_else(|| StoreError::timer_not_found(id))
    }

    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = ids.to_vec();
        ids.sort();
        ids.dedup();
        let rows = sqlx::query(
            "SELECT t.id, t.app, t.name, t.spec, t.enabled, t.version, t.bucket, \
               t.created_at, t.updated_at, t.deleted_at, t.paused_reason, t.paused_at, \
               t.paused_by, t.written_ahead \
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
             STRAIGHT_JOIN timers t ON t.id = k.id \
             WHERE t.deleted_at IS NULL ORDER BY t.id",
        )
        .bind(Self::ids_json(&ids))
        .fetch_all(&self.pool)
        .await?;
        rows::timers(&rows)
    }

    async fn count_timers(&self, app: &AppName) -> StoreResult<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE app = ? AND deleted_at IS NULL")
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
        sql::list_timers!(&self.pool, filter, page, Dialect)
    }

    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE timers SET app = ?, name = ?, schedule_kind = ?, spec = ?, \
             version = version + 1, updated_at = ?, written_ahead = written_ahead OR ? \
             WHERE id = ? AND deleted_at IS NULL AND (? IS NULL OR version = ?)",
        )
        .bind(spec.app.as_str())
        .bind(spec.name.as_str())
        .bind(spec.schedule.kind_name())
        .bind(spec_json(&spec)?)
        .bind(self.clock.now().as_millis())
        .bind(crate::rows::needs_rows_ahead(&spec, self.clock.now()))
        .bind(id.get())
        .bind(expected_version)
        .bind(expected_version)
        .execute(&mut *tx)
        .await
        .map_err(rows::name_taken_or(&spec))?
        .rows_affected();
        let current = live_timer(&mut tx, id).await?;
        match (updated, current) {
            (1, Some(timer)) => {
                let occurrences = self.materialize_in(&mut tx, &timer, horizon).await?;
                tx.commit().await?;
                Ok(Written { timer, occurrences })
            }
            (_, Some(t)) if expected_version.is_some() => Err(StoreError::VersionConflict {
                expected: expected_version.unwrap_or_default(),
                actual: t.version,
            }),
            _ => Err(StoreError::timer_not_found(id)),
        }
    }

    async fn set_timer_enabled(
        &self,
        id: TimerId,
        enabled: bool,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let mut tx = self.pool.begin().await?;
        let now = self.clock.now().as_millis();
        let changed = sqlx::query(
            "UPDATE timers SET enabled = ?, version = version + 1, updated_at = ?, \
               paused_reason = NULL, paused_by = NULL, paused_at = ? \
             WHERE id = ? AND deleted_at IS NULL AND enabled <> ?",
        )
        .bind(enabled)
        .bind(now)
        .bind((!enabled).then_some(now))
        .bind(id.get())
        .bind(enabled)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let timer = live_timer(&mut tx, id)
            .await?
            .ok_or_else(|| StoreError::timer_not_found(id))?;
        // Already in that state: nothing changed, report what is stored.
        let occurrences = if changed == 1 {
            self.materialize_in(&mut tx, &timer, horizon).await?
        } else {
            Vec::new()
        };
        tx.commit().await?;
        Ok(Written { timer, occurrences })
    }

    async fn pause_timer(&self, id: TimerId, note: &PauseNote) -> StoreResult<Timer> {
        sql::pause_timer!(&self.pool, id, note, Dialect)
    }

    async fn remove_finished(&self, ids: &[TimerId], now: Timestamp) -> StoreResult<Vec<TimerId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        let done: Vec<i64> = sqlx::query_scalar(concat!(
            "SELECT t.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
             STRAIGHT_JOIN timers t ON t.id = k.id \
             WHERE t.deleted_at IS NULL AND JSON_VALUE(t.spec, '$.on_complete') = 'delete' \
               AND ",
            finish_ms!(),
            " <= ? AND NOT EXISTS (SELECT 1 FROM occurrences o WHERE o.timer_id = t.id \
               AND o.status IN ('pending', 'running', 'retrying')) \
             FOR UPDATE"
        ))
        .bind(Self::ids_json(ids))
        .bind(now.as_millis())
        .fetch_all(&mut *tx)
        .await?;
        let done: Vec<TimerId> = done
            .into_iter()
            .map(rows::timer_id)
            .collect::<StoreResult<_>>()?;
        if !done.is_empty() {
            sqlx::query(
                "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
                 STRAIGHT_JOIN timers t ON t.id = k.id \
                 SET t.deleted_at = ?, t.updated_at = ?, t.version = t.version + 1",
            )
            .bind(Self::ids_json(&done))
            .bind(now.as_millis())
            .bind(now.as_millis())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    async fn delete_timer(&self, id: TimerId) -> StoreResult<()> {
        let now = self.clock.now().as_millis();
        let done = sqlx::query(
            "UPDATE timers SET deleted_at = ?, updated_at = ?, version = version + 1 \
             WHERE id = ? AND deleted_at IS NULL",
        )
        .bind(now)
        .bind(now)
        .bind(id.get())
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
             WHERE bucket = ? AND enabled AND deleted_at IS NULL \
               AND materialized_until < ? AND (materialized_until, id) > (?, ?) \
             ORDER BY materialized_until, id LIMIT ?"
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
        sql::unwritten_timers!(&self.pool, bucket, after, limit, Dialect)
    }

    async fn advance_watermarks(&self, marks: &[Watermark]) -> StoreResult<u64> {
        if marks.is_empty() {
            return Ok(0);
        }
        let marks = json_rows(
            marks
                .iter()
                .map(|m| json!([m.id.get(), m.version, m.until.as_millis()])),
        );
        let done = sqlx::query(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', \
               version BIGINT PATH '$[1]', until BIGINT PATH '$[2]')) u \
             STRAIGHT_JOIN timers t ON t.id = u.id \
             SET t.materialized_until = u.until \
             WHERE t.version = u.version AND t.materialized_until < u.until",
        )
        .bind(marks)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn rebucket(&self, count: BucketCount, limit: u32) -> StoreResult<Vec<Bucket>> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM timers WHERE bucket >= ? AND deleted_at IS NULL \
             ORDER BY id LIMIT ? FOR UPDATE",
        )
        .bind(count.get() as i32)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (buckets, touched) = crate::new_buckets(&ids, count)?;
        let moves = json_rows(ids.iter().zip(&buckets).map(|(id, b)| json!([id, b])));
        sqlx::query(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', \
               bucket INT PATH '$[1]')) u STRAIGHT_JOIN timers t ON t.id = u.id \
             SET t.bucket = u.bucket",
        )
        .bind(&moves)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', \
               bucket INT PATH '$[1]')) u \
             STRAIGHT_JOIN occurrences o FORCE INDEX (PRIMARY) ON o.timer_id = u.id \
             SET o.bucket = u.bucket WHERE o.status IN ('pending', 'retrying')",
        )
        .bind(&moves)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(touched)
    }
}
