//! The storage contract and the migrations against a real PostgreSQL.

use chime_storage::testkit as support;

use chime_storage::{SchemaStatus, storage_contract};

storage_contract!(timer_store, support::pg());
storage_contract!(occurrence_store, support::pg());
storage_contract!(materialize, support::pg());
storage_contract!(retention, support::pg());
storage_contract!(lifecycle, support::pg());
storage_contract!(backfill, support::pg());
storage_contract!(credentials, support::pg());
storage_contract!(activity, support::pg());
// PostgreSQL-only mode: the hot index, leases and membership in the database.
storage_contract!(hot_index, support::pg());
storage_contract!(leases, support::pg());
storage_contract!(membership, support::pg());
storage_contract!(calendars, support::pg());
storage_contract!(notifications, support::pg());
storage_contract!(chains, support::pg());
storage_contract!(shards, support::pg());
storage_contract!(unwritten, support::pg());
storage_contract!(run_leases, support::pg());

mod migrations {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migrating_twice_changes_nothing() {
        let fx = support::pg_unmigrated().await;
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Behind {
                missing: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
            }
        );
        fx.store.migrate().await.unwrap();
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Current
        );
        fx.store.migrate().await.unwrap();
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Current
        );
    }

    /// Replicas starting together must not trip over each other's DDL: the advisory lock
    /// serialises them and all but the first find nothing to do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_migrations_apply_once() {
        let fx = support::pg_unmigrated().await;
        let runs: Vec<_> = (0..4)
            .map(|_| {
                let store = fx.store();
                tokio::spawn(async move { store.migrate().await })
            })
            .collect();
        for run in runs {
            run.await.unwrap().unwrap();
        }
        let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
            .fetch_one(fx.store.pool())
            .await
            .unwrap();
        assert_eq!(applied, 16);
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Current
        );
    }
}

/// A service pointed at a dead database must say so at start-up, not hang.
#[tokio::test]
async fn unreachable_database_fails_fast_with_a_retryable_error() {
    use std::time::Duration;
    let settings = chime_storage::postgres::PgSettings {
        max_connections: 2,
        acquire_timeout: Duration::from_secs(2),
    };
    let clock: std::sync::Arc<dyn chime_domain::Clock> =
        std::sync::Arc::new(chime_domain::SystemClock);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        chime_storage::postgres::PgStore::connect(
            "postgres://postgres@127.0.0.1:1/test",
            &settings,
            clock,
            chime_domain::BucketCount::DEFAULT,
        ),
    )
    .await
    .expect("connect must not hang");
    let err = result.expect_err("nothing listens on port 1");
    assert!(err.is_retryable(), "{err}");
}

/// SQLSTATE 22021 (a NUL in text) is all digits with 5 in its low byte, SQLite's BUSY: it
/// was once read as a transient error and answered "retry shortly" (503) for ever.
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[tokio::test]
async fn a_refused_value_is_not_a_retryable_error() {
    use chime_storage::{PageRequest, TimerFilter, TimerStore};
    let fx = support::pg().await;
    let filter = TimerFilter {
        name_prefix: Some("a\0b".into()),
        ..TimerFilter::default()
    };
    let err = fx
        .store
        .list_timers(&filter, &PageRequest::default())
        .await
        .expect_err("PostgreSQL refuses NUL in text");
    assert!(!err.is_retryable(), "{err}");
}

/// Re-materializing rows that exist (every migrator step re-writes half its horizon) must
/// not lock them: a claim holding one must neither be waited for nor deadlocked with.
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_existing_occurrences_does_not_wait_for_their_row_locks() {
    use chime_domain::{Bucket, NewOccurrence, TaskKey, TimerId, Timestamp};
    use chime_storage::OccurrenceStore;
    use sqlx::Connection;

    let fx = support::pg().await;
    let row = NewOccurrence {
        key: TaskKey::new(TimerId::new(7).unwrap(), Timestamp::from_millis(1_000)),
        timer_version: 1,
        bucket: Bucket::of(TimerId::new(7).unwrap(), chime_domain::BucketCount::DEFAULT),
        due: None,
    };
    assert_eq!(fx.store.insert_occurrences(&[row]).await.unwrap(), 1);
    // Another session holds the row, as a claim or an outcome write does.
    let mut other = sqlx::PgConnection::connect(&fx.url()).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM occurrences WHERE timer_id = 7 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rewrite = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        fx.store.insert_occurrences(&[row]),
    )
    .await
    .expect("the re-write waited for the other session's row lock");
    assert_eq!(rewrite.unwrap(), 0);
    tx.rollback().await.unwrap();
}

/// The executor's per-batch reads must cost one index probe per key however the plan cache
/// plans them. PostgreSQL plans a prepared statement's first five executions on a
/// connection for the actual arguments, and for a few hundred keys those custom plans
/// hashed a sequential scan of every occurrence: a fresh deployment's burst ran on them.
/// Counted through the table statistics, on one connection so its counts can be flushed.
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_timer_reads_probe_by_key_on_a_fresh_connection() {
    use chime_domain::{Claim, TaskKey, TimerId, Timestamp};
    use chime_storage::{OccurrenceStore, TimerStore};

    const ROWS: i64 = 20_000;
    const KEYS: i64 = 500;
    let fx = support::pg().await;
    let store = one_connection(&fx).await;
    let pool = store.pool();
    let first = store
        .create_timer(
            chime_storage::contract::new_timer("plans", "t0"),
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap()
        .timer;
    // Many timers and due occurrences, with fresh statistics, as a burst leaves them.
    sqlx::query(
        "INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
           created_at, updated_at) \
         SELECT g, app, 't' || g, schedule_kind, spec, enabled, version, bucket, created_at, \
           updated_at FROM timers, generate_series(2, $1) g WHERE id = $2",
    )
    .bind(ROWS)
    .bind(first.id.get())
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
         SELECT g, 1000, 1, 0 FROM generate_series(1, $1) g",
    )
    .bind(ROWS)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE timers, occurrences")
        .execute(pool)
        .await
        .unwrap();
    // [index scans, sequential scans] of timers, then of occurrences (all its partitions),
    // with everything this (only) connection did so far counted.
    let scans = || async {
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(pool)
            .await
            .unwrap();
        let counts: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT \
               COALESCE(SUM(idx_scan) FILTER (WHERE relname = 'timers'), 0)::bigint, \
               COALESCE(SUM(seq_scan) FILTER (WHERE relname = 'timers'), 0)::bigint, \
               COALESCE(SUM(idx_scan) FILTER (WHERE relname LIKE 'occurrences%'), 0)::bigint, \
               COALESCE(SUM(seq_scan) FILTER (WHERE relname LIKE 'occurrences%'), 0)::bigint \
             FROM pg_stat_user_tables WHERE schemaname = current_schema()",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        <[i64; 4]>::from(counts)
    };
    let before = scans().await;

    let ids: Vec<TimerId> = (1..=KEYS).map(|i| TimerId::new(i).unwrap()).collect();
    assert_eq!(store.get_timers(&ids).await.unwrap().len(), KEYS as usize);
    let keys: Vec<TaskKey> = ids
        .iter()
        .map(|&id| TaskKey::new(id, Timestamp::from_millis(1000)))
        .collect();
    let claim = Claim {
        now: Timestamp::from_millis(2000),
        lease_until: Timestamp::from_millis(60_000),
    };
    assert_eq!(
        store.claim(&keys, claim).await.unwrap().len(),
        KEYS as usize
    );

    let after = scans().await;
    let delta: [i64; 4] = std::array::from_fn(|i| after[i] - before[i]);
    // Timers: one probe per key by the read, one by the claim (the version it reports).
    assert_eq!(
        delta,
        [2 * KEYS, 0, KEYS, 0],
        "[index, sequential] scans of timers, then of occurrences"
    );
}

/// A day detached by a rotation that stopped before dropping it (a crash, a lost
/// connection) is dropped by the next rotation and its rows counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_drops_a_day_left_detached() {
    use chime_domain::Timestamp;
    use chime_storage::{PurgeBefore, Retention, Rotated};

    const DAY: i64 = 86_400_000;
    let fx = support::pg().await;
    let (store, pool) = (&fx.store, fx.store.pool());
    let t0 = Timestamp::from_millis(1_893_456_000_000); // 2030-01-01T00:00Z
    let keep = PurgeBefore {
        history: Timestamp::from_millis(0),
        dead: Timestamp::from_millis(0),
        idempotency_keys: Timestamp::from_millis(0),
        deleted_timers: Timestamp::from_millis(0),
    };
    let made = store.rotate(t0, t0.add_millis(DAY), &keep).await.unwrap();
    assert_eq!(made.created, 2);
    sqlx::query(
        "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, status) \
         SELECT g, $1 + g, 1, 0, 'succeeded' FROM generate_series(1, 3) g",
    )
    .bind(t0.as_millis())
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ALTER TABLE occurrences DETACH PARTITION occurrences_p20300101")
        .execute(pool)
        .await
        .unwrap();

    let again = store.rotate(t0, t0.add_millis(DAY), &keep).await.unwrap();
    assert_eq!(
        again,
        Rotated {
            created: 0,
            dropped: 1,
            occurrences: 3
        }
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relname = 'occurrences_p20300101' \
         AND relnamespace = current_schema()::regnamespace",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

/// PostgreSQL-only mode: a service given a PostgreSQL URL and no Redis keeps its hot index,
/// leases and membership in the database, shared by every process on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_postgres_service_keeps_its_hot_path_in_the_database() {
    use chime_domain::{Bucket, ShardKey, SystemClock, TaskKey, TimerId};
    use chime_storage::{HotEntry, HotPath, LeaseToken, StoreSettings, Stores};

    let fixture = support::pg().await;
    let settings = StoreSettings {
        buckets: chime_domain::BucketCount::DEFAULT,
        postgres: Default::default(),
        redis_url: None,
        redis: Default::default(),
        index_lead: std::time::Duration::from_secs(60),
    };
    let url = fixture.url();
    let open = || {
        Stores::open(
            &settings,
            &url,
            std::sync::Arc::new(SystemClock),
            HotPath::Configured,
            false,
        )
    };
    let (a, b) = (open().await.unwrap(), open().await.unwrap());
    let (index_a, leases_a) = a.hot_path().expect("a hot path without Redis");
    let (index_b, leases_b) = b.hot_path().unwrap();

    let due = chime_domain::Clock::now(&SystemClock).add_millis(10_000);
    let key = TaskKey::new(TimerId::new(7).unwrap(), due);
    let bucket = Bucket::from_stored(3);
    index_a
        .add(&[HotEntry::new(key, due, bucket)])
        .await
        .unwrap();
    let shard = ShardKey::new(due, bucket);
    assert!(!index_b.shard_complete(shard).await.unwrap());
    index_a.touch(&[shard]).await.unwrap();
    assert!(index_b.shard_complete(shard).await.unwrap());
    assert_eq!(index_b.due(shard, due, 10).await.unwrap(), vec![(key, due)]);
    // Far ahead of the lead: left to the database until its shard is built.
    let later = due.add_millis(3_600_000);
    let far = TaskKey::new(TimerId::new(8).unwrap(), later);
    index_a
        .add(&[HotEntry::new(far, later, bucket)])
        .await
        .unwrap();
    assert!(
        index_b
            .due(ShardKey::new(later, bucket), later, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let (ta, tb) = (LeaseToken::random(), LeaseToken::random());
    let ttl = std::time::Duration::from_secs(30);
    assert!(leases_a.acquire("shard", &ta, ttl).await.unwrap());
    assert!(
        !leases_b.acquire("shard", &tb, ttl).await.unwrap(),
        "one holder across processes"
    );
    a.close().await;
    b.close().await;
}

/// A day partition fills while claims, outcomes and the migrator's inserts keep running on
/// the same connection (ten million daily timers write tomorrow's runs at thousands a
/// second). Plans cached while that partition was empty read it whole on every statement once
/// it held hundreds of thousands of rows (seconds per claim); today's work must not read
/// tomorrow's partition at all, whatever it held when the statements were first planned.
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todays_claims_outcomes_and_inserts_leave_a_filling_day_partition_alone() {
    use chime_domain::{
        Bucket, Claim, NewOccurrence, OccurrenceStatus, Outcome, TaskKey, TimerId, Timestamp,
    };
    use chime_storage::OccurrenceStore;

    let fx = support::pg().await;
    let store = one_connection(&fx).await;
    let pool = store.pool();
    // Ten days of their own, far ahead (from 2031-01-01 UTC), as the janitor keeps a week
    // and more; today is the first, tomorrow the second.
    let day = 1_924_992_000_000_i64;
    for d in 0..10 {
        let from = day + d * 86_400_000;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE occurrences_p_{d} PARTITION OF occurrences \
             FOR VALUES FROM ({from}) TO ({})",
            from + 86_400_000
        )))
        .execute(pool)
        .await
        .unwrap();
    }
    // Rows of day `d`: timer g due at `g` ms into the day.
    let insert = |d: i64, from: i64, n: i64| {
        sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
             SELECT g, $1 + g, 1, 0 FROM generate_series($2, $2 + $3 - 1) g",
        )
        .bind(day + d * 86_400_000)
        .bind(from)
        .bind(n)
        .execute(pool)
    };
    let claim = Claim {
        now: Timestamp::from_millis(day),
        lease_until: Timestamp::from_millis(day + 60_000),
    };
    let keys = |from: i64, n: i64| -> Vec<TaskKey> {
        (from..from + n)
            .map(|g| TaskKey::new(TimerId::new(g).unwrap(), Timestamp::from_millis(day + g)))
            .collect()
    };
    // One round of today's work on 200 keys from `from`: claim, outcomes, and the migrator
    // writing the next 200 with a newer version over pending rows of the same keys.
    let round = |from: i64| {
        let store = &store;
        async move {
            let won = store.claim(&keys(from, 200), claim).await.unwrap();
            assert_eq!(won.len(), 200);
            let outcomes: Vec<Outcome> = won
                .iter()
                .map(|c| {
                    Outcome::ended(
                        c.key,
                        c.attempt,
                        OccurrenceStatus::Succeeded,
                        Some(Timestamp::from_millis(day)),
                        None,
                    )
                })
                .collect();
            assert_eq!(store.record_outcomes(&outcomes).await.unwrap(), 200);
            let newer: Vec<NewOccurrence> = keys(from + 200, 200)
                .into_iter()
                .map(|key| NewOccurrence {
                    key,
                    timer_version: 2,
                    bucket: Bucket::from_stored(0),
                    due: None,
                })
                .collect();
            assert_eq!(store.insert_occurrences(&newer).await.unwrap(), 200);
        }
    };
    // Today's work, often enough for its statements' plans to be cached, while tomorrow's
    // partition is still empty…
    insert(0, 1, 10_000).await.unwrap();
    for r in 0..8 {
        round(1 + r * 400).await;
    }
    // …then tomorrow's runs of a population of daily timers arrive.
    insert(1, 1, 300_000).await.unwrap();
    let read_of_tomorrow = || async {
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(pool)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar(
            "SELECT (COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) \
               + COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0))::bigint \
             FROM pg_stat_user_tables \
             WHERE schemaname = current_schema() AND relname = 'occurrences_p_1'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        n
    };
    let before = read_of_tomorrow().await;
    round(5_000).await;
    assert_eq!(
        read_of_tomorrow().await - before,
        0,
        "today's claim, outcomes or insert read tomorrow's day partition"
    );
}

/// Looking for unwritten runs' rows stays one primary-key probe per key after the day's
/// partition grew under a plan cached while it was empty: as a `NOT EXISTS`, the cached
/// plan hashed a scan of the whole day per call (the steady bench, 75 µs per key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unwritten_probe_stays_a_probe_per_key_as_its_day_grows() {
    use chime_domain::{TaskKey, TimerId, Timestamp};
    use chime_storage::{OccurrenceStore, Retention};

    const ROWS: i64 = 20_000;
    const KEYS: i64 = 500;
    let fx = support::pg().await;
    let store = one_connection(&fx).await;
    let pool = store.pool();
    let run_at = 1_893_456_000_000; // 2030-01-01: a day of its own
    store
        .rotate(
            Timestamp::from_millis(run_at),
            Timestamp::from_millis(run_at),
            &chime_storage::PurgeBefore {
                history: Timestamp::from_millis(0),
                dead: Timestamp::from_millis(0),
                idempotency_keys: Timestamp::from_millis(0),
                deleted_timers: Timestamp::from_millis(0),
            },
        )
        .await
        .unwrap();
    let keys = |from: i64, n: i64| -> Vec<TaskKey> {
        (from..from + n)
            .map(|i| TaskKey::new(TimerId::new(i).unwrap(), Timestamp::from_millis(run_at)))
            .collect()
    };
    let write = |from: i64, to: i64| {
        sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, status) \
             SELECT g, $3, 1, 0, 'succeeded' FROM generate_series($1, $2) g",
        )
        .bind(from)
        .bind(to)
        .bind(run_at)
        .execute(pool)
    };
    // A day's first rows, analyzed, and asked often enough with batches as a steady rate
    // makes them for the plan cache to keep a generic plan made on them.
    write(1, 500).await.unwrap();
    sqlx::query("ANALYZE occurrences")
        .execute(pool)
        .await
        .unwrap();
    for round in 0..10 {
        store.absent(&keys(round * 100 + 1, 100)).await.unwrap();
    }
    write(501, ROWS).await.unwrap();
    let seq_scans = || async {
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(pool)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(seq_scan), 0)::bigint FROM pg_stat_user_tables \
             WHERE schemaname = current_schema() AND relname LIKE 'occurrences%'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        n
    };
    let before = seq_scans().await;
    // Half written, half not.
    let asked = keys(ROWS - KEYS / 2 + 1, KEYS);
    assert_eq!(
        store.absent(&asked).await.unwrap().len(),
        (KEYS / 2) as usize
    );
    assert_eq!(
        seq_scans().await - before,
        0,
        "a scan of the day, not probes"
    );
}

/// A store on one connection, so that table statistics can be flushed from it and its plan
/// cache is the one a test looks at.
async fn one_connection(fx: &support::PgFixture) -> chime_storage::postgres::PgStore {
    use chime_storage::postgres::{PgSettings, PgStore};
    PgStore::connect(
        &fx.url(),
        &PgSettings {
            max_connections: 1,
            ..Default::default()
        },
        std::sync::Arc::new(chime_domain::SystemClock),
        chime_domain::BucketCount::DEFAULT,
    )
    .await
    .unwrap()
}
