//! One factory for the stores a process uses: the database its URL names, and the hot index
//! and leases, in Redis when a Redis URL is given or in memory for `chime dev`. Every binary
//! and `chime dev` open their stores here; `chime-runtime` only turns the config into
//! [`StoreSettings`].

use std::sync::Arc;

use chime_domain::{BucketCount, Clock};

use crate::memory::{MemoryHotIndex, MemoryLeases};
use crate::postgres::PgSettings;
use crate::redis::{RedisBackend, RedisSettings};
use crate::{Database, HotIndex, Leases, Membership, StoreError, Windowed};

/// Where the hot index and the leases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotPath {
    /// Redis when [`StoreSettings::redis_url`] is set; otherwise in PostgreSQL when that is
    /// the database (PostgreSQL-only mode), none for SQLite.
    Configured,
    /// In this process's memory (`chime dev`: one process runs every service).
    InMemory,
}

/// What opening the stores needs to know, whatever the config layer it came from.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub buckets: BucketCount,
    pub postgres: PgSettings,
    pub redis_url: Option<String>,
    pub redis: RedisSettings,
    /// The migrator's lead: the hot index holds what is due within it (plus a margin), the
    /// rest waits in the database until the migrator builds its shard ([`Windowed`]).
    pub index_lead: std::time::Duration,
}

/// The hot index with the leases beside it.
pub type HotStores = (Arc<dyn HotIndex>, Arc<dyn Leases>);

/// A service that needs the hot path was started without one.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("no hot path: set CHIME_REDIS_URL (redis://…), or use PostgreSQL as the database")]
pub struct NoHotPath;

pub struct Stores {
    pub database: Database,
    /// `None` without Redis: services that can, read the database instead.
    pub hot_index: Option<Arc<dyn HotIndex>>,
    pub leases: Option<Arc<dyn Leases>>,
    /// Beside the leases: who the live replicas of each group are.
    pub membership: Option<Arc<dyn Membership>>,
    redis: Option<RedisBackend>,
}

impl Stores {
    /// Opens the database `database_url` names and the hot path. `migrate`: apply pending
    /// migrations first (`chime dev`); otherwise the schema must already be current, so a
    /// service never runs against a schema it does not know.
    pub async fn open(
        settings: &StoreSettings,
        database_url: &str,
        clock: Arc<dyn Clock>,
        hot_path: HotPath,
        migrate: bool,
    ) -> Result<Self, StoreError> {
        let database = Database::open(
            database_url,
            &settings.postgres,
            clock.clone(),
            settings.buckets,
        )
        .await?;
        if migrate {
            database.migrate().await?;
        } else {
            database.require_current_schema().await?;
        }
        type Hot = (Arc<dyn HotIndex>, Arc<dyn Leases>, Arc<dyn Membership>);
        let (hot, redis): (Option<Hot>, Option<RedisBackend>) =
            match (hot_path, settings.redis_url.as_deref()) {
                (HotPath::InMemory, _) => {
                    let index = MemoryHotIndex::new(clock.clone(), settings.redis.shard_retention);
                    let leases = Arc::new(MemoryLeases::new(clock.clone()));
                    (Some((Arc::new(index), leases.clone(), leases)), None)
                }
                (HotPath::Configured, Some(url)) => {
                    let redis = RedisBackend::connect(url, settings.redis.clone()).await?;
                    let hot: Hot = (
                        Arc::new(redis.hot_index()),
                        Arc::new(redis.leases()),
                        Arc::new(redis.leases()),
                    );
                    (Some(hot), Some(redis))
                }
                (HotPath::Configured, None) => {
                    match database.pg_hot_path(settings.redis.shard_retention) {
                        Some(pg) => {
                            tracing::info!(
                                "no CHIME_REDIS_URL: hot index and leases in PostgreSQL"
                            );
                            let hot: Hot =
                                (Arc::new(pg.clone()), Arc::new(pg.clone()), Arc::new(pg));
                            (Some(hot), None)
                        }
                        None => (None, None),
                    }
                }
            };
        let (hot_index, leases, membership) = match hot {
            Some((i, l, m)) => {
                let windowed: Arc<dyn HotIndex> =
                    Arc::new(Windowed::new(i, clock.clone(), settings.index_lead));
                (Some(windowed), Some(l), Some(m))
            }
            None => (None, None, None),
        };
        Ok(Self {
            database,
            hot_index,
            leases,
            membership,
            redis,
        })
    }

    /// [`Self::open`] for a service: Redis if configured, the schema already current.
    pub async fn for_service(
        settings: &StoreSettings,
        database_url: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        Self::open(settings, database_url, clock, HotPath::Configured, false).await
    }

    /// The hot index and leases, for a service that cannot run without them.
    pub fn hot_path(&self) -> Result<HotStores, NoHotPath> {
        match (&self.hot_index, &self.leases) {
            (Some(index), Some(leases)) => Ok((index.clone(), leases.clone())),
            _ => Err(NoHotPath),
        }
    }

    /// Group membership, beside the leases, for a service that splits work with its peers.
    pub fn membership(&self) -> Result<Arc<dyn Membership>, NoHotPath> {
        self.membership.clone().ok_or(NoHotPath)
    }

    /// Closes the Redis connections, if any, and the database's.
    pub async fn close(&self) {
        if let Some(redis) = &self.redis {
            redis.quit().await;
        }
        self.database.close().await;
    }
}
