//! [`Retention`] on MySQL: bounded batches of rows by primary key, each its own short
//! statement (MySQL cannot `DELETE … LIMIT` with a join, nor read the table it deletes
//! from, so each batch's keys are read first).

use async_trait::async_trait;
use chime_domain::{TaskKey, Timestamp};
use serde_json::json;

use super::{MySqlStore, json_rows, keys_json};
use crate::{PurgeBefore, Purged, Retention, StoreResult, rows};

impl MySqlStore {
    /// Deletes at most `limit` occurrences in `statuses` due before `before`. A row changed
    /// since it was read (a dead letter redriven) keeps its new status and stays.
    async fn delete_old(
        &self,
        statuses: &[&str],
        before: Timestamp,
        limit: i64,
    ) -> StoreResult<u64> {
        let statuses = serde_json::Value::from(statuses.to_vec()).to_string();
        let found = sqlx::query(
            "SELECT timer_id, run_at FROM occurrences WHERE run_at < ? \
               AND JSON_CONTAINS(?, JSON_QUOTE(status)) LIMIT ?",
        )
        .bind(before.as_millis())
        .bind(&statuses)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let keys: Vec<TaskKey> = found
            .iter()
            .map(rows::task_key)
            .collect::<StoreResult<_>>()?;
        if keys.is_empty() {
            return Ok(0);
        }
        Ok(sqlx::query(concat!(
            "DELETE o FROM ",
            keys_table!(),
            occurrences_by_key!("k"),
            " WHERE JSON_CONTAINS(?, JSON_QUOTE(o.status))"
        ))
        .bind(keys_json(&keys))
        .bind(&statuses)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

#[async_trait]
impl Retention for MySqlStore {
    async fn purge(&self, before: &PurgeBefore, limit: u32) -> StoreResult<Purged> {
        let limit = i64::from(limit);
        let finished = self
            .delete_old(crate::FINISHED_STATUSES, before.history, limit)
            .await?;
        let dead = self.delete_old(&["dead"], before.dead, limit).await?;
        crate::sql::purge_beside_runs!(&self.pool, super::dialect::MySql, before);
        let keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?",
        )
        .bind(before.idempotency_keys.as_millis())
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected();
        // A deleted timer goes with whatever rows it has left (its runs, a failure streak
        // it was deleted in), in one transaction.
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM timers WHERE deleted_at < ? ORDER BY deleted_at LIMIT ? FOR UPDATE",
        )
        .bind(before.deleted_timers.as_millis())
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let ids = json_rows(ids.into_iter().map(|id| json!(id)));
        let their_rows = sqlx::query(
            "DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
             STRAIGHT_JOIN occurrences o FORCE INDEX (PRIMARY) ON o.timer_id = k.id",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "DELETE f FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
             STRAIGHT_JOIN failure_streaks f ON f.timer_id = k.id",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
        let timers = sqlx::query(
            "DELETE t FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
             STRAIGHT_JOIN timers t ON t.id = k.id",
        )
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
