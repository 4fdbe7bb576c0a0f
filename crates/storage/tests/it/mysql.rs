//! The storage contracts against a real MySQL / MariaDB (`CHIME_TEST_MYSQL_URL`, else the
//! local MariaDB; `scripts/with-test-services.sh` starts a throwaway `mariadbd` when none
//! answers).

use chime_storage::testkit as support;

use chime_storage::{SchemaStatus, storage_contract};

storage_contract!(timer_store, support::mysql());
storage_contract!(occurrence_store, support::mysql());
storage_contract!(materialize, support::mysql());
storage_contract!(retention, support::mysql());
storage_contract!(lifecycle, support::mysql());
storage_contract!(backfill, support::mysql());
storage_contract!(credentials, support::mysql());
storage_contract!(calendars, support::mysql());
storage_contract!(notifications, support::mysql());
storage_contract!(chains, support::mysql());
storage_contract!(shards, support::mysql());
storage_contract!(activity, support::mysql());
storage_contract!(unwritten, support::mysql());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_migrates_once_and_reports_current() {
    let fixture = support::mysql().await;
    let store = fixture.store();
    assert_eq!(store.schema_status().await.unwrap(), SchemaStatus::Current);
    store.migrate().await.unwrap();
    assert_eq!(store.schema_status().await.unwrap(), SchemaStatus::Current);
}
