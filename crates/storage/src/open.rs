//! Opening the durable store a service is configured with, by URL scheme.

use std::sync::Arc;

use chime_domain::{BucketCount, Clock};

use crate::postgres::{PgSettings, PgStore};
use crate::sqlite::SqliteStore;
use crate::{OccurrenceStore, Retention, SchemaStatus, StoreError, StoreResult, TimerStore};

#[derive(Clone)]
enum Backend {
    Postgres(Arc<PgStore>),
    Sqlite(Arc<SqliteStore>),
}

/// The durable store behind both traits: PostgreSQL for `postgres://…`, SQLite for
/// `sqlite:…`.
#[derive(Clone)]
pub struct Database {
    pub timers: Arc<dyn TimerStore>,
    pub occurrences: Arc<dyn OccurrenceStore>,
    pub retention: Arc<dyn Retention>,
    backend: Backend,
}

impl Database {
    pub async fn open(
        url: &str,
        settings: &PgSettings,
        clock: Arc<dyn Clock>,
        buckets: BucketCount,
    ) -> StoreResult<Self> {
        if url.starts_with("sqlite:") {
            let store = Arc::new(SqliteStore::open(url, clock, buckets).await?);
            Ok(Self {
                timers: store.clone(),
                occurrences: store.clone(),
                retention: store.clone(),
                backend: Backend::Sqlite(store),
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let store = Arc::new(PgStore::connect(url, settings, clock, buckets).await?);
            Ok(Self {
                timers: store.clone(),
                occurrences: store.clone(),
                retention: store.clone(),
                backend: Backend::Postgres(store),
            })
        } else {
            Err(StoreError::Internal(
                "the database URL must start with postgres:// or sqlite:".into(),
            ))
        }
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        match &self.backend {
            Backend::Postgres(s) => s.schema_status().await,
            Backend::Sqlite(s) => s.schema_status().await,
        }
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        match &self.backend {
            Backend::Postgres(s) => s.migrate().await,
            Backend::Sqlite(s) => s.migrate().await,
        }
    }

    /// Fails with the message operators need when the schema is behind this binary.
    pub async fn require_current_schema(&self) -> StoreResult<()> {
        match self.schema_status().await? {
            SchemaStatus::Current => Ok(()),
            SchemaStatus::Behind { missing } => Err(StoreError::Internal(format!(
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
        match &self.backend {
            Backend::Postgres(s) => s.pool().close().await,
            Backend::Sqlite(s) => s.close().await,
        }
    }
}
