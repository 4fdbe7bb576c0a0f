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
