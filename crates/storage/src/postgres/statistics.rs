//! Statistics of the occurrence partitions kept true to their size.
//!
//! The hot path's statements are prepared once per connection and, after a few executions,
//! run on a generic plan that trusts each partition's statistics. A partition analyzed while
//! it was empty or tiny (a nightly `vacuumdb --analyze` reaching tomorrow's day; the first
//! minutes of a day) is planned as holding nothing, so a plan cached then scans it whole for
//! every key, and keeps doing so as the day fills until autovacuum analyzes it again — a
//! minute or more at thousands of rows a second. Re-planning each statement instead costs
//! 20–55 % more database time per firing (`scripts/pg-claim-cycle`), so the statistics are
//! kept true instead: a partition that has more than doubled since its last analysis is
//! analyzed again, which also invalidates the plans cached on it.

use sqlx::AssertSqlSafe;

use super::PgStore;
use crate::StoreResult;

/// One refresher at a time across replicas; the others skip the round.
const STATISTICS_LOCK: i64 = 0x6368_696d_6500_0006;

/// Pages a partition may grow past twice its analyzed size before it is analyzed again: a
/// plan for a handful of pages is right whatever it chose.
const SLACK_PAGES: i64 = 8;

impl PgStore {
    /// Analyzes each occurrence partition that was analyzed (never-analyzed ones are planned
    /// by their actual size) and has since grown past twice its pages then, plus
    /// [`SLACK_PAGES`]. Returns how many it analyzed; 0 when another replica is at it.
    pub(super) async fn refresh_partition_statistics(&self) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let mine: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(STATISTICS_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !mine {
            return Ok(0);
        }
        // Sizing a partition and analyzing it wait for no writer, only for the rotation's
        // schema changes and for vacuums; behind one of those the round gives up and the
        // next one tries again.
        sqlx::query("SET LOCAL lock_timeout = '1s'")
            .execute(&mut *tx)
            .await?;
        let stale: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'occurrences'::regclass AND c.reltuples >= 0 \
               AND pg_relation_size(c.oid) / current_setting('block_size')::bigint \
                   > 2 * c.relpages + $1",
        )
        .bind(SLACK_PAGES)
        .fetch_all(&mut *tx)
        .await?;
        for name in &stale {
            sqlx::query(AssertSqlSafe(format!("ANALYZE \"{name}\"")))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(stale.len() as u64)
    }
}
