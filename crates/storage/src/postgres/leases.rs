//! [`Leases`] and [`Membership`] on PostgreSQL, for services run without Redis: one row per
//! lease (holder token, expiry, and a fencing number that grows each time it changes hands)
//! and one per live member, in UNLOGGED tables (migration 0012). Every decision is one
//! statement and uses the database's clock, so replicas agree whatever their own clocks say.

use std::time::Duration;

use async_trait::async_trait;

use super::hot_index::{DB_NOW, PgHotPath};
use crate::{LeaseToken, Leases, Membership, StoreResult};

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PgHotPath {
    /// Takes the lease unless a holder that `keeps` (SQL over the current row `l`) has it.
    async fn claim(
        &self,
        name: &str,
        token: &LeaseToken,
        ttl: Duration,
        keeps: &str,
        live: &[String],
    ) -> StoreResult<bool> {
        // The upsert only overwrites a row the current holder no longer keeps; RETURNING
        // says whether this statement wrote it.
        let taken: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "INSERT INTO leases AS l (name, token, until, fence) \
             VALUES ($1, $2, {DB_NOW} + $3, 1) \
             ON CONFLICT (name) DO UPDATE SET token = excluded.token, until = excluded.until, \
                 fence = l.fence + 1 \
             WHERE NOT ({keeps}) \
             RETURNING token"
        )))
        .bind(name)
        .bind(token.as_str())
        .bind(ms(ttl))
        .bind(live)
        .fetch_optional(&self.pool)
        .await?;
        Ok(taken.is_some())
    }
}

#[async_trait]
impl Leases for PgHotPath {
    async fn acquire(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let keeps = format!("l.until > {DB_NOW}");
        self.claim(name, token, ttl, &keeps, &[]).await
    }

    async fn renew(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let renewed = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE leases SET until = {DB_NOW} + $3 \
             WHERE name = $1 AND token = $2 AND until > {DB_NOW}"
        )))
        .bind(name)
        .bind(token.as_str())
        .bind(ms(ttl))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(renewed == 1)
    }

    async fn release(&self, name: &str, token: &LeaseToken) -> StoreResult<bool> {
        let released = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM leases WHERE name = $1 AND token = $2 AND until > {DB_NOW}"
        )))
        .bind(name)
        .bind(token.as_str())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(released == 1)
    }

    async fn take(
        &self,
        name: &str,
        token: &LeaseToken,
        ttl: Duration,
        live: &[String],
    ) -> StoreResult<bool> {
        // Kept while unexpired and held by this token (it holds it already) or a live member.
        let keeps = format!("l.until > {DB_NOW} AND (l.token = $2 OR l.token = ANY($4::text[]))");
        self.claim(name, token, ttl, &keeps, live).await
    }
}

#[async_trait]
impl Membership for PgHotPath {
    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        ttl: Duration,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO group_members (grp, member, until) VALUES ($1, $2, {DB_NOW} + $3) \
             ON CONFLICT (grp, member) DO UPDATE SET until = excluded.until"
        )))
        .bind(group)
        .bind(member)
        .bind(ms(ttl))
        .execute(&mut *tx)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM group_members WHERE grp = $1 AND until <= {DB_NOW}"
        )))
        .bind(group)
        .execute(&mut *tx)
        .await?;
        let live: Vec<String> =
            sqlx::query_scalar("SELECT member FROM group_members WHERE grp = $1 ORDER BY member")
                .bind(group)
                .fetch_all(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(live)
    }

    async fn leave(&self, group: &str, member: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM group_members WHERE grp = $1 AND member = $2")
            .bind(group)
            .bind(member)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn members(&self, group: &str) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT member FROM group_members WHERE grp = $1 AND until > {DB_NOW} \
             ORDER BY member"
        )))
        .bind(group)
        .fetch_all(&self.pool)
        .await?)
    }
}
