//! Opening the durable store a service is configured with, by URL scheme.

use std::sync::Arc;

use async_trait::async_trait;
use chime_domain::{BucketCount, Clock};

use crate::mysql::MySqlStore;
use crate::postgres::{PgSettings, PgStore};
use crate::sqlite::SqliteStore;
use crate::{
    Activity, Calendars, Chains, Credentials, Notifications, OccurrenceStore, Retention,
    SchemaStatus, Shards, StoreError, StoreResult, TimerStore,
};

/// What [`Database`] needs of a backend beyond the storage traits: its schema and its
/// connections. A new backend implements it and adds one arm to [`Database::open`].
#[async_trait]
trait Schema: Send + Sync + 'static {
    async fn schema_status(&self) -> StoreResult<SchemaStatus>;
    async fn migrate(&self) -> StoreResult<()>;
    async fn close(&self);
}

#[async_trait]
impl Schema for PgStore {
    async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        PgStore::schema_status(self).await
    }
    async fn migrate(&self) -> StoreResult<()> {
        PgStore::migrate(self).await
    }
    async fn close(&self) {
        self.pool().close().await;
    }
}

#[async_trait]
impl Schema for SqliteStore {
    async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        SqliteStore::schema_status(self).await
    }
    async fn migrate(&self) -> StoreResult<()> {
        SqliteStore::migrate(self).await
    }
    async fn close(&self) {
        SqliteStore::close(self).await;
    }
}

#[async_trait]
impl Schema for MySqlStore {
    async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        MySqlStore::schema_status(self).await
    }
    async fn migrate(&self) -> StoreResult<()> {
        MySqlStore::migrate(self).await
    }
    async fn close(&self) {
        MySqlStore::close(self).await;
    }
}

/// The durable store behind the storage traits: PostgreSQL for `postgres://…`, MySQL or
/// MariaDB for `mysql://…`, SQLite for `sqlite:…`.
#[derive(Clone)]
pub struct Database {
    pub timers: Arc<dyn TimerStore>,
    pub occurrences: Arc<dyn OccurrenceStore>,
    pub retention: Arc<dyn Retention>,
    pub credentials: Arc<dyn Credentials>,
    pub calendars: Arc<dyn Calendars>,
    pub activity: Arc<dyn Activity>,
    pub notifications: Arc<dyn Notifications>,
    pub chains: Arc<dyn Chains>,
    pub shards: Arc<dyn Shards>,
    schema: Arc<dyn Schema>,
    /// The PostgreSQL store behind the traits, when it is one (its hot path for services
    /// run without Redis).
    pg: Option<Arc<PgStore>>,
}

impl Database {
    /// Opens the backend the URL's scheme names.
    pub async fn open(
        url: &str,
        settings: &PgSettings,
        clock: Arc<dyn Clock>,
        buckets: BucketCount,
    ) -> StoreResult<Self> {
        if url.starts_with("sqlite:") {
            Ok(Self::of(Arc::new(
                SqliteStore::open(url, clock, buckets).await?,
            )))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pg = Arc::new(PgStore::connect(url, settings, clock, buckets).await?);
            Ok(Self {
                pg: Some(pg.clone()),
                ..Self::of(pg)
            })
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            Ok(Self::of(Arc::new(
                MySqlStore::connect(&url, settings, clock, buckets).await?,
            )))
        } else {
            Err(StoreError::Invalid(chime_domain::ValidationError::new(
                "database.url",
                "must start with postgres://, mysql:// or sqlite:",
            )))
        }
    }

    /// One store serving every trait.
    fn of<S>(store: Arc<S>) -> Self
    where
        S: TimerStore
            + OccurrenceStore
            + Retention
            + Credentials
            + Calendars
            + Activity
            + Notifications
            + Chains
            + Shards
            + Schema,
    {
        Self {
            timers: store.clone(),
            occurrences: store.clone(),
            retention: store.clone(),
            credentials: store.clone(),
            calendars: store.clone(),
            activity: store.clone(),
            notifications: store.clone(),
            chains: store.clone(),
            shards: store.clone(),
            schema: store,
            pg: None,
        }
    }

    /// The hot index, leases and membership kept in this database, if it is PostgreSQL.
    pub fn pg_hot_path(
        &self,
        retention: std::time::Duration,
    ) -> Option<crate::postgres::PgHotPath> {
        self.pg.as_ref().map(|pg| pg.hot_path(retention))
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        self.schema.schema_status().await
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        self.schema.migrate().await
    }

    /// Fails with the message operators need when the schema is behind this binary.
    pub async fn require_current_schema(&self) -> StoreResult<()> {
        match self.schema_status().await? {
            SchemaStatus::Current => Ok(()),
            SchemaStatus::Behind { missing } => Err(StoreError::internal(format!(
                "the database schema is behind this binary (missing migrations {missing:?}): \
                 run `chime-migrator migrate`"
            ))),
        }
    }

    /// Whether the database answers, for `/readyz`.
    pub async fn ping(&self) -> StoreResult<()> {
        self.schema_status().await.map(|_| ())
    }

    pub async fn close(&self) {
        self.schema.close().await;
    }
}
