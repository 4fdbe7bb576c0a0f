//! The one store factory: the database by URL, the hot path in memory, in Redis or absent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use chime_domain::SystemClock;
use chime_runtime::Config;
use chime_storage::{HotPath, SchemaStatus, StoreError, Stores};

/// A private in-memory SQLite database with the default configuration.
async fn open(hot_path: HotPath, migrate: bool) -> Result<Stores, StoreError> {
    let clock = Arc::new(SystemClock);
    Stores::open(
        &Config::default().store_settings(),
        "sqlite::memory:",
        clock,
        hot_path,
        migrate,
    )
    .await
}

#[tokio::test]
async fn chime_dev_gets_a_migrated_database_and_an_in_memory_hot_path() {
    let stores = open(HotPath::InMemory, true).await.unwrap();
    assert_eq!(
        stores.database.schema_status().await.unwrap(),
        SchemaStatus::Current
    );
    assert!(stores.hot_path().is_ok());
    stores.close().await;
}

#[tokio::test]
async fn a_service_without_redis_has_no_hot_path_and_says_what_to_set() {
    let stores = open(HotPath::Configured, true).await.unwrap();
    assert!(stores.hot_index.is_none() && stores.leases.is_none());
    let missing = stores.hot_path().err().expect("no Redis configured");
    assert!(missing.to_string().contains("CHIME_REDIS_URL"), "{missing}");
}

#[tokio::test]
async fn a_service_refuses_a_schema_behind_its_binary() {
    let refused = open(HotPath::InMemory, false)
        .await
        .err()
        .expect("an empty database is behind");
    assert!(
        refused.to_string().contains("chime-migrator migrate"),
        "{refused}"
    );
}
