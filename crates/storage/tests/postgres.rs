//! The storage contract and the migrations against a real PostgreSQL.

use chime_storage::testkit as support;

use chime_storage::{SchemaStatus, storage_contract};

storage_contract!(timer_store, support::pg());
storage_contract!(occurrence_store, support::pg());

mod migrations {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migrating_twice_changes_nothing() {
        let fx = support::pg_unmigrated().await;
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Behind {
                missing: vec![1, 2]
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
        assert_eq!(applied, 2);
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
