//! How PostgreSQL plans the hot path's statements: each stays a primary-key probe per key
//! whatever the plan cache decides, however the day partitions grew since it decided.
//! Counted through the table statistics, on one connection so its counts can be flushed.

use chime_storage::testkit as support;

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
        flush_stats(pool).await;
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
        flush_stats(pool).await;
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
    let seq_scans = || seq_scans(pool, "occurrences%");
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

/// A day partition analyzed while it was empty (a nightly `vacuumdb --analyze`, or the one
/// after an upgrade, reaches the days ahead before their first row) is planned as holding
/// nothing: a plan cached then chose a sequential scan of that partition for each key (or
/// hashed all of it), and kept it as the day filled until autovacuum analyzed the partition
/// again (603 scans of 50,000 rows for a round of 200 keys). Once the janitor's statistics
/// round has seen the day grow, every statement that looks rows up by key probes the
/// primary key again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_analyzed_empty_is_still_probed_by_key_once_it_fills() {
    use chime_domain::{Claim, OccurrenceStatus, Outcome, TaskKey, TimerId, Timestamp};
    use chime_storage::{OccurrenceStore, Retention};

    let fx = support::pg().await;
    let store = one_connection(&fx).await;
    let pool = store.pool();
    let day = 1_956_528_000_000_i64; // 2032-01-01 UTC: a day of its own
    sqlx::query(sqlx::AssertSqlSafe(format!(
        // Autovacuum left out: it has not reached the day yet.
        "CREATE TABLE occurrences_p_fresh PARTITION OF occurrences \
         FOR VALUES FROM ({day}) TO ({}) WITH (autovacuum_enabled = false)",
        day + 86_400_000
    )))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE occurrences")
        .execute(pool)
        .await
        .unwrap();
    // Pending rows of the day: timer g due at `g` ms into it.
    let insert = |from: i64, n: i64| {
        sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
             SELECT g, $1 + g, 1, 0 FROM generate_series($2, $2 + $3 - 1) g",
        )
        .bind(day)
        .bind(from)
        .bind(n)
        .execute(pool)
    };
    let keys = |from: i64, n: i64| -> Vec<TaskKey> {
        (from..from + n)
            .map(|g| TaskKey::new(TimerId::new(g).unwrap(), Timestamp::from_millis(day + g)))
            .collect()
    };
    let claim = Claim {
        now: Timestamp::from_millis(day),
        lease_until: Timestamp::from_millis(day + 60_000),
    };
    // An executor's round on `n` keys from `from`: whether unwritten runs have rows, the
    // claim, the check that the claims still hold, their outcomes, and a skip.
    let round = |from: i64, n: i64| {
        let store = &store;
        async move {
            let asked = keys(from, n);
            assert!(store.absent(&asked).await.unwrap().is_empty());
            let won = store.claim(&asked, claim).await.unwrap();
            assert_eq!(won.len() as i64, n);
            let held: Vec<(TaskKey, u32)> = won.iter().map(|c| (c.key, c.attempt)).collect();
            assert_eq!(store.still_running(&held).await.unwrap().len() as i64, n);
            let outcomes: Vec<Outcome> = won
                .iter()
                .skip(1)
                .map(|c| {
                    let at = Some(Timestamp::from_millis(day));
                    Outcome::ended(c.key, c.attempt, OccurrenceStatus::Succeeded, at, None)
                })
                .collect();
            assert_eq!(
                store.record_outcomes(&outcomes).await.unwrap() as i64,
                n - 1
            );
            store.skip_occurrences(&asked[..1], "late").await.unwrap();
        }
    };
    // The day's first few runs, often enough for each statement's plan to be cached.
    insert(1, 40).await.unwrap();
    for r in 0..10 {
        round(1 + r * 4, 4).await;
    }
    // Then the day fills.
    insert(1_000, 50_000).await.unwrap();
    let seq_scans = || seq_scans(pool, "occurrences_p_fresh");
    // Only the grown day is analyzed, once: the days never analyzed are planned by their
    // size, and a fresh analysis holds until the day doubles again.
    assert_eq!(store.refresh_statistics().await.unwrap(), 1);
    assert_eq!(store.refresh_statistics().await.unwrap(), 0);
    let before = seq_scans().await;
    round(20_000, 200).await;
    assert_eq!(
        seq_scans().await - before,
        0,
        "a statement scanned the day's partition instead of probing its keys"
    );
}

/// Makes what this connection did so far show in the table statistics.
async fn flush_stats(pool: &sqlx::PgPool) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
}

/// Sequential scans so far of this schema's tables whose names match the LIKE `tables`.
async fn seq_scans(pool: &sqlx::PgPool, tables: &str) -> i64 {
    flush_stats(pool).await;
    sqlx::query_scalar(
        "SELECT COALESCE(SUM(seq_scan), 0)::bigint FROM pg_stat_user_tables \
         WHERE schemaname = current_schema() AND relname LIKE $1",
    )
    .bind(tables)
    .fetch_one(pool)
    .await
    .unwrap()
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
