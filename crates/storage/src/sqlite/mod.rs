//! SQLite backend for [`TimerStore`] and [`OccurrenceStore`]: the embedded store of
//! `chime dev`. All writes go through one connection (SQLite allows one writer at a time, and
//! queueing in the pool beats spinning on SQLITE_BUSY); reads use a small pool beside it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    BucketCount, Clock, Horizon, NewOccurrence, NewTimer, Timer, TimerId, ValidationError,
};
use sqlx::ConnectOptions;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};

use crate::migrate::{SchemaStatus, applied_versions_or_none, compare, sqlite_migrator};
use crate::rows::{self, spec_json};
use crate::{StoreError, StoreResult, Written, first_occurrences};
use occurrences::insert_new;

macro_rules! timer_cols {
    () => {
        "id, app, name, spec, enabled, version, bucket, created_at, updated_at, deleted_at, \
         paused_reason, paused_at, paused_by, written_ahead"
    };
}

mod activity;
mod calendars;
mod chains;
mod credentials;
mod notifications;
mod occurrences;
mod retention;
mod shards;
mod timers;

#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    clock: Arc<dyn Clock>,
    buckets: BucketCount,
    /// In memory: a connection of the store's own, never used. The database lives while any
    /// connection to it is open, and the pool may close and reopen its one (a query
    /// cancelled mid-way, a failed health check): without this, that emptied the database.
    _anchor: Option<Arc<std::sync::Mutex<SqliteConnection>>>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url`: `sqlite://path/to/file.db`, or
    /// `sqlite::memory:` for a private in-memory database that lives as long as the store.
    pub async fn open(url: &str, clock: Arc<dyn Clock>, buckets: BucketCount) -> StoreResult<Self> {
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Invalid(ValidationError::new("database.url", e)))?
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let anchor = match in_memory {
            true => Some(Arc::new(std::sync::Mutex::new(options.connect().await?))),
            false => None,
        };
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
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
            _anchor: anchor,
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

    /// Reserves `n` timer ids inside a write transaction, the way PostgreSQL's sequence
    /// hands them out: the idempotency key of a create is claimed for its id before the
    /// timer is written, on every backend. Moves the AUTOINCREMENT counter, so ids are never
    /// reused and rows written without an id still get fresh ones.
    async fn reserve_ids(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        n: usize,
    ) -> StoreResult<Vec<TimerId>> {
        // The counter's row appears with the table's first insert; start it if missing.
        sqlx::query(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'timers', 0 \
             WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'timers')",
        )
        .execute(&mut **tx)
        .await?;
        let last: i64 = sqlx::query_scalar(
            "UPDATE sqlite_sequence SET seq = seq + ?1 WHERE name = 'timers' RETURNING seq",
        )
        .bind(n as i64)
        .fetch_one(&mut **tx)
        .await?;
        (last - n as i64 + 1..=last).map(rows::timer_id).collect()
    }

    /// Inserts timer `id` inside a write transaction, with its first occurrences and
    /// watermark.
    async fn insert_timer(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        id: TimerId,
        new: &NewTimer,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        let now = self.clock.now();
        let timer = rows::new_timer_row(id, new, self.buckets, now);
        let (occurrences, watermark) = first_occurrences(&timer, timer.created_at, horizon);
        sqlx::query(
            "INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
             created_at, updated_at, materialized_until, written_ahead) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?8, ?9, ?10)",
        )
        .bind(id.get())
        .bind(new.spec.app.as_str())
        .bind(new.spec.name.as_str())
        .bind(new.spec.schedule.kind_name())
        .bind(spec_json(&new.spec)?)
        .bind(new.enabled)
        .bind(timer.bucket.get() as i32)
        .bind(now.as_millis())
        .bind(watermark.as_millis())
        .bind(timer.written_ahead)
        .execute(&mut **tx)
        .await
        .map_err(rows::name_taken_or(&new.spec))?;
        if timer.written_ahead {
            insert_new(&mut **tx, &occurrences).await?;
        }
        Ok(Written { timer, occurrences })
    }

    /// After a change to `timer` in `tx`: its first occurrences from now and its watermark,
    /// if it is enabled.
    async fn materialize_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
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
        sqlx::query("UPDATE timers SET materialized_until = ?2 WHERE id = ?1")
            .bind(timer.id.get())
            .bind(watermark.as_millis())
            .execute(&mut **tx)
            .await?;
        Ok(rows)
    }

    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn an_in_memory_database_outlives_the_pools_connection() {
        let clock = Arc::new(chime_domain::SystemClock);
        let store = SqliteStore::open("sqlite::memory:", clock, BucketCount::DEFAULT)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        // The pool's one connection closed, as sqlx does with one it cannot trust; the pool
        // opens another.
        store.writer.acquire().await.unwrap().close().await.unwrap();
        let timers: i64 = sqlx::query_scalar("SELECT count(*) FROM timers")
            .fetch_one(&store.writer)
            .await
            .unwrap();
        assert_eq!(timers, 0);
    }
}
