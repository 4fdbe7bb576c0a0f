//! What PostgreSQL wrote for the firings of a run: WAL bytes, and the rows inserted, updated
//! (how many of them HOT, without new index entries) and deleted in the scenario's own
//! tables, and the server's WAL flushes (the whole server's: nothing else runs during a
//! bench). Per firing, these say where the database's share of the CPU goes and what a
//! change to the statements saved, without a profiler or an extension on the server.

use serde::Serialize;

/// Counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct PgCounters {
    wal_bytes: f64,
    inserted: i64,
    updated: i64,
    hot_updated: i64,
    deleted: i64,
    wal_syncs: i64,
}

/// Between two samples, per firing.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub(super) struct PgWork {
    pub wal_bytes_per_firing: f64,
    pub rows_inserted_per_firing: f64,
    pub rows_updated_per_firing: f64,
    pub rows_deleted_per_firing: f64,
    /// Updates that were HOT (no index touched), of all updates.
    pub hot_update_share: f64,
    /// Times the server waited for its WAL to reach the disk, per 1,000 firings: each
    /// durable commit that found its log not yet flushed waits for one.
    pub wal_syncs_per_1000: f64,
}

impl PgCounters {
    /// `None` without a PostgreSQL pool or when the database cannot be read: the figures
    /// are a diagnosis, and a run without them still measures everything else.
    pub async fn take(pool: Option<&sqlx::PgPool>) -> Option<Self> {
        let pool = pool?;
        // A busy backend publishes its row counts once a second, an idle one up to 10 s
        // late (PostgreSQL 15): over a steady run the lag is the same at both samples and
        // cancels out; after a burst it does not (burst reports WAL only).
        type Row = (f64, i64, i64, i64, i64, i64);
        let (wal_bytes, inserted, updated, hot_updated, deleted, wal_syncs): Row = sqlx::query_as(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8, \
                   COALESCE(SUM(n_tup_ins), 0)::bigint, COALESCE(SUM(n_tup_upd), 0)::bigint, \
                   COALESCE(SUM(n_tup_hot_upd), 0)::bigint, COALESCE(SUM(n_tup_del), 0)::bigint, \
                   (SELECT wal_sync FROM pg_stat_wal)::bigint \
                 FROM pg_stat_user_tables WHERE schemaname = current_schema()",
        )
        .fetch_one(pool)
        .await
        .ok()?;
        Some(Self {
            wal_bytes,
            inserted,
            updated,
            hot_updated,
            deleted,
            wal_syncs,
        })
    }

    /// What was written from `self` to `later`, per one of `firings`.
    pub fn per_firing(&self, later: &Self, firings: usize) -> PgWork {
        let n = firings.max(1) as f64;
        let updated = later.updated - self.updated;
        PgWork {
            wal_bytes_per_firing: (later.wal_bytes - self.wal_bytes) / n,
            rows_inserted_per_firing: (later.inserted - self.inserted) as f64 / n,
            rows_updated_per_firing: updated as f64 / n,
            rows_deleted_per_firing: (later.deleted - self.deleted) as f64 / n,
            hot_update_share: if updated > 0 {
                (later.hot_updated - self.hot_updated) as f64 / updated as f64
            } else {
                0.0
            },
            wal_syncs_per_1000: (later.wal_syncs - self.wal_syncs) as f64 * 1000.0 / n,
        }
    }
}

impl PgWork {
    /// The report's row.
    pub fn describe(&self) -> String {
        format!(
            "{:.0} B WAL, {:.1} WAL flushes per 1,000; rows {:.2} inserted, {:.2} updated ({:.0} % HOT), {:.2} deleted",
            self.wal_bytes_per_firing,
            self.wal_syncs_per_1000,
            self.rows_inserted_per_firing,
            self.rows_updated_per_firing,
            self.hot_update_share * 100.0,
            self.rows_deleted_per_firing
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_firing_divides_the_differences() {
        let before = PgCounters {
            wal_bytes: 1_000.0,
            inserted: 10,
            updated: 100,
            hot_updated: 40,
            deleted: 0,
            wal_syncs: 7,
        };
        let after = PgCounters {
            wal_bytes: 201_000.0,
            inserted: 110,
            updated: 300,
            hot_updated: 90,
            deleted: 50,
            wal_syncs: 37,
        };
        let w = before.per_firing(&after, 100);
        assert_eq!(w.wal_bytes_per_firing, 2_000.0);
        assert_eq!(w.rows_inserted_per_firing, 1.0);
        assert_eq!(w.rows_updated_per_firing, 2.0);
        assert_eq!(w.rows_deleted_per_firing, 0.5);
        assert_eq!(w.hot_update_share, 0.25);
        assert_eq!(w.wal_syncs_per_1000, 300.0);
        assert_eq!(
            w.describe(),
            "2000 B WAL, 300.0 WAL flushes per 1,000; rows 1.00 inserted, 2.00 updated (25 % HOT), 0.50 deleted"
        );
    }

    #[test]
    fn no_firings_and_no_updates_divide_by_nothing() {
        let c = PgCounters::default();
        let w = c.per_firing(&c, 0);
        assert_eq!(w.wal_bytes_per_firing, 0.0);
        assert_eq!(w.hot_update_share, 0.0);
    }
}
