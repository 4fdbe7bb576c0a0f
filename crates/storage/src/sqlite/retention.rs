//! [`Retention`] on SQLite: batched deletes by primary key on the writer connection (the
//! tables are WITHOUT ROWID).

use async_trait::async_trait;
use chime_domain::Timestamp;

use super::SqliteStore;
use crate::{PurgeBefore, Purged, Retention, StoreResult};

impl SqliteStore {
    /// Deletes at most `limit` occurrences in `statuses` due before `before`.
    async fn delete_old(
        &self,
        statuses: &[&str],
        before: Timestamp,
        limit: i64,
    ) -> StoreResult<u64> {
        Ok(sqlx::query(
            "DELETE FROM occurrences WHERE (timer_id, run_at) IN (SELECT timer_id, run_at \
             FROM occurrences WHERE run_at < ?1 \
               AND status IN (SELECT value FROM json_each(?2)) LIMIT ?3)",
        )
        .bind(before.as_millis())
        .bind(serde_json::Value::from(statuses.to_vec()).to_string())
        .bind(limit)
        .execute(&self.writer)
        .await?
        .rows_affected())
    }
}

#[async_trait]
impl Retention for SqliteStore {
    async fn purge(&self, before: &PurgeBefore, limit: u32) -> StoreResult<Purged> {
        let limit = i64::from(limit);
        let finished = self
            .delete_old(crate::FINISHED_STATUSES, before.history, limit)
            .await?;
        let dead = self.delete_old(&["dead"], before.dead, limit).await?;
        crate::sql::purge_beside_runs!(&self.writer, crate::sql::Sqlite, before);
        let keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (app, key) IN (SELECT app, key \
             FROM idempotency_keys WHERE created_at < ?1 LIMIT ?2)",
        )
        .bind(before.idempotency_keys.as_millis())
        .bind(limit)
        .execute(&self.writer)
        .await?
        .rows_affected();
        let mut tx = self.writer.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM timers WHERE deleted_at < ?1 ORDER BY deleted_at LIMIT ?2",
        )
        .bind(before.deleted_timers.as_millis())
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let ids = serde_json::Value::from(ids).to_string();
        let their_rows = sqlx::query(
            "DELETE FROM occurrences WHERE timer_id IN (SELECT value FROM json_each(?1))",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "DELETE FROM failure_streaks WHERE timer_id IN (SELECT value FROM json_each(?1))",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
        let timers =
            sqlx::query("DELETE FROM timers WHERE id IN (SELECT value FROM json_each(?1))")
                .bind(&ids)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        tx.commit().await?;
        Ok(Purged {
            occurrences: finished + dead + their_rows,
            idempotency_keys: keys,
            timers,
        })
    }
}
