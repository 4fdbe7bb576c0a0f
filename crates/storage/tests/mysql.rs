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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_migrates_once_and_reports_current() {
    let fixture = support::mysql().await;
    let store = fixture.store();
    assert_eq!(store.schema_status().await.unwrap(), SchemaStatus::Current);
    store.migrate().await.unwrap();
    assert_eq!(store.schema_status().await.unwrap(), SchemaStatus::Current);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_tallies_are_rewritten_per_writer_and_summed() {
    use chime_domain::{AppName, Counts, OccurrenceStatus, Tally, Timestamp};
    use chime_storage::Activity;

    let fixture = support::mysql().await;
    let store = fixture.store();
    let tally = |n: u64| {
        let mut counts = Counts::default();
        for _ in 0..n {
            counts.add(OccurrenceStatus::Succeeded, Some(3));
        }
        Tally {
            app: AppName::parse("act").unwrap(),
            minute: Timestamp::from_millis(1_893_456_000_000),
            counts,
        }
    };
    store.write_activity("a", &[tally(3)]).await.unwrap();
    store.write_activity("a", &[tally(5)]).await.unwrap();
    store.write_activity("b", &[tally(2)]).await.unwrap();
    let read = store
        .read_activity(None, Timestamp::from_millis(0))
        .await
        .unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].counts.fired, 7, "a's rewrite replaced, b's added");
}
