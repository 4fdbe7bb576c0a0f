//! Retention on an injected clock: the janitor removes what `[retention]` no longer keeps,
//! and only one replica runs it at a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    BucketCount, Claim, Clock, Horizon, ManualClock, OccurrenceStatus, Outcome, SystemClock,
};
use chime_migrator::{Janitor, RetentionSettings};
use chime_storage::memory::MemoryLeases;
use chime_storage::postgres::PgStore;
use chime_storage::testkit;
use chime_storage::{OccurrenceStore, TimerStore};

const DAY: Duration = Duration::from_secs(86_400);
/// The default horizon without its per-timer spread, so row counts are exact.
const EXACT: Horizon = Horizon {
    spread: Duration::ZERO,
    ..Horizon::DEFAULT
};

fn settings() -> RetentionSettings {
    RetentionSettings {
        history: 7 * DAY,
        dead_letters: 30 * DAY,
        idempotency_keys: DAY,
        interval: Duration::from_secs(60),
        batch: 2,
        partitions_ahead: 7 * DAY,
    }
}

/// A PostgreSQL store on a manual clock, and leases on the same clock.
struct Fixture {
    db: testkit::PgFixture,
    clock: ManualClock,
    store: Arc<PgStore>,
    leases: Arc<MemoryLeases>,
}

impl Fixture {
    async fn new() -> Self {
        let db = testkit::pg().await;
        let clock = ManualClock::new(SystemClock.now());
        let store = Arc::new(PgStore::from_pool(
            db.store.pool().clone(),
            Arc::new(clock.clone()),
            BucketCount::DEFAULT,
        ));
        let leases = Arc::new(MemoryLeases::new(Arc::new(clock.clone())));
        Self {
            db,
            clock,
            store,
            leases,
        }
    }

    fn janitor(&self) -> Janitor {
        Janitor::new(
            self.store.clone(),
            self.leases.clone(),
            Arc::new(self.clock.clone()),
            settings(),
        )
    }

    /// An every-10s timer created now: its id and first keys. The first `claimed` keys are
    /// claimed, the first succeeded, the second dead; the rest stay pending.
    async fn every_10s(
        &self,
        claimed: usize,
    ) -> (chime_domain::TimerId, Vec<chime_domain::TaskKey>) {
        let mut spec = chime_storage::contract::spec("billing", "every-10s");
        spec.schedule = chime_domain::ScheduleInput {
            every: Some("10s".into()),
            ..Default::default()
        }
        .resolve(self.clock.now(), None, None)
        .unwrap();
        let written = self
            .store
            .create_timer(
                chime_domain::NewTimer {
                    spec,
                    enabled: true,
                    runs_unwritten: false,
                },
                EXACT,
            )
            .await
            .unwrap();
        let keys: Vec<_> = written.occurrences.iter().map(|o| o.key).collect();
        assert!(keys.len() >= 5);
        let now = self.clock.now();
        let claim = Claim {
            now,
            lease_until: now.add_millis(60_000),
        };
        self.store.claim(&keys[..claimed], claim).await.unwrap();
        let outcome = |i: usize, status| Outcome {
            key: keys[i],
            attempt: 1,
            status,
            fired_at: Some(now),
            http_status: Some(200),
            output: None,
            error: None,
            next_attempt_at: None,
            unwritten: None,
            leased: false,
        };
        self.store
            .record_outcomes(&[
                outcome(0, OccurrenceStatus::Succeeded),
                outcome(1, OccurrenceStatus::Dead),
            ])
            .await
            .unwrap();
        (written.timer.id, keys)
    }
}

#[tokio::test]
async fn old_rows_go_by_kind_and_one_replica_runs_it() {
    let fx = Fixture::new().await;
    let (clock, store) = (&fx.clock, &fx.store);
    let (janitor, other) = (fx.janitor(), fx.janitor());
    let gone = store
        .create_timer(chime_storage::contract::new_timer("billing", "gone"), EXACT)
        .await
        .unwrap();
    store.delete_timer(gone.timer.id).await.unwrap();
    let (timer, keys) = fx.every_10s(2).await;

    let exists = |i: usize| {
        let store = store.clone();
        let key = keys[i];
        async move { store.get_occurrence(key).await.unwrap().is_some() }
    };
    // A day on: nothing is old enough.
    clock.advance(DAY);
    let first = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(first.purged.occurrences, 0);
    assert_eq!(first.rotated.dropped, 0);
    assert!(
        other.run_once().await.unwrap().is_none(),
        "one replica at a time"
    );

    // Eight days on: history goes, dead letters stay, pending work stays.
    clock.advance(7 * DAY);
    let week = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(week.purged.timers, 1, "the timer deleted a week ago");
    assert!(week.purged.occurrences > 1, "{week:?}");
    assert!(!exists(0).await);
    assert!(exists(1).await);
    assert!(exists(2).await);
    assert!(store.get_timer(timer).await.is_ok());

    // A month on: the dead letter goes too.
    clock.advance(23 * DAY);
    janitor.run_once().await.unwrap().unwrap();
    assert!(!exists(1).await);
    assert!(
        exists(2).await,
        "pending rows of a live timer are never purged"
    );
}

/// The day partitions attached to `occurrences`, by name.
async fn day_partitions(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'occurrences'::regclass AND c.relname <> 'occurrences_default' \
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn partition_of(pool: &sqlx::PgPool, key: chime_domain::TaskKey) -> String {
    sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM occurrences WHERE timer_id = $1 AND run_at = $2",
    )
    .bind(key.timer_id.get())
    .bind(key.run_at.as_millis())
    .fetch_one(pool)
    .await
    .unwrap()
}

/// On PostgreSQL the janitor keeps day partitions ready ahead and drops a day whole once
/// history no longer keeps it; the day's live rows and dead letters move to the default
/// partition and stay usable.
#[tokio::test]
async fn old_days_go_whole_and_leave_live_rows() {
    let fx = Fixture::new().await;
    let (clock, store, pool) = (&fx.clock, &fx.store, fx.db.store.pool());
    let janitor = fx.janitor();

    let first = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(first.rotated.created, 8, "today and the next 7 days");
    assert_eq!(day_partitions(pool).await.len(), 8);

    // First: succeeded; second: dead; third: running; the rest stay pending.
    let (_, keys) = fx.every_10s(3).await;
    let today = partition_of(pool, keys[0]).await;
    assert!(today.starts_with("occurrences_p"), "{today}");

    // Eight days on the day is past history: it goes whole, with its one finished row.
    clock.advance(8 * DAY);
    let run = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(run.rotated.dropped, 1);
    assert_eq!(run.rotated.occurrences, 1);
    assert_eq!(run.rotated.created, 8, "the next 8 days");
    let days = day_partitions(pool).await;
    assert_eq!(days.len(), 15);
    assert!(!days.contains(&today));

    let status = |i: usize| {
        let store = store.clone();
        let key = keys[i];
        async move { store.get_occurrence(key).await.unwrap().map(|o| o.status) }
    };
    assert_eq!(status(0).await, None);
    assert_eq!(status(1).await, Some(OccurrenceStatus::Dead));
    assert_eq!(status(2).await, Some(OccurrenceStatus::Running));
    assert_eq!(status(3).await, Some(OccurrenceStatus::Pending));
    assert_eq!(partition_of(pool, keys[3]).await, "occurrences_default");
    let later = clock.now();
    let claimed = store
        .claim(
            &keys[2..4],
            Claim {
                now: later,
                lease_until: later.add_millis(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2, "moved rows are claimed as before");

    let again = janitor.run_once().await.unwrap().unwrap();
    assert_eq!(again.rotated, chime_storage::Rotated::default());
}

/// A day analyzed while empty and filled since (a nightly `ANALYZE` ran before its first
/// row) is analyzed again by the running janitor, so no plan cached on it stays one for an
/// empty day (`crates/storage/tests/it/postgres_plans.rs` shows what such plans cost).
#[tokio::test]
async fn the_running_janitor_analyzes_a_day_that_outgrew_its_statistics() {
    let fx = Fixture::new().await;
    let pool = fx.db.store.pool();
    let day = 1_956_528_000_000_i64; // 2032-01-01 UTC: a day of its own
    sqlx::query(sqlx::AssertSqlSafe(format!(
        // Autovacuum left out: it has not reached the day yet.
        "CREATE TABLE occurrences_p_filled PARTITION OF occurrences \
         FOR VALUES FROM ({day}) TO ({}) WITH (autovacuum_enabled = false)",
        day + 86_400_000
    )))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE occurrences_p_filled")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
         SELECT g, $1 + g, 1, 0 FROM generate_series(1, 5000) g",
    )
    .bind(day)
    .execute(pool)
    .await
    .unwrap();
    let analyzed_rows = || async {
        let n: f32 = sqlx::query_scalar(
            "SELECT reltuples FROM pg_class WHERE oid = 'occurrences_p_filled'::regclass",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        n
    };
    assert_eq!(analyzed_rows().await, 0.0, "analyzed empty");

    let janitor = fx.janitor();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { janitor.run(shutdown).await }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while analyzed_rows().await < 5000.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the day was not analyzed again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
}
