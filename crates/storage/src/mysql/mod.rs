//! MySQL 8 / MariaDB 10.6+ backend (issue 21): every durable trait on one pool. A file per
//! trait, as for PostgreSQL; the group commit of single creates is `crate::create_queue`.
//!
//! Dialect notes: parameters are positional `?`, each bound once in order; batches travel
//! as JSON arrays read through `JSON_TABLE`, joined first (`STRAIGHT_JOIN`, and to
//! `occurrences` by its forced primary key: `occurrences_by_key!`) so each row is a
//! primary-key probe; `UPDATE … RETURNING` does not exist in MySQL, so claims lock their rows
//! with `FOR UPDATE SKIP LOCKED`, update them and answer from what they locked. Sessions run
//! at READ COMMITTED: no gap locks, so concurrent inserts and claims do not deadlock.

use std::sync::Arc;

use chime_domain::{BucketCount, Clock, TimerId, ValidationError};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Executor};

use crate::create_queue::CreateQueue;
use crate::migrate::{SchemaStatus, applied_versions_or_none, compare, mysql_migrator};
use crate::postgres::PgSettings;
use crate::{StoreError, StoreResult, rows};

/// A timer row.
macro_rules! timer_cols {
    () => {
        "id, app, name, spec, enabled, version, bucket, created_at, updated_at, deleted_at, \
         paused_reason, paused_at, paused_by, written_ahead"
    };
}

/// `occurrences o` joined to the rows of the `JSON_TABLE` aliased `$k`, by its primary key and
/// nothing else. Left free, MariaDB picks another unique index plus a "rowid filter" built from
/// a range of `occurrences_running_lease` once most rows are finished; under `FOR UPDATE SKIP
/// LOCKED` building that filter locks every pending row, so a concurrent claim of a different
/// key found its row locked and skipped it (fired 2-3 s late by the sweeper). Forcing the key
/// keeps each statement to the rows it names.
macro_rules! occurrences_by_key {
    ($k:literal) => {
        concat!(
            " STRAIGHT_JOIN occurrences o FORCE INDEX (PRIMARY) ON o.timer_id = ",
            $k,
            ".timer_id AND o.run_at = ",
            $k,
            ".run_at"
        )
    };
}

/// `JSON_TABLE` over a parameter holding `[[timer_id, run_at], …]`, as `k`.
macro_rules! keys_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (timer_id BIGINT PATH '$[0]', run_at BIGINT PATH '$[1]')) k"
    };
}

/// `JSON_TABLE` over `crate::sql::early_skips_json`, as `k`.
macro_rules! early_skips_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (timer_id BIGINT PATH '$[0]', run_at BIGINT PATH '$[1]', \
         version BIGINT PATH '$[2]', due BIGINT PATH '$[3]', reason TEXT PATH '$[4]')) k"
    };
}

/// `JSON_TABLE` over `crate::sql::stopped_timers_json`, as `t`.
macro_rules! stopped_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', version BIGINT PATH '$[1]')) t"
    };
}

mod activity;
mod calendars;
mod chains;
mod create;
mod credentials;
pub(crate) mod dialect;
mod notifications;
mod occurrences;
mod retention;
mod shards;
mod timers;
mod unwritten;

#[derive(Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    clock: Arc<dyn Clock>,
    buckets: BucketCount,
    /// Group commit for single creates, started on first use.
    creates: Arc<tokio::sync::OnceCell<CreateQueue>>,
}

impl MySqlStore {
    /// Pool settings every MySQL pool of Chime's uses (the store's, the tests').
    pub fn pool_options(settings: &PgSettings) -> MySqlPoolOptions {
        MySqlPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    Ok(())
                })
            })
    }

    /// Opens a pool; like PostgreSQL's, it outlives server restarts.
    pub async fn connect(
        url: &str,
        settings: &PgSettings,
        clock: Arc<dyn Clock>,
        buckets: BucketCount,
    ) -> StoreResult<Self> {
        let options: MySqlConnectOptions = url
            .parse::<MySqlConnectOptions>()
            .map_err(|e| StoreError::Invalid(ValidationError::new("database.url", e)))?
            .log_statements(tracing::log::LevelFilter::Trace);
        let pool = Self::pool_options(settings).connect_with(options).await?;
        Ok(Self::from_pool(pool, clock, buckets))
    }

    pub fn from_pool(pool: MySqlPool, clock: Arc<dyn Clock>, buckets: BucketCount) -> Self {
        Self {
            pool,
            clock,
            buckets,
            creates: Arc::default(),
        }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The group-commit queue; its writer stops when every clone of the store is gone.
    async fn create_queue(&self) -> &CreateQueue {
        self.creates
            .get_or_init(|| async {
                crate::create_queue::start(Arc::new(create::MySqlCreates(self.pool.clone())))
            })
            .await
    }

    /// `n` fresh, consecutive timer ids: one autocommit statement on the counter row.
    async fn next_ids(&self, n: usize) -> StoreResult<Vec<TimerId>> {
        let n = n as i64;
        let done = sqlx::query("UPDATE timer_ids SET last_id = LAST_INSERT_ID(last_id + ?)")
            .bind(n)
            .execute(&self.pool)
            .await?;
        let last = i64::try_from(done.last_insert_id())
            .map_err(|_| StoreError::internal("timer id counter overflowed"))?;
        (last - n + 1..=last).map(rows::timer_id).collect()
    }

    /// Applies pending migrations (under the server's named lock); a no-op when current.
    pub async fn migrate(&self) -> StoreResult<()> {
        mysql_migrator().run(&self.pool).await?;
        Ok(())
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        let applied = applied_versions_or_none(
            sqlx::query_scalar(
                "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
            )
            .fetch_all(&self.pool)
            .await,
        )?;
        Ok(compare(&mysql_migrator(), &applied))
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Rows as the JSON array a `JSON_TABLE` parameter reads.
fn json_rows(rows: impl IntoIterator<Item = serde_json::Value>) -> String {
    serde_json::Value::Array(rows.into_iter().collect()).to_string()
}

/// `[[timer_id, run_at], …]` for [`keys_table`].
fn keys_json(keys: &[chime_domain::TaskKey]) -> String {
    crate::sql::keys_json(keys)
}
