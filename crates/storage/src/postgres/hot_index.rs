//! [`HotIndex`] on PostgreSQL, for services run without Redis: a complete shard has a row in
//! `hot_shards`, and members are rows of `hot_members` (UNLOGGED tables, migration 0012), read
//! by `(minute, bucket, due)` from an index. Expiry is by the database's clock, so every
//! replica sees the same shards whatever its own clock says.

use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{ShardKey, TaskKey, Timestamp};
use sqlx::postgres::PgPool;

use crate::{HotEntry, HotIndex, StoreResult, rows};

/// The database's clock in Unix ms.
pub(super) const DB_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The hot index and leases in PostgreSQL (see [`super::PgStore::hot_path`]).
#[derive(Clone)]
pub struct PgHotPath {
    pub(super) pool: PgPool,
    /// How long a shard outlives its minute.
    pub(super) retention: Duration,
}

impl PgHotPath {
    fn retention_ms(&self) -> i64 {
        i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX)
    }

    /// Deletes expired shards and the members of minutes long gone. Run with every touch
    /// (the migrator's step), so the tables hold the last few minutes only.
    async fn prune(&self) -> StoreResult<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM hot_shards WHERE expires_at <= {DB_NOW}"
        )))
        .execute(&self.pool)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM hot_members WHERE minute < {DB_NOW} - 60000 - $1"
        )))
        .bind(self.retention_ms())
        .execute(&self.pool)
        .await?;
        self.prune_run_leases().await
    }

    /// Marks shards complete until their minute's end plus the retention.
    async fn mark(&self, shards: &[ShardKey]) -> StoreResult<()> {
        let mut shards = shards.to_vec();
        shards.sort();
        shards.dedup();
        let (minutes, buckets): (Vec<i64>, Vec<i32>) = shards
            .iter()
            .map(|s| (s.minute_start().as_millis(), s.bucket.get() as i32))
            .unzip();
        // In key order, so concurrent writers lock rows in the same order.
        sqlx::query(
            "INSERT INTO hot_shards (minute, bucket, expires_at) \
             SELECT m, b, m + 60000 + $3 FROM UNNEST($1::bigint[], $2::integer[]) AS s(m, b) \
             ORDER BY m, b \
             ON CONFLICT (minute, bucket) DO UPDATE SET expires_at = excluded.expires_at \
             WHERE hot_shards.expires_at < excluded.expires_at",
        )
        .bind(minutes)
        .bind(buckets)
        .bind(self.retention_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[async_trait]
impl HotIndex for PgHotPath {
    async fn add(&self, entries: &[HotEntry]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        // The last entry of a key wins, as a ZADD of the same member would.
        let mut latest = std::collections::BTreeMap::new();
        for e in entries {
            latest.insert((e.shard, e.key), e.due);
        }
        let mut cols: (Vec<i64>, Vec<i32>, Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
        for ((shard, key), due) in latest {
            cols.0.push(shard.minute_start().as_millis());
            cols.1.push(shard.bucket.get() as i32);
            cols.2.push(key.timer_id.get());
            cols.3.push(key.run_at.as_millis());
            cols.4.push(due.as_millis());
        }
        sqlx::query(
            "INSERT INTO hot_members (minute, bucket, timer_id, run_at, due) \
             SELECT * FROM UNNEST($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[], \
                                  $5::bigint[]) \
             ON CONFLICT (minute, bucket, timer_id, run_at) DO UPDATE SET due = excluded.due",
        )
        .bind(cols.0)
        .bind(cols.1)
        .bind(cols.2)
        .bind(cols.3)
        .bind(cols.4)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn due(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT m.timer_id, m.run_at, m.due FROM hot_members m \
             WHERE m.minute = $1 AND m.bucket = $2 AND m.due <= $3 \
               AND $1 + 60000 + $5 > {DB_NOW} \
             ORDER BY m.due, m.timer_id, m.run_at LIMIT $4"
        )))
        .bind(shard.minute_start().as_millis())
        .bind(shard.bucket.get() as i32)
        .bind(up_to.as_millis())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(self.retention_ms())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::due_pair).collect()
    }

    async fn touch(&self, shards: &[ShardKey]) -> StoreResult<()> {
        self.prune().await?;
        if shards.is_empty() {
            return Ok(());
        }
        self.mark(shards).await
    }

    async fn remove(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let (ids, run_ats): (Vec<i64>, Vec<i64>) = keys
            .iter()
            .map(|k| (k.timer_id.get(), k.run_at.as_millis()))
            .unzip();
        sqlx::query(
            "DELETE FROM hot_members WHERE minute = $1 AND bucket = $2 \
             AND (timer_id, run_at) IN (SELECT * FROM UNNEST($3::bigint[], $4::bigint[]))",
        )
        .bind(shard.minute_start().as_millis())
        .bind(shard.bucket.get() as i32)
        .bind(ids)
        .bind(run_ats)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn shard_complete(&self, shard: ShardKey) -> StoreResult<bool> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM hot_shards WHERE minute = $1 AND bucket = $2 \
             AND expires_at > {DB_NOW})"
        )))
        .bind(shard.minute_start().as_millis())
        .bind(shard.bucket.get() as i32)
        .fetch_one(&self.pool)
        .await?)
    }

    fn run_leases(&self) -> Option<std::sync::Arc<dyn crate::RunLeases>> {
        Some(std::sync::Arc::new(self.clone()))
    }
}
