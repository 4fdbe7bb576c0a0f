//! SQLite backend for [`TimerStore`] and [`OccurrenceStore`]: the embedded store of
//! `chime dev`. All writes go through one connection (SQLite allows one writer at a time, and
//! queueing in the pool beats spinning on SQLITE_BUSY); reads use a small pool beside it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Claim, ClaimedOccurrence, Clock, NewOccurrence, NewTimer, Occurrence,
    Outcome, Page, TaskKey, Timer, TimerId, TimerSpec, Timestamp,
};
use serde_json::json;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::migrate::{SchemaStatus, applied_versions_or_none, compare, sqlite_migrator};
use crate::rows::{self, spec_json, timer_not_found};
use crate::{
    CreateTimer, DeadFilter, OccurrenceStore, PageRequest, Redrive, RunFilter, StoreError,
    StoreResult, TimerFilter, TimerStore, decode_page_token, into_page,
};

macro_rules! timer_cols {
    () => {
        "id, app, name, spec, enabled, version, bucket, created_at, updated_at, deleted_at"
    };
}

#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    clock: Arc<dyn Clock>,
    buckets: BucketCount,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url`: `sqlite://path/to/file.db`, or
    /// `sqlite::memory:` for a private in-memory database that lives as long as the store.
    pub async fn open(url: &str, clock: Arc<dyn Clock>, buckets: BucketCount) -> StoreResult<Self> {
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Internal(format!("invalid SQLite URL {url:?}: {e}")))?
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            // An in-memory database vanishes with its last connection: keep this one.
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await?;
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(options.read_only(true))
                .await?
        };
        Ok(Self {
            writer,
            reader,
            clock,
            buckets,
        })
    }

    /// Applies pending migrations; a no-op when current.
    pub async fn migrate(&self) -> StoreResult<()> {
        sqlite_migrator().run(&self.writer).await?;
        Ok(())
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        let applied = sqlx::query_scalar::<_, i64>(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.reader)
        .await;
        Ok(compare(
            &sqlite_migrator(),
            &applied_versions_or_none(applied)?,
        ))
    }

    /// Inserts one timer inside a write transaction; the bucket derives from the id, which
    /// SQLite assigns on insert.
    async fn insert_timer(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        new: &NewTimer,
    ) -> StoreResult<Timer> {
        let now = self.clock.now().as_millis();
        let inserted = sqlx::query(
            "INSERT INTO timers (app, name, schedule_kind, spec, enabled, version, bucket, \
             created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, 1, 0, ?6, ?6) RETURNING id",
        )
        .bind(new.spec.app.as_str())
        .bind(new.spec.name.as_str())
        .bind(new.spec.schedule.kind_name())
        .bind(spec_json(&new.spec)?)
        .bind(new.enabled)
        .bind(now)
        .fetch_one(&mut **tx)
        .await
        .map_err(rows::name_taken_or(&new.spec))?;
        let id = rows::timer_id(inserted.try_get("id")?)?;
        let timer = rows::new_timer_row(id, new, self.buckets, Timestamp::from_millis(now));
        sqlx::query("UPDATE timers SET bucket = ?2 WHERE id = ?1")
            .bind(id.get())
            .bind(timer.bucket.get() as i32)
            .execute(&mut **tx)
            .await?;
        Ok(timer)
    }

    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

#[async_trait]
impl TimerStore for SqliteStore {
    async fn create_timer(&self, new: NewTimer) -> StoreResult<Timer> {
        let mut tx = self.writer.begin().await?;
        let timer = self.insert_timer(&mut tx, &new).await?;
        tx.commit().await?;
        Ok(timer)
    }

    async fn create_timers(&self, batch: Vec<CreateTimer>) -> StoreResult<Vec<Timer>> {
        let mut tx = self.writer.begin().await?;
        let mut created = Vec::with_capacity(batch.len());
        for req in &batch {
            if let Some(idem) = &req.idempotency {
                let seen: Option<(String, i64)> = sqlx::query_as(
                    "SELECT fingerprint, timer_id FROM idempotency_keys WHERE app = ?1 AND key = ?2",
                )
                .bind(req.timer.spec.app.as_str())
                .bind(&idem.key)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some((fingerprint, original)) = seen {
                    rows::check_fingerprint(idem, &fingerprint)?;
                    let row = sqlx::query(concat!(
                        "SELECT ",
                        timer_cols!(),
                        " FROM timers WHERE id = ?1"
                    ))
                    .bind(original)
                    .fetch_one(&mut *tx)
                    .await?;
                    created.push(rows::timer(&row)?);
                    continue;
                }
            }
            let timer = self.insert_timer(&mut tx, &req.timer).await?;
            if let Some(idem) = &req.idempotency {
                sqlx::query(
                    "INSERT INTO idempotency_keys (app, key, fingerprint, timer_id, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .bind(timer.spec.app.as_str())
                .bind(&idem.key)
                .bind(&idem.fingerprint)
                .bind(timer.id.get())
                .bind(timer.created_at.as_millis())
                .execute(&mut *tx)
                .await?;
            }
            created.push(timer);
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
        .ok_or_else(|| timer_not_found(id))?;
        rows::timer(&row)
    }

    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let ids = serde_json::to_string(&ids)
            .map_err(|e| StoreError::Internal(format!("encoding timer ids: {e}")))?;
        sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE id IN (SELECT value FROM json_each(?1)) \
              AND deleted_at IS NULL ORDER BY id"
        ))
        .bind(ids)
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(rows::timer)
        .collect()
    }

    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>> {
        let scope = filter.scope();
        let after = decode_page_token(page, &scope)?.map_or(0, |(id, _)| id);
        let rows = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE deleted_at IS NULL \
              AND (?1 IS NULL OR app = ?1) AND (?2 IS NULL OR enabled = ?2) \
              AND (?3 IS NULL OR bucket = ?3) AND id > ?4 ORDER BY id LIMIT ?5"
        ))
        .bind(filter.app.as_ref().map(|a| a.as_str()))
        .bind(filter.enabled)
        .bind(filter.bucket.map(|b| b.get() as i32))
        .bind(after)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.reader)
        .await?;
        let items = rows::timers(&rows)?;
        Ok(into_page(items, page.size, &scope, |t| (t.id.get(), 0)))
    }

    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
    ) -> StoreResult<Timer> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(concat!(
            "UPDATE timers SET app = ?2, name = ?3, schedule_kind = ?4, spec = ?5, \
             version = version + 1, updated_at = ?6 \
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
        .fetch_optional(&mut *tx)
        .await
        .map_err(rows::name_taken_or(&spec))?;
        if let Some(row) = row {
            let timer = rows::timer(&row)?;
            tx.commit().await?;
            return Ok(timer);
        }
        let actual: Option<i64> =
            sqlx::query_scalar("SELECT version FROM timers WHERE id = ?1 AND deleted_at IS NULL")
                .bind(id.get())
                .fetch_optional(&mut *tx)
                .await?;
        match (actual, expected_version) {
            (Some(actual), Some(expected)) => Err(StoreError::VersionConflict { expected, actual }),
            _ => Err(timer_not_found(id)),
        }
    }

    async fn set_timer_enabled(&self, id: TimerId, enabled: bool) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "UPDATE timers SET enabled = ?2, version = version + 1, updated_at = ?3 \
             WHERE id = ?1 AND deleted_at IS NULL AND enabled <> ?2 RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(enabled)
        .bind(self.clock.now().as_millis())
        .fetch_optional(&self.writer)
        .await?;
        match row {
            Some(row) => rows::timer(&row),
            None => self.get_timer(id).await,
        }
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
            return Err(timer_not_found(id));
        }
        Ok(())
    }
}

#[async_trait]
impl OccurrenceStore for SqliteStore {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        let batch = crate::dedup_new_occurrences(batch);
        if batch.is_empty() {
            return Ok(0);
        }
        let rows: Vec<_> = batch
            .iter()
            .map(|o| {
                json!([
                    o.key.timer_id.get(),
                    o.key.run_at.as_millis(),
                    o.timer_version,
                    o.bucket.get()
                ])
            })
            .collect();
        // `WHERE true` lets SQLite parse ON CONFLICT after a SELECT.
        let done = sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?1) WHERE true \
             ON CONFLICT (timer_id, run_at) DO UPDATE \
               SET timer_version = excluded.timer_version, bucket = excluded.bucket \
               WHERE occurrences.status = 'pending' \
                 AND occurrences.timer_version < excluded.timer_version",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
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
             RETURNING timer_id, run_at, timer_version, bucket, attempt, \
               COALESCE(next_attempt_at, run_at) AS due",
        )
        .bind(keys_json(keys))
        .bind(claim.now.as_millis())
        .bind(claim.lease_until.as_millis())
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        if outcomes.is_empty() {
            return Ok(0);
        }
        let c = crate::OutcomeColumns::new(outcomes)?;
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
                    c.next_attempt_ats[i]
                ])
            })
            .collect();
        let done = sqlx::query(
            "UPDATE occurrences SET status = u.status, fired_at = u.fired_at, \
               lateness_ms = u.fired_at - occurrences.run_at, http_status = u.http_status, \
               output = u.output, error = u.error, next_attempt_at = u.next_attempt_at, \
               lease_until = NULL \
             FROM (SELECT value ->> 0 AS timer_id, value ->> 1 AS run_at, value ->> 2 AS attempt, \
                          value ->> 3 AS status, value ->> 4 AS fired_at, \
                          value ->> 5 AS http_status, value ->> 6 AS output, \
                          value ->> 7 AS error, value ->> 8 AS next_attempt_at \
                   FROM json_each(?1)) AS u \
             WHERE occurrences.timer_id = u.timer_id AND occurrences.run_at = u.run_at \
               AND occurrences.status = 'running' AND occurrences.attempt = u.attempt",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
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
        let scope = filter.scope();
        let before = filter.before(decode_page_token(page, &scope)?);
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE timer_id = ?1 AND (?2 IS NULL OR status = ?2) \
              AND run_at < ?3 ORDER BY run_at DESC LIMIT ?4"
        ))
        .bind(filter.timer_id.get())
        .bind(filter.status.map(|s| s.as_str()))
        .bind(before)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.reader)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(into_page(items, page.size, &scope, |o| {
            (o.key.run_at.as_millis(), 0)
        }))
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

    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        let scope = filter.scope();
        let (after_id, after_run) = decode_page_token(page, &scope)?.unwrap_or((0, i64::MIN));
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status = 'dead' \
               AND (?1 IS NULL OR timer_id = ?1) \
               AND (?2 IS NULL OR timer_id IN (SELECT id FROM timers WHERE app = ?2)) \
               AND (timer_id, run_at) > (?3, ?4) \
             ORDER BY timer_id, run_at LIMIT ?5"
        ))
        .bind(filter.timer_id.map(|t| t.get()))
        .bind(filter.app.as_ref().map(chime_domain::AppName::as_str))
        .bind(after_id)
        .bind(after_run)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.reader)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(into_page(items, page.size, &scope, |o| {
            (o.key.timer_id.get(), o.key.run_at.as_millis())
        }))
    }

    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        let (timer, run_at) = what.parts();
        let done = sqlx::query(
            "UPDATE occurrences SET status = 'pending', attempt = 0, next_attempt_at = ?3, \
               lease_until = NULL, error = NULL \
             WHERE status = 'dead' AND timer_id = ?1 AND (?2 IS NULL OR run_at = ?2)",
        )
        .bind(timer)
        .bind(run_at)
        .bind(now.as_millis())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        let rows = sqlx::query(concat!(
            "SELECT * FROM (SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status IN ('pending', 'retrying') \
               AND COALESCE(next_attempt_at, run_at) < ?1 \
               ORDER BY COALESCE(next_attempt_at, run_at) LIMIT ?3) \
             UNION ALL SELECT * FROM (SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status = 'running' AND lease_until < ?2 \
               ORDER BY lease_until LIMIT ?3)"
        ))
        .bind(due_before.as_millis())
        .bind(now.as_millis())
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(crate::oldest_first(items, limit))
    }

    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        let rows = sqlx::query(
            "SELECT timer_id, run_at, COALESCE(next_attempt_at, run_at) AS due FROM occurrences \
             WHERE status IN ('pending', 'retrying') AND bucket = ?1 \
               AND COALESCE(next_attempt_at, run_at) >= ?2 \
               AND COALESCE(next_attempt_at, run_at) < ?3 \
             ORDER BY due LIMIT ?4",
        )
        .bind(bucket.get() as i32)
        .bind(from.as_millis())
        .bind(to.as_millis())
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::due_pair).collect()
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
