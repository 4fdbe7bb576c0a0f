//! [`Retention`] on PostgreSQL: whole day partitions (`partitions.rs`), then batched deletes
//! by tuple id for what no day holds, each its own short statement, so no writer waits
//! behind a long one.

use async_trait::async_trait;
use chime_domain::Timestamp;

use super::PgStore;
use crate::{PurgeBefore, Purged, Retention, Rotated, StoreResult};

impl PgStore {
    /// Deletes at most `limit` occurrences in `statuses` due before `before` from the default
    /// partition; the day partitions go whole. A row changed since the inner select (a dead
    /// letter redriven) has a new tuple id and is left alone.
    async fn delete_old(
        &self,
        statuses: &[&str],
        before: Timestamp,
        limit: i64,
    ) -> StoreResult<u64> {
        Ok(sqlx::query(
            "DELETE FROM occurrences_default WHERE ctid = ANY(ARRAY( \
               SELECT ctid FROM occurrences_default \
               WHERE run_at < $1 AND status = ANY($2::text[]) LIMIT $3))",
        )
        .bind(before.as_millis())
        .bind(statuses)
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

#[async_trait]
impl Retention for PgStore {
    async fn rotate(
        &self,
        now: Timestamp,
        until: Timestamp,
        before: &PurgeBefore,
    ) -> StoreResult<Rotated> {
        self.rotate_days(now, until, before).await
    }

    async fn refresh_statistics(&self) -> StoreResult<u64> {
        self.refresh_partition_statistics().await
    }

    async fn purge(&self, before: &PurgeBefore, limit: u32) -> StoreResult<Purged> {
        let limit = i64::from(limit);
        let finished = self
            .delete_old(crate::FINISHED_STATUSES, before.history, limit)
            .await?;
        let dead = self.delete_old(&["dead"], before.dead, limit).await?;
        crate::sql::purge_beside_runs!(&self.pool, crate::sql::Postgres, before);
        let keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY( \
               SELECT ctid FROM idempotency_keys WHERE created_at < $1 LIMIT $2))",
        )
        .bind(before.idempotency_keys.as_millis())
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected();
        // A deleted timer goes with whatever rows it has left (its runs, a failure streak
        // it was deleted in), in one statement.
        let (timers, their_rows): (i64, i64) = sqlx::query_as(
            "WITH t AS (SELECT id FROM timers WHERE deleted_at < $1 ORDER BY deleted_at LIMIT $2), \
             o AS (DELETE FROM occurrences WHERE timer_id IN (SELECT id FROM t) RETURNING 1), \
             f AS (DELETE FROM failure_streaks WHERE timer_id IN (SELECT id FROM t)), \
             d AS (DELETE FROM timers WHERE id IN (SELECT id FROM t) RETURNING 1) \
             SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM o)",
        )
        .bind(before.deleted_timers.as_millis())
        .bind(limit)
        .fetch_one(&self.pool)
        .await?;
        Ok(Purged {
            occurrences: finished + dead + u64::try_from(their_rows).unwrap_or(0),
            idempotency_keys: keys,
            timers: u64::try_from(timers).unwrap_or(0),
        })
    }
}
