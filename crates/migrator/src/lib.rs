//! chime-migrator: applies the schema migrations (`chime-migrator migrate`) and keeps every
//! enabled timer materialized a lead window ahead: continuous passes that extend each timer
//! from its watermark, split across replicas by bucket leases ([`Migrator`]).

mod catalog;
mod janitor;
mod materialize;
mod serve;
mod service;

pub use catalog::METRICS;
pub use janitor::{Janitor, JanitorRun, RetentionSettings};
pub use materialize::{BucketPass, CATCH_UP, Materialized, Materializer};
pub use serve::serve;
pub use service::{GROUP, Migrator, MigratorSettings, PassReport};

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
