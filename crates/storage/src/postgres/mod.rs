//! PostgreSQL backend for [`TimerStore`](crate::TimerStore) and
//! [`OccurrenceStore`](crate::OccurrenceStore): the durable truth of a distributed
//! deployment. A file per responsibility: the pool and ids here, `timers.rs`,
//! `occurrences.rs`, `retention.rs` with its day partitions in `partitions.rs`, and the group commit of single creates in `create.rs`.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{BucketCount, Clock, TimerId, ValidationError};
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::create_queue::CreateQueue;
use crate::migrate::{SchemaStatus, applied_versions_or_none, compare, postgres_migrator};
use crate::rows;
use crate::{StoreError, StoreResult};

macro_rules! timer_cols {
    () => {
        "id, app, name, spec::text AS spec, enabled, version, bucket, created_at, updated_at, deleted_at, \
         paused_reason, paused_at, paused_by, written_ahead"
    };
}

mod activity;
mod calendars;
mod chains;
mod create;
mod credentials;
mod hot_index;
mod leases;
mod notifications;
mod shards;
pub use hot_index::PgHotPath;
mod occurrences;
mod partitions;
pub use partitions::RotationPause;
mod retention;
mod run_leases;
mod statistics;
mod timers;
mod unwritten;

/// Connection settings for [`PgStore::connect`].
#[derive(Debug, Clone)]
pub struct PgSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PgSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Timer ids taken from the sequence per round trip. Ids reserved by a process that stops
/// are never used: ids have gaps, never repeats.
const ID_BLOCK: i64 = 64;

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    buckets: BucketCount,
    /// Ids reserved from `timers_id_seq` and not handed out yet: a create then needs one
    /// round trip instead of two.
    spare_ids: Arc<std::sync::Mutex<std::collections::VecDeque<i64>>>,
    /// Group commit for single creates, started on first use.
    creates: Arc<tokio::sync::OnceCell<CreateQueue>>,
}

impl PgStore {
    /// Opens a pool. Connections are made lazily and re-made after a server restart, so a
    /// store outlives PostgreSQL restarts; calls fail with `Unavailable` meanwhile.
    pub async fn connect(
        url: &str,
        settings: &PgSettings,
        clock: Arc<dyn Clock>,
        buckets: BucketCount,
    ) -> StoreResult<Self> {
        let options: PgConnectOptions = url
            .parse::<PgConnectOptions>()
            .map_err(|e| StoreError::Invalid(ValidationError::new("database.url", e)))?
            .log_statements(tracing::log::LevelFilter::Trace);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(Self::from_pool(pool, clock, buckets))
    }

    /// The hot index, leases and membership in this database (PostgreSQL-only mode), on
    /// this store's pool; shards live `retention` past their minute.
    pub fn hot_path(&self, retention: Duration) -> PgHotPath {
        PgHotPath {
            pool: self.pool.clone(),
            retention,
        }
    }

    pub fn from_pool(pool: PgPool, clock: Arc<dyn Clock>, buckets: BucketCount) -> Self {
        Self {
            pool,
            clock,
            buckets,
            spare_ids: Arc::default(),
            creates: Arc::default(),
        }
    }

    /// The group-commit queue; its writers stop when every clone of the store is gone.
    async fn create_queue(&self) -> &CreateQueue {
        self.creates
            .get_or_init(|| async {
                crate::create_queue::start(Arc::new(create::PgCreates(self.pool.clone())))
            })
            .await
    }

    /// `n` fresh timer ids, from the reserve when it has them.
    async fn next_ids(&self, n: usize) -> StoreResult<Vec<TimerId>> {
        let take = |spare: &mut std::collections::VecDeque<i64>| -> Option<Vec<i64>> {
            (spare.len() >= n).then(|| spare.drain(..n).collect())
        };
        let poisoned = || StoreError::internal("id reserve poisoned by an earlier panic");
        if let Some(ids) = take(&mut *self.spare_ids.lock().map_err(|_| poisoned())?) {
            return ids.into_iter().map(rows::timer_id).collect();
        }
        let fetched: Vec<i64> =
            sqlx::query_scalar("SELECT nextval('timers_id_seq') FROM generate_series(1, $1)")
                .bind(ID_BLOCK.max(n as i64))
                .fetch_all(&self.pool)
                .await?;
        let mut spare = self.spare_ids.lock().map_err(|_| poisoned())?;
        spare.extend(fetched);
        take(&mut spare)
            .unwrap_or_default()
            .into_iter()
            .map(rows::timer_id)
            .collect()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations under PostgreSQL's advisory lock; a no-op when current.
    pub async fn migrate(&self) -> StoreResult<()> {
        postgres_migrator().run(&self.pool).await?;
        Ok(())
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        let applied = sqlx::query_scalar::<_, i64>(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await;
        Ok(compare(
            &postgres_migrator(),
            &applied_versions_or_none(applied)?,
        ))
    }

    async fn current_version(&self, id: TimerId) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT version FROM timers WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id.get())
        .fetch_optional(&self.pool)
        .await?)
    }
}
