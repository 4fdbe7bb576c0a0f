//! chime-migrator. Today: applying the schema migrations (`chime-migrator migrate`) and the
//! materialization core ([`Materializer`]). The service around it (the periodic step with
//! bucket leases, the `MigrateTimer` gRPC server) arrives with the pipeline.

mod materialize;

pub use materialize::{Materialized, Materializer};

use std::sync::Arc;

use chime_domain::{BucketCount, Clock, SystemClock};
use chime_storage::postgres::{PgSettings, PgStore};
use chime_storage::sqlite::SqliteStore;

/// Applies every pending migration to the database at `url` (PostgreSQL under an advisory
/// lock, so concurrent runs are safe); a no-op when current.
pub async fn migrate(url: &str, buckets: BucketCount) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(url, clock, buckets).await?;
        store.migrate().await?;
        store.close().await;
    } else {
        let store = PgStore::connect(url, &PgSettings::default(), clock, buckets).await?;
        store.migrate().await?;
        store.pool().close().await;
    }
    Ok(())
}
