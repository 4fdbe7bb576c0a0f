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
