//! [`crate::Activity`] on MySQL: the shared row mapping, MySQL's upsert.

use async_trait::async_trait;
use chime_domain::{AppName, Tally, Timestamp};

use super::MySqlStore;
use crate::activity::{ActivityRow, count, lateness_json, tallies};
use crate::{Activity, StoreResult};

#[async_trait]
impl Activity for MySqlStore {
    async fn write_activity(&self, writer: &str, rows: &[Tally]) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        for t in rows {
            sqlx::query(
                "INSERT INTO activity \
                 (app, minute, writer, fired, succeeded, failed, dead, lateness) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
                 ON DUPLICATE KEY UPDATE fired = VALUES(fired), succeeded = VALUES(succeeded), \
                 failed = VALUES(failed), dead = VALUES(dead), lateness = VALUES(lateness)",
            )
            .bind(t.app.as_str())
            .bind(t.minute.as_millis())
            .bind(writer)
            .bind(count(t.counts.fired))
            .bind(count(t.counts.succeeded))
            .bind(count(t.counts.failed))
            .bind(count(t.counts.dead))
            .bind(lateness_json(&t.counts))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn read_activity(
        &self,
        app: Option<&AppName>,
        since: Timestamp,
    ) -> StoreResult<Vec<Tally>> {
        let rows: Vec<ActivityRow> =
            match app {
                Some(app) => sqlx::query_as(
                    "SELECT app, minute, fired, succeeded, failed, dead, lateness FROM activity \
                     WHERE minute >= ? AND app = ? ORDER BY minute, app",
                )
                .bind(since.as_millis())
                .bind(app.as_str())
                .fetch_all(&self.pool)
                .await?,
                None => sqlx::query_as(
                    "SELECT app, minute, fired, succeeded, failed, dead, lateness FROM activity \
                     WHERE minute >= ? ORDER BY minute, app",
                )
                .bind(since.as_millis())
                .fetch_all(&self.pool)
                .await?,
            };
        tallies(rows)
    }
}
