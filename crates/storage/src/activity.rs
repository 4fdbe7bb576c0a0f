//! [`Activity`]: per app and minute tallies of what the executors did. Each executor process
//! (a `writer`) rewrites its own rows while a minute is open, so a retried write never counts
//! twice; readers sum over writers. Both SQL backends run the same statements
//! ([`activity_impl!`]); the lateness histogram is stored as a JSON array.

use async_trait::async_trait;
use chime_domain::{AppName, Counts, LATENESS_BUCKETS, Tally, Timestamp};

use crate::{StoreError, StoreResult};

#[async_trait]
pub trait Activity: Send + Sync + 'static {
    /// Stores `writer`'s tallies, replacing what it stored before for the same app and minute.
    async fn write_activity(&self, writer: &str, tallies: &[Tally]) -> StoreResult<()>;

    /// Every writer's tallies from `since` on, summed per app and minute, in minute order;
    /// only `app`'s when given.
    async fn read_activity(
        &self,
        app: Option<&AppName>,
        since: Timestamp,
    ) -> StoreResult<Vec<Tally>>;
}

pub(crate) const UPSERT: &str = "INSERT INTO activity \
     (app, minute, writer, fired, succeeded, failed, dead, lateness) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (minute, app, writer) DO UPDATE SET fired = excluded.fired, \
     succeeded = excluded.succeeded, failed = excluded.failed, dead = excluded.dead, \
     lateness = excluded.lateness";
pub(crate) const READ_ALL: &str = "SELECT app, minute, fired, succeeded, failed, dead, lateness \
     FROM activity WHERE minute >= $1 ORDER BY minute, app";
pub(crate) const READ_APP: &str = "SELECT app, minute, fired, succeeded, failed, dead, lateness \
     FROM activity WHERE minute >= $1 AND app = $2 ORDER BY minute, app";

/// Rows older than this go with the janitor's purge.
pub(crate) const PURGE: &str = "DELETE FROM activity WHERE minute < $1";

/// A stored row: (app, minute, fired, succeeded, failed, dead, lateness).
pub(crate) type ActivityRow = (String, i64, i64, i64, i64, i64, String);

pub(crate) fn lateness_json(c: &Counts) -> String {
    serde_json::Value::from(c.lateness.to_vec()).to_string()
}

pub(crate) fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Sums rows of the same app and minute (one per writer); rows come in minute, app order.
pub(crate) fn tallies(rows: Vec<ActivityRow>) -> StoreResult<Vec<Tally>> {
    let mut out: Vec<Tally> = Vec::new();
    for (app, minute, fired, succeeded, failed, dead, lateness) in rows {
        let buckets: Vec<u64> = serde_json::from_str(&lateness).map_err(StoreError::corrupt)?;
        let mut counts = Counts {
            fired: fired.max(0) as u64,
            succeeded: succeeded.max(0) as u64,
            failed: failed.max(0) as u64,
            dead: dead.max(0) as u64,
            lateness: [0; LATENESS_BUCKETS],
        };
        for (slot, n) in counts.lateness.iter_mut().zip(buckets) {
            *slot = n;
        }
        let minute = Timestamp::from_millis(minute);
        match out.last_mut() {
            Some(last) if last.minute == minute && last.app.as_str() == app => {
                last.counts.merge(&counts);
            }
            _ => out.push(Tally {
                app: AppName::parse(app).map_err(StoreError::corrupt)?,
                minute,
                counts,
            }),
        }
    }
    Ok(out)
}

/// [`Activity`] for a store whose writes go to `$write` and reads to `$read` (pools).
macro_rules! activity_impl {
    ($store:ty, $write:ident, $read:ident) => {
        #[async_trait::async_trait]
        impl $crate::Activity for $store {
            async fn write_activity(
                &self,
                writer: &str,
                tallies: &[chime_domain::Tally],
            ) -> $crate::StoreResult<()> {
                use $crate::activity::count;
                // Few rows (apps active in the open minutes): one transaction, a statement each.
                let mut tx = self.$write.begin().await?;
                for t in tallies {
                    sqlx::query($crate::activity::UPSERT)
                        .bind(t.app.as_str())
                        .bind(t.minute.as_millis())
                        .bind(writer)
                        .bind(count(t.counts.fired))
                        .bind(count(t.counts.succeeded))
                        .bind(count(t.counts.failed))
                        .bind(count(t.counts.dead))
                        .bind($crate::activity::lateness_json(&t.counts))
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn read_activity(
                &self,
                app: Option<&chime_domain::AppName>,
                since: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::Tally>> {
                let rows: Vec<$crate::activity::ActivityRow> = match app {
                    Some(app) => {
                        sqlx::query_as($crate::activity::READ_APP)
                            .bind(since.as_millis())
                            .bind(app.as_str())
                            .fetch_all(&self.$read)
                            .await?
                    }
                    None => {
                        sqlx::query_as($crate::activity::READ_ALL)
                            .bind(since.as_millis())
                            .fetch_all(&self.$read)
                            .await?
                    }
                };
                $crate::activity::tallies(rows)
            }
        }
    };
}
pub(crate) use activity_impl;
