//! The storage contract and the migrations against a real PostgreSQL.

mod support;

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
            SchemaStatus::Behind { missing: vec![1] }
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
        assert_eq!(applied, 1);
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Current
        );
    }
}
