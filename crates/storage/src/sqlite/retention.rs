//! [`Retention`] on SQLite: batched deletes by primary key on the writer connection (the
//! tables are WITHOUT ROWID).

use async_trait::async_trait;

use super::SqliteStore;
use crate::{PurgeBefore, Purged, Retention, StoreResult};

#[async_trait]
impl Retention for SqliteStore {
    async fn purge(&self, before: &PurgeBefore, limit: u32) -> StoreResult<Purged> {
        let limit = i64::from(limit);
        let finished = sqlx::query(
            "DELETE FROM occurrences WHERE (timer_id, run_at) IN (SELECT timer_id, run_at \
             FROM occurrences WHERE run_at < ?1 \
               AND status IN ('succeeded', 'failed', 'skipped') LIMIT ?2)",
        )
        .bind(before.history.as_millis())
        .bind(limit)
        .execute(&self.writer)
        .await?
        .rows_affected();
        let dead = sqlx::query(
            "DELETE FROM occurrences WHERE (timer_id, run_at) IN (SELECT timer_id, run_at \
             FROM occurrences WHERE run_at < ?1 AND status = 'dead' LIMIT ?2)",
        )
        .bind(before.dead.as_millis())
        .bind(limit)
        .execute(&self.writer)
        .await?
        .rows_affected();
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
