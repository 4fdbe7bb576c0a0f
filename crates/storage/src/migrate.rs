//! Embedded schema migrations. The `.sql` files are compiled in, so a binary carries exactly
//! the schema it was built for. sqlx runs them, under an advisory lock on PostgreSQL, and
//! records each applied version with its checksum, so running twice changes nothing and an
//! edited migration is refused.

use std::borrow::Cow;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use crate::{StoreError, StoreResult};

/// (version, description, sql) of each migration, in order.
const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "timers and occurrences",
        include_str!("../../../migrations/postgres/0001_timers_and_occurrences.sql"),
    ),
    (
        2,
        "idempotency keys",
        include_str!("../../../migrations/postgres/0002_idempotency_keys.sql"),
    ),
    (
        3,
        "watermarks",
        include_str!("../../../migrations/postgres/0003_watermarks.sql"),
    ),
    (
        4,
        "retention",
        include_str!("../../../migrations/postgres/0004_retention.sql"),
    ),
    (
        5,
        "partitions",
        include_str!("../../../migrations/postgres/0005_partitions.sql"),
    ),
    (
        6,
        "lean timers",
        include_str!("../../../migrations/postgres/0006_lean_timers.sql"),
    ),
    (
        7,
        "credentials",
        include_str!("../../../migrations/postgres/0007_credentials.sql"),
    ),
    (
        8,
        "pause notes",
        include_str!("../../../migrations/postgres/0008_pause_notes.sql"),
    ),
    (
        9,
        "backfill",
        include_str!("../../../migrations/postgres/0009_backfill.sql"),
    ),
    (
        10,
        "calendars",
        include_str!("../../../migrations/postgres/0010_calendars.sql"),
    ),
    (
        11,
        "activity",
        include_str!("../../../migrations/postgres/0011_activity.sql"),
    ),
    (
        12,
        "hot path",
        include_str!("../../../migrations/postgres/0012_hot_path.sql"),
    ),
    (
        13,
        "notifications",
        include_str!("../../../migrations/postgres/0013_notifications.sql"),
    ),
    (
        14,
        "chains",
        include_str!("../../../migrations/postgres/0014_chains.sql"),
    ),
    (
        15,
        "run shards",
        include_str!("../../../migrations/postgres/0015_run_shards.sql"),
    ),
    (
        16,
        "unwritten runs",
        include_str!("../../../migrations/postgres/0016_unwritten_runs.sql"),
    ),
];

const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "timers and occurrences",
        include_str!("../../../migrations/sqlite/0001_timers_and_occurrences.sql"),
    ),
    (
        2,
        "idempotency keys",
        include_str!("../../../migrations/sqlite/0002_idempotency_keys.sql"),
    ),
    (
        3,
        "watermarks",
        include_str!("../../../migrations/sqlite/0003_watermarks.sql"),
    ),
    (
        4,
        "retention",
        include_str!("../../../migrations/sqlite/0004_retention.sql"),
    ),
    (
        5,
        "partitions",
        include_str!("../../../migrations/sqlite/0005_partitions.sql"),
    ),
    (
        6,
        "lean timers",
        include_str!("../../../migrations/sqlite/0006_lean_timers.sql"),
    ),
    (
        7,
        "credentials",
        include_str!("../../../migrations/sqlite/0007_credentials.sql"),
    ),
    (
        8,
        "pause notes",
        include_str!("../../../migrations/sqlite/0008_pause_notes.sql"),
    ),
    (
        9,
        "backfill",
        include_str!("../../../migrations/sqlite/0009_backfill.sql"),
    ),
    (
        10,
        "calendars",
        include_str!("../../../migrations/sqlite/0010_calendars.sql"),
    ),
    (
        11,
        "activity",
        include_str!("../../../migrations/sqlite/0011_activity.sql"),
    ),
    (
        12,
        "notifications",
        include_str!("../../../migrations/sqlite/0012_notifications.sql"),
    ),
    (
        13,
        "chains",
        include_str!("../../../migrations/sqlite/0013_chains.sql"),
    ),
    (
        14,
        "run shards",
        include_str!("../../../migrations/sqlite/0014_run_shards.sql"),
    ),
    (
        15,
        "unwritten runs",
        include_str!("../../../migrations/sqlite/0015_unwritten_runs.sql"),
    ),
];

const MYSQL: &[(i64, &str, &str)] = &[
    (
        1,
        "schema",
        include_str!("../../../migrations/mysql/0001_schema.sql"),
    ),
    (
        2,
        "notifications",
        include_str!("../../../migrations/mysql/0002_notifications.sql"),
    ),
    (
        3,
        "chains",
        include_str!("../../../migrations/mysql/0003_chains.sql"),
    ),
    (
        4,
        "run shards",
        include_str!("../../../migrations/mysql/0004_run_shards.sql"),
    ),
    (
        5,
        "unwritten runs",
        include_str!("../../../migrations/mysql/0005_unwritten_runs.sql"),
    ),
];

fn migrator(files: &'static [(i64, &'static str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        files
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

pub fn postgres_migrator() -> Migrator {
    migrator(POSTGRES)
}

pub fn sqlite_migrator() -> Migrator {
    migrator(SQLITE)
}

pub fn mysql_migrator() -> Migrator {
    migrator(MYSQL)
}

/// How a database's schema compares to what this binary expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaStatus {
    Current,
    /// Migrations this binary has that the database lacks: run `chime-migrator migrate`.
    Behind {
        missing: Vec<i64>,
    },
}

pub(crate) fn compare(expected: &Migrator, applied: &[i64]) -> SchemaStatus {
    let missing: Vec<i64> = expected
        .iter()
        .map(|m| m.version)
        .filter(|v| !applied.contains(v))
        .collect();
    if missing.is_empty() {
        SchemaStatus::Current
    } else {
        SchemaStatus::Behind { missing }
    }
}

/// Versions recorded as applied; none if the bookkeeping table does not exist yet.
pub(crate) fn applied_versions_or_none(
    result: Result<Vec<i64>, sqlx::Error>,
) -> StoreResult<Vec<i64>> {
    match result {
        Ok(v) => Ok(v),
        // 42P01 (PostgreSQL) / 42S02 (MySQL) / "no such table" (SQLite): never migrated.
        Err(sqlx::Error::Database(db))
            if matches!(db.code().as_deref(), Some("42P01" | "42S02"))
                || db.message().contains("no such table") =>
        {
            Ok(Vec::new())
        }
        Err(e) => Err(StoreError::from(e)),
    }
}
