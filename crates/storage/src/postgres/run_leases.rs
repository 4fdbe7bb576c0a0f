//! [`RunLeases`] on PostgreSQL, for services run without Redis: one row per held lease in
//! the UNLOGGED `run_leases` (migration 0016), expiring by the database's clock. The
//! migrator's step prunes leases that lapsed without being freed (their executor died).

use std::time::Duration;

use async_trait::async_trait;
use chime_domain::TaskKey;

use super::hot_index::{DB_NOW, PgHotPath};
use crate::{RunLeases, StoreResult, rows};

fn columns(runs: &[TaskKey]) -> (Vec<i64>, Vec<i64>) {
    runs.iter()
        .map(|k| (k.timer_id.get(), k.run_at.as_millis()))
        .unzip()
}

/// Which of `runs` are among `found`, in order.
fn flags(runs: &[TaskKey], found: &[sqlx::postgres::PgRow]) -> StoreResult<Vec<bool>> {
    let found: std::collections::HashSet<TaskKey> = found
        .iter()
        .map(rows::task_key)
        .collect::<StoreResult<_>>()?;
    Ok(runs.iter().map(|r| found.contains(r)).collect())
}

impl PgHotPath {
    /// Deletes leases that lapsed a minute ago and were never freed.
    pub(super) async fn prune_run_leases(&self) -> StoreResult<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM run_leases WHERE until < {DB_NOW} - 60000"
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[async_trait]
impl RunLeases for PgHotPath {
    async fn take_runs(&self, runs: &[TaskKey], ttl: Duration) -> StoreResult<Vec<bool>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = columns(runs);
        // In key order, so concurrent takers lock rows in the same order; a lapsed lease is
        // taken over, a live one left alone (and not returned).
        let taken = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO run_leases AS l (timer_id, run_at, until) \
             SELECT DISTINCT k.timer_id, k.run_at, {DB_NOW} + $3 \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             ORDER BY k.timer_id, k.run_at \
             ON CONFLICT (timer_id, run_at) DO UPDATE SET until = excluded.until \
             WHERE l.until <= {DB_NOW} \
             RETURNING l.timer_id, l.run_at"
        )))
        .bind(ids)
        .bind(run_ats)
        .bind(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        // A run named twice in one call is taken once.
        let mut flags = flags(runs, &taken)?;
        let mut seen = std::collections::HashSet::new();
        for (run, flag) in runs.iter().zip(flags.iter_mut()) {
            if !seen.insert(*run) {
                *flag = false;
            }
        }
        Ok(flags)
    }

    async fn free_runs(&self, runs: &[TaskKey]) -> StoreResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        let (ids, run_ats) = columns(runs);
        sqlx::query(
            "DELETE FROM run_leases l USING UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             WHERE l.timer_id = k.timer_id AND l.run_at = k.run_at",
        )
        .bind(ids)
        .bind(run_ats)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A lease here is a row write itself: a written run is claimed on its row instead.
    fn apart_from_store(&self) -> bool {
        false
    }

    async fn runs_held(&self, runs: &[TaskKey]) -> StoreResult<Vec<bool>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = columns(runs);
        let held = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT l.timer_id, l.run_at FROM run_leases l \
             JOIN UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
               ON l.timer_id = k.timer_id AND l.run_at = k.run_at \
             WHERE l.until > {DB_NOW}"
        )))
        .bind(ids)
        .bind(run_ats)
        .fetch_all(&self.pool)
        .await?;
        flags(runs, &held)
    }
}
