//! chime-migrator: applies the schema migrations (`chime-migrator migrate`) and materializes
//! occurrences ahead of time: a periodic step over every enabled timer, split across replicas
//! by bucket leases ([`Migrator`]), and one timer on demand (`MigrateTimer`, [`grpc`]).

pub mod grpc;
mod materialize;
mod service;

pub use materialize::{Materialized, Materializer};
pub use service::{Migrator, StepReport, StepSettings};

use std::sync::Arc;

use chime_domain::{BucketCount, Clock, SystemClock};
use chime_storage::Database;
use chime_storage::postgres::PgSettings;

/// Applies every pending migration to the database at `url` (PostgreSQL under an advisory
/// lock, so concurrent runs are safe); a no-op when current.
pub async fn migrate(url: &str, buckets: BucketCount) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let db = Database::open(url, &PgSettings::default(), clock, buckets).await?;
    db.migrate().await?;
    db.close().await;
    Ok(())
}
