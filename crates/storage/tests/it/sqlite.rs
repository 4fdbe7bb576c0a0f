//! The storage contract and the migrations against the embedded SQLite store.

use chime_storage::testkit as support;

use chime_storage::{SchemaStatus, storage_contract};

storage_contract!(timer_store, support::sqlite());
storage_contract!(occurrence_store, support::sqlite());
storage_contract!(materialize, support::sqlite());
storage_contract!(retention, support::sqlite());
storage_contract!(lifecycle, support::sqlite());
storage_contract!(backfill, support::sqlite());
storage_contract!(credentials, support::sqlite());
storage_contract!(activity, support::sqlite());
storage_contract!(calendars, support::sqlite());
storage_contract!(notifications, support::sqlite());
storage_contract!(chains, support::sqlite());
storage_contract!(shards, support::sqlite());
storage_contract!(unwritten, support::sqlite());

mod migrations {
    use super::*;

    #[tokio::test]
    async fn migrating_twice_changes_nothing() {
        let fx = support::sqlite_unmigrated().await;
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Behind {
                missing: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
            }
        );
        fx.store.migrate().await.unwrap();
        fx.store.migrate().await.unwrap();
        assert_eq!(
            fx.store.schema_status().await.unwrap(),
            SchemaStatus::Current
        );
    }

    #[tokio::test]
    async fn in_memory_database_works_without_a_file() {
        use chime_storage::TimerStore;
        let clock: std::sync::Arc<dyn chime_domain::Clock> =
            std::sync::Arc::new(chime_domain::SystemClock);
        let store = chime_storage::sqlite::SqliteStore::open(
            "sqlite::memory:",
            clock,
            chime_domain::BucketCount::DEFAULT,
        )
        .await
        .unwrap();
        store.migrate().await.unwrap();
        let t = store
            .create_timer(
                chime_storage::contract::new_timer("dev", "hello"),
                chime_domain::Horizon::DEFAULT,
            )
            .await
            .unwrap()
            .timer;
        assert_eq!(store.get_timer(t.id).await.unwrap(), t);
    }
}
