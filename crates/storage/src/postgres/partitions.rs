//! Day partitions of `occurrences` (migration 0005): `occurrences_pYYYYMMDD` holds the rows
//! due on that UTC day, `occurrences_default` every row no day covers.
//!
//! Creating a day moves its rows out of the default partition and attaches the new table
//! (a share lock on the parent: readers and writers go on; the default partition is locked
//! while PostgreSQL checks it holds nothing of that day, so keeping it small matters).
//! Dropping a day detaches it, moves its unfinished rows and kept dead letters into the
//! default partition, and drops the table: one short exclusive lock on the parent, bounded by
//! [`LOCK_TIMEOUT`], instead of millions of deletes.

use chime_domain::Timestamp;
use chrono::{DateTime, NaiveDate};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres};

use super::PgStore;
use crate::{PurgeBefore, Rotated, StoreResult};

const DAY_MS: i64 = 86_400_000;
const PREFIX: &str = "occurrences_p";
/// The longest any statement here waits for a table lock. Queries queue behind a waiting
/// exclusive lock, so this is also what a writer waits at worst; on timeout the janitor
/// tries again on its next run.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '50ms'";
/// The advisory lock one rotation holds, so one runs at a time whichever replica holds the
/// janitor lease; [`RotationPause`] holds it too.
const ROTATION_LOCK: i64 = 0x6368_696d_6500_0005;

/// The UTC day `t` falls in, as days since the epoch.
fn day_of(t: Timestamp) -> i64 {
    t.as_millis().div_euclid(DAY_MS)
}

/// `occurrences_p20261123` for that day; `None` outside years 0–9999.
fn table(day: i64) -> Option<String> {
    let date = DateTime::from_timestamp_millis(day.checked_mul(DAY_MS)?)?.date_naive();
    (0..=9999)
        .contains(&chrono::Datelike::year(&date))
        .then(|| format!("{PREFIX}{}", date.format("%Y%m%d")))
}

fn day_of_table(name: &str) -> Option<i64> {
    let date = NaiveDate::parse_from_str(name.strip_prefix(PREFIX)?, "%Y%m%d").ok()?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    Some((date - epoch).num_days())
}

/// Rotation held off: while this lives, no janitor creates or drops a day. For seeding
/// history into past days (a benchmark) without the janitor dropping it half written.
pub struct RotationPause {
    conn: PoolConnection<Postgres>,
}

impl RotationPause {
    /// Creates the day partitions from `from` to `until` that do not exist yet, moving in
    /// the rows the default partition holds for them; returns how many.
    pub async fn add_days(&mut self, from: Timestamp, until: Timestamp) -> StoreResult<u64> {
        let days = attached_days(&mut self.conn).await?;
        create_days(&mut self.conn, day_of(from), day_of(until), &days).await
    }

    /// Lets rotation go on.
    pub async fn resume(mut self) -> StoreResult<()> {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(ROTATION_LOCK)
            .execute(&mut *self.conn)
            .await?;
        Ok(())
    }
}

impl PgStore {
    /// Waits for a running rotation, then holds rotation off until the pause is resumed or
    /// dropped (a dropped pause closes its connection, which ends the hold).
    pub async fn pause_rotation(&self) -> StoreResult<RotationPause> {
        let mut conn = self.pool.acquire().await?;
        conn.close_on_drop();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(ROTATION_LOCK)
            .execute(&mut *conn)
            .await?;
        Ok(RotationPause { conn })
    }

    pub(super) async fn rotate_days(
        &self,
        now: Timestamp,
        until: Timestamp,
        before: &PurgeBefore,
    ) -> StoreResult<Rotated> {
        let mut conn = self.pool.acquire().await?;
        locked(&mut conn, async |conn| {
            rotate(conn, now, until, before).await
        })
        .await
    }
}

/// Runs `f` holding the rotation lock on `conn`.
async fn locked<T>(
    conn: &mut PgConnection,
    f: impl AsyncFnOnce(&mut PgConnection) -> StoreResult<T>,
) -> StoreResult<T> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(ROTATION_LOCK)
        .execute(&mut *conn)
        .await?;
    let out = f(&mut *conn).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(ROTATION_LOCK)
        .execute(&mut *conn)
        .await;
    let out = out?;
    unlocked?;
    Ok(out)
}

async fn create_days(
    conn: &mut PgConnection,
    from: i64,
    to: i64,
    existing: &[i64],
) -> StoreResult<u64> {
    let mut created = 0;
    for day in (from..=to).filter(|d| !existing.contains(d)) {
        if create_day(conn, day).await? {
            created += 1;
        }
    }
    Ok(created)
}

async fn rotate(
    conn: &mut PgConnection,
    now: Timestamp,
    until: Timestamp,
    before: &PurgeBefore,
) -> StoreResult<Rotated> {
    let mut done = Rotated::default();
    // Days an earlier run detached but did not get to drop.
    for name in detached_tables(conn).await? {
        done.occurrences += drop_detached(conn, &name).await?;
        done.dropped += 1;
    }
    let mut days = attached_days(conn).await?;
    days.sort_unstable();
    // Days wholly before the history cutoff go; their live rows move to the default.
    for &day in days
        .iter()
        .filter(|d| (**d + 1) * DAY_MS <= before.history.as_millis())
    {
        done.occurrences += drop_day(conn, day, before.dead).await?;
        done.dropped += 1;
    }
    // New days continue after the last one, never before today: rows of days the
    // janitor missed stay in the default partition, which purge() handles.
    let first = days
        .last()
        .map_or(day_of(now), |last| (last + 1).max(day_of(now)));
    done.created = create_days(conn, first, day_of(until), &days).await?;
    Ok(done)
}

/// Day tables in this schema that are no longer partitions: detached, not yet dropped.
async fn detached_tables(conn: &mut PgConnection) -> StoreResult<Vec<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class \
         WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' \
           AND NOT relispartition AND starts_with(relname::text, $1)",
    )
    .bind(PREFIX)
    .fetch_all(&mut *conn)
    .await?;
    Ok(names
        .into_iter()
        .filter(|n| day_of_table(n).is_some())
        .collect())
}

async fn attached_days(conn: &mut PgConnection) -> StoreResult<Vec<i64>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'occurrences'::regclass",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(names.iter().filter_map(|n| day_of_table(n)).collect())
}

/// Creates `day`'s partition with the rows the default partition holds for it. `false` for
/// a day outside the years a table name can carry.
async fn create_day(conn: &mut PgConnection, day: i64) -> StoreResult<bool> {
    let Some(name) = table(day) else {
        return Ok(false);
    };
    let (lo, hi) = (day * DAY_MS, (day + 1) * DAY_MS);
    let mut tx = conn.begin().await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE \"{name}\" (LIKE occurrences INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )))
    .execute(&mut *tx)
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        concat!(
            "WITH moved AS (DELETE FROM occurrences_default WHERE run_at >= $1 AND run_at < $2 \
               RETURNING ",
            occurrence_cols!(),
            ") INSERT INTO \"{}\" (",
            occurrence_cols!(),
            ") SELECT ",
            occurrence_cols!(),
            " FROM moved"
        ),
        name
    )))
    .bind(lo)
    .bind(hi)
    .execute(&mut *tx)
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        "ALTER TABLE occurrences ATTACH PARTITION \"{name}\" FOR VALUES FROM ({lo}) TO ({hi})"
    )))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Drops `day`'s partition, keeping its pending, retrying and running rows and its dead
/// letters due at or after `keep_dead`. Returns the rows removed.
async fn drop_day(conn: &mut PgConnection, day: i64, keep_dead: Timestamp) -> StoreResult<u64> {
    let Some(name) = table(day) else {
        return Ok(0);
    };
    let mut tx = conn.begin().await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    sqlx::query(AssertSqlSafe(format!(
        "ALTER TABLE occurrences DETACH PARTITION \"{name}\""
    )))
    .execute(&mut *tx)
    .await?;
    // Each arm matches a partial index's predicate: the kept rows are found without reading
    // the day's finished ones while the parent is locked.
    sqlx::query("SET LOCAL enable_seqscan = off")
        .execute(&mut *tx)
        .await?;
    let cols = occurrence_cols!();
    sqlx::query(AssertSqlSafe(format!(
        "WITH kept AS ( \
           DELETE FROM \"{name}\" WHERE status IN ('pending', 'retrying') RETURNING {cols}), \
         running AS ( \
           DELETE FROM \"{name}\" WHERE status = 'running' RETURNING {cols}), \
         dead AS ( \
           DELETE FROM \"{name}\" WHERE status = 'dead' AND run_at >= $1 RETURNING {cols}) \
         INSERT INTO occurrences ({cols}) \
         SELECT {cols} FROM kept UNION ALL SELECT {cols} FROM running \
         UNION ALL SELECT {cols} FROM dead"
    )))
    .bind(keep_dead.as_millis())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    // Detached, the table is nobody's: counting and dropping it holds no one up.
    drop_detached(conn, &name).await
}

/// Drops a detached day table; returns the rows it held.
async fn drop_detached(conn: &mut PgConnection, name: &str) -> StoreResult<u64> {
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM \"{name}\"")))
        .fetch_one(&mut *conn)
        .await?;
    sqlx::query(AssertSqlSafe(format!("DROP TABLE \"{name}\"")))
        .execute(&mut *conn)
        .await?;
    Ok(u64::try_from(rows).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_tables_name_their_utc_day() {
        let t = Timestamp::from_millis(1_795_392_000_000 + 3_600_000); // 2026-11-23T01:00Z
        let day = day_of(t);
        assert_eq!(table(day).as_deref(), Some("occurrences_p20261123"));
        assert_eq!(day_of_table("occurrences_p20261123"), Some(day));
        assert_eq!(day_of(Timestamp::from_millis(-1)), -1);
        assert_eq!(table(-1).as_deref(), Some("occurrences_p19691231"));
        assert_eq!(day_of_table("occurrences_default"), None);
        assert_eq!(table(i64::MAX / DAY_MS), None);
    }
}
