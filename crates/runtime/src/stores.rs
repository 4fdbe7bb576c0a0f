//! One factory for the stores a process uses: the database its URL names, and the hot index
//! and leases, in Redis when `CHIME_REDIS_URL` is set or in memory for `chime dev`. Every
//! binary and `chime dev` open their stores here.

use std::sync::Arc;

use chime_domain::Clock;
use chime_storage::memory::{MemoryHotIndex, MemoryLeases};
use chime_storage::redis::{RedisBackend, RedisSettings};
use chime_storage::{Database, HotIndex, Leases, StoreError};

use crate::Config;

/// Where the hot index and the leases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotPath {
    /// Redis when `CHIME_REDIS_URL` is set, none otherwise.
    Configured,
    /// In this process's memory (`chime dev`: one process runs every service).
    InMemory,
}

/// The hot index with the leases beside it.
pub type HotStores = (Arc<dyn HotIndex>, Arc<dyn Leases>);

pub struct Stores {
    pub database: Database,
    /// `None` without Redis: services that can, read the database instead.
    pub hot_index: Option<Arc<dyn HotIndex>>,
    pub leases: Option<Arc<dyn Leases>>,
    redis: Option<RedisBackend>,
}

impl Stores {
    /// Opens the configured database and hot path. `migrate`: apply pending migrations
    /// first (`chime dev`); otherwise the schema must already be current, so a service never
    /// runs against a schema it does not know.
    pub async fn open(
        config: &Config,
        database_url: &str,
        clock: Arc<dyn Clock>,
        hot_path: HotPath,
        migrate: bool,
    ) -> Result<Self, StoreError> {
        let database = Database::open(
            database_url,
            &pg_settings(config),
            clock.clone(),
            config.buckets,
        )
        .await?;
        if migrate {
            database.migrate().await?;
        } else {
            database.require_current_schema().await?;
        }
        let (hot, redis): (Option<HotStores>, Option<RedisBackend>) =
            match (hot_path, config.redis.url.as_deref()) {
                (HotPath::InMemory, _) => {
                    let index =
                        MemoryHotIndex::new(clock.clone(), config.redis.shard_retention.get());
                    (
                        Some((Arc::new(index), Arc::new(MemoryLeases::new(clock)))),
                        None,
                    )
                }
                (HotPath::Configured, Some(url)) => {
                    let redis = RedisBackend::connect(url, redis_settings(config)).await?;
                    (
                        Some((Arc::new(redis.hot_index()), Arc::new(redis.leases()))),
                        Some(redis),
                    )
                }
                (HotPath::Configured, None) => (None, None),
            };
        let (hot_index, leases) = hot.unzip();
        Ok(Self {
            database,
            hot_index,
            leases,
            redis,
        })
    }

    /// [`Self::open`] for a service, from `CHIME_DATABASE_URL` and `CHIME_REDIS_URL`.
    pub async fn for_service(config: &Config, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let url = config
            .database_url()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        Self::open(config, url, clock, HotPath::Configured, false).await
    }

    /// The hot index and leases, for a service that cannot run without them.
    pub fn hot_path(&self) -> Result<HotStores, StoreError> {
        match (&self.hot_index, &self.leases) {
            (Some(index), Some(leases)) => Ok((index.clone(), leases.clone())),
            _ => Err(StoreError::Internal(
                "no Redis configured: set CHIME_REDIS_URL (redis://…)".into(),
            )),
        }
    }

    /// Closes the Redis connections, if any, and the database's.
    pub async fn close(&self) {
        if let Some(redis) = &self.redis {
            redis.quit().await;
        }
        self.database.close().await;
    }
}

/// The PostgreSQL pool settings of `[database]`.
pub fn pg_settings(config: &Config) -> chime_storage::postgres::PgSettings {
    chime_storage::postgres::PgSettings {
        max_connections: config.database.max_connections,
        acquire_timeout: config.database.acquire_timeout.get(),
    }
}

fn redis_settings(config: &Config) -> RedisSettings {
    RedisSettings {
        prefix: config.redis.prefix.clone(),
        pool_size: config.redis.pool_size,
        shard_retention: config.redis.shard_retention.get(),
        ..Default::default()
    }
}
