//! A timer the API accepted fires, whichever other service is down when it is created: the
//! gateway stores every timer with its first occurrences in one transaction and needs neither
//! the migrator nor Redis. Real processes, real PostgreSQL and Redis, a loopback sink; lost
//! and duplicated counts come from the sink.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use chime_e2e::cluster::{Cluster, Spec};
use chime_e2e::servers::PrivateRedis;
use chime_e2e::timers::{
    create, deliveries, due_over, duplicates, ms, now, one_shots, one_shots_named, wait_delivered,
};
use chime_storage::testkit;
use chime_test_support::sink::Sink;
use serde_json::json;

/// The lead these tests run with: short, so that the rows written with a timer run out
/// within the test and what fires after that needed the migrator.
const LEAD_MS: i64 = 20_000;

/// An every-second timer as created.
struct Ticker {
    id: i64,
    /// Its first fire time.
    first: i64,
    /// When the store wrote it: its rows cover `[first, created + its lead)`.
    created: i64,
}

impl Ticker {
    /// Its own lead: `LEAD_MS` less its fixed share (`Horizon::of_timer`).
    fn lead_ms(&self) -> i64 {
        let horizon = chime_domain::Horizon::new(Duration::from_millis(LEAD_MS as u64), 100);
        let id = chime_domain::TimerId::new(self.id).unwrap();
        horizon.of_timer(id).lead.as_millis() as i64
    }
}

async fn tickers(rest: &str, url: &str, n: usize) -> Vec<Ticker> {
    tickers_named(rest, url, "tick", n).await
}

/// Every tick is counted, so `fire_all`: a run its next one overtook (a second late, which
/// tests side by side on a busy machine can make) still fires instead of being skipped.
async fn tickers_named(rest: &str, url: &str, prefix: &str, n: usize) -> Vec<Ticker> {
    let mut out = Vec::new();
    for i in 0..n {
        let t = create(
            rest,
            json!({ "app": "durability", "name": format!("{prefix}-{i}"), "misfire": "fire_all",
                    "schedule": { "every": "1s" }, "callback": { "url": url } }),
        )
        .await;
        out.push(Ticker {
            id: t["id"].as_i64().unwrap(),
            first: ms(t["next_runs"][0]["utc"].as_str().unwrap()),
            created: ms(t["created_at"].as_str().unwrap()),
        });
    }
    out
}

/// The fire times of `t` the sink received, each once or more.
/// Fire times received per timer id, from the idempotency keys: the sink's log read once
/// (copying a large log per timer cost these tests most of a minute).
fn ticks_by_timer(sink: &Sink) -> HashMap<i64, BTreeSet<i64>> {
    let mut by: HashMap<i64, BTreeSet<i64>> = HashMap::new();
    for r in sink.received() {
        let parsed = r
            .header("idempotency-key")
            .and_then(|k| k.split_once(':'))
            .and_then(|(id, at)| Some((id.parse().ok()?, at.parse().ok()?)));
        if let Some((id, at)) = parsed {
            by.entry(id).or_default().insert(at);
        }
    }
    by
}

fn ticks_received(got: &HashMap<i64, BTreeSet<i64>>, t: &Ticker) -> BTreeSet<i64> {
    got.get(&t.id).cloned().unwrap_or_default()
}

/// Asserts that every fire time of each ticker from `from(t)` to `end` arrived.
fn assert_every_tick(sink: &Sink, ticks: &[Ticker], from: impl Fn(&Ticker) -> i64, end: i64) {
    let got = ticks_by_timer(sink);
    for t in ticks {
        let missing = ticks_missing(&got, t, from(t), end);
        assert!(
            missing.is_empty(),
            "timer {}: {} ticks missing: {missing:?}",
            t.id,
            missing.len()
        );
    }
}

/// A cluster (lead 20 s) on a fresh schema and prefix whose migrator was killed before
/// 300 one-shots due 20–40 s later and 3 every-second timers were created.
struct MigratorKilled {
    _db: testkit::PgFixture,
    _redis: testkit::RedisFixture,
    sink: Sink,
    c: Cluster,
    killed: i64,
    shots: HashSet<String>,
    ticks: Vec<Ticker>,
}

async fn create_with_the_migrator_killed(test: &'static str) -> MigratorKilled {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = cluster(test, &db, testkit::redis_url(), redis.backend.prefix()).await;
    c.migrator.service.kill9();
    let killed = now();
    let url = sink.url("/hook");
    let shots = one_shots(&c.rest, &url, &due_over(killed + 20_000, 20_000, 300)).await;
    let ticks = tickers(&c.rest, &url, 3).await;
    MigratorKilled {
        _db: db,
        _redis: redis,
        sink,
        c,
        killed,
        shots,
        ticks,
    }
}

/// Fire times of `t` in `[from, to]` the sink never received.
fn ticks_missing(got: &HashMap<i64, BTreeSet<i64>>, t: &Ticker, from: i64, to: i64) -> Vec<i64> {
    let got = ticks_received(got, t);
    (0..)
        .map(|k| t.first + k * 1_000)
        .skip_while(|at| *at < from)
        .take_while(|at| *at <= to)
        .filter(|at| !got.contains(at))
        .collect()
}

async fn cluster(
    test: &'static str,
    db: &testkit::PgFixture,
    redis_url: String,
    prefix: &str,
) -> Cluster {
    Cluster::start(Spec {
        test,
        database_url: db.url(),
        redis_url,
        redis_prefix: prefix.to_owned(),
        schedulers: 1,
        executors: 1,
        env: chime_e2e::test_env(vec![(
            "CHIME_MIGRATOR__LEAD",
            format!("{}s", LEAD_MS / 1000),
        )]),
    })
    .await
}

async fn sleep_until_ms(at: i64) {
    let wait = (at - now()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_created_while_the_migrator_is_dead_fire_exactly_once() {
    // Bound by name, not `..`: the fixtures must live as long as the test.
    let MigratorKilled {
        _db,
        _redis,
        sink,
        mut c,
        killed,
        shots,
        ticks,
    } = create_with_the_migrator_killed("migrator-dead-restarted").await;
    sleep_until_ms(killed + 10_000).await;
    c.migrator.restart().await;

    wait_delivered(&sink, &shots, Duration::from_secs(60)).await;
    // Past the first lead: the ticks since needed the restarted migrator.
    sleep_until_ms(killed + 2 * LEAD_MS + 5_000).await;
    assert_every_tick(&sink, &ticks, |t| t.first, now() - 2_000);
    let dupes = duplicates(&sink);
    let got = ticks_by_timer(&sink);
    eprintln!(
        "migrator killed before the creates, back 10 s later: 300 one-shots and {} ticks \
         delivered, 0 lost, {dupes} duplicates",
        ticks
            .iter()
            .map(|t| ticks_received(&got, t).len())
            .sum::<usize>()
    );
    assert_eq!(dupes, 0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_migrator_gone_for_good_timers_fire_for_the_lead() {
    let MigratorKilled {
        _db,
        _redis,
        sink,
        mut c,
        shots,
        ticks,
        ..
    } = create_with_the_migrator_killed("migrator-dead").await;

    // One-shots never depend on the migrator.
    wait_delivered(&sink, &shots, Duration::from_secs(60)).await;
    // Recurring timers fire for their lead after their creation, exactly, and then stop.
    sleep_until_ms(ticks.iter().map(|t| t.created).max().unwrap() + LEAD_MS + 3_000).await;
    let got = ticks_by_timer(&sink);
    for t in &ticks {
        let expected: BTreeSet<i64> = (0..)
            .map(|k| t.first + k * 1_000)
            .take_while(|at| *at < t.created + t.lead_ms())
            .collect();
        assert_eq!(ticks_received(&got, t), expected, "timer {}", t.id);
    }
    assert_eq!(duplicates(&sink), 0);
    eprintln!(
        "migrator gone: 300 one-shots delivered; every-second timers fired {:?} ms each (their \
         leads), then stopped",
        ticks.iter().map(Ticker::lead_ms).collect::<Vec<_>>()
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_created_while_redis_is_down_fire_once_it_is_back() {
    let db = testkit::pg_unmigrated().await;
    let mut redis = PrivateRedis::start();
    let sink = Sink::start().await.unwrap();
    let mut c = cluster("redis-down", &db, redis.url(), "chime").await;
    redis.stop();
    let created = now();
    let shots = one_shots(
        &c.rest,
        &sink.url("/hook"),
        &due_over(created + 15_000, 15_000, 300),
    )
    .await;
    let ticks = tickers(&c.rest, &sink.url("/hook"), 3).await;
    let took = now() - created;
    assert!(took < 10_000, "creates with Redis down took {took} ms");
    sleep_until_ms(created + 8_000).await;
    redis.start_again();
    let back = now();

    wait_delivered(&sink, &shots, Duration::from_secs(60)).await;
    assert_every_tick(&sink, &ticks, |_| back + 5_000, now() - 2_000);
    let got = deliveries(&sink);
    let shot_dupes: usize = shots.iter().map(|k| got[k].len() - 1).sum();
    eprintln!(
        "Redis down during the creates ({took} ms for 303), back 8 s later: 300 one-shots \
         delivered, {shot_dupes} duplicates; ticks every second from 5 s after"
    );
    assert_eq!(shot_dupes, 0);
    c.stop().await;
}

/// Restarts every process one at a time with `CHIME_BUCKETS=buckets`, as a rolling update
/// does: schedulers, executors, migrator, then the gateway. Two replicas of the firing
/// stages keep one of each up throughout.
async fn roll_buckets(c: &mut Cluster, buckets: u32) {
    for node in c.nodes_mut() {
        node.set_env("CHIME_BUCKETS", buckets.to_string());
        node.service.stop().await;
        node.restart().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_bucket_count_under_load_loses_and_repeats_nothing() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    // A short lead: a timer left in a bucket out of range would stop firing within the test
    // (no migrator of the new count would extend it), not merely fire late.
    let mut c = chime_e2e::start_on(
        "rebucket",
        &db,
        &redis,
        2,
        2,
        vec![
            ("CHIME_BUCKETS", "16".into()),
            ("CHIME_MIGRATOR__LEAD", format!("{}s", LEAD_MS / 1000)),
        ],
    )
    .await;
    let url = sink.url("/hook");
    let first = now();
    let mut shots = one_shots(&c.rest, &url, &due_over(first + 8_000, 60_000, 300)).await;
    let mut ticks = tickers(&c.rest, &url, 3).await;
    roll_buckets(&mut c, 64).await;
    // Created under 64 buckets: most land in buckets the way back leaves out of range.
    let second = now();
    let more = due_over(second + 8_000, 40_000, 300);
    let more: HashSet<String> = one_shots_named(&c.rest, &url, "again", &more).await;
    shots.extend(more);
    ticks.extend(tickers_named(&c.rest, &url, "again", 3).await);
    roll_buckets(&mut c, 16).await;

    wait_delivered(&sink, &shots, Duration::from_secs(90)).await;
    // Well past the lead of the timers created under 64 buckets.
    sleep_until_ms(second + 2 * LEAD_MS + 5_000).await;
    assert_every_tick(&sink, &ticks, |t| t.first, now() - 2_000);
    let dupes = duplicates(&sink);
    eprintln!(
        "CHIME_BUCKETS 16 → 64 → 16, rolled under load: {} one-shots and every tick delivered, \
         {dupes} duplicates",
        shots.len()
    );
    assert_eq!(dupes, 0);
    c.stop().await;
}

/// Waits (30 s at most) until what the sink received satisfies `done`.
async fn wait_for_deliveries(
    sink: &Sink,
    mut done: impl FnMut(
        &std::collections::HashMap<String, Vec<chime_test_support::sink::Received>>,
    ) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&deliveries(sink)) {
        assert!(tokio::time::Instant::now() < deadline, "deliveries stopped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_under_load_loses_nothing() {
    rolling_upgrade("rolling-upgrade", None).await;
}

/// `make upgrade-check PREV=<commit>`: the stack of that commit's build (its binaries in
/// `CHIME_UPGRADE_FROM`, its migrations applied) under load, this build's migrations
/// applied, then each process replaced by this build's, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs another build's binaries: make upgrade-check"]
async fn an_upgrade_from_the_previous_build_under_load_loses_nothing() {
    let from = std::env::var("CHIME_UPGRADE_FROM")
        .expect("CHIME_UPGRADE_FROM: the directory of the previous build's binaries");
    rolling_upgrade("upgrade-check", Some(from.into())).await;
}

/// Every process stopped with SIGTERM and started again on this build, one at a time, as a
/// rolling upgrade of the Deployments does, under 200 every-1s timers and 3,000 one-shots;
/// from another build's stack (`from`) or this one's.
async fn rolling_upgrade(test: &'static str, from: Option<std::path::PathBuf>) {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_from(test, &db, &redis, (2, 2), Vec::new(), from).await;
    let url = sink.url("/hook");
    let ticks = tickers(&c.rest, &url, 200).await;
    let first = now();
    let shots = one_shots(&c.rest, &url, &due_over(first + 5_000, 40_000, 3_000)).await;
    // The first process is replaced once the one-shots have begun, each next one after
    // another 400 deliveries (about two seconds); this build's migrations go first, while
    // the old build runs, as the migrate Job of a rollout does.
    wait_for_deliveries(&sink, |d| d.keys().any(|k| shots.contains(k))).await;
    chime_e2e::cluster::migrate(None, &db.url());
    let rolling = now();
    for node in c.nodes_mut() {
        node.service.stop().await;
        node.upgrade();
        node.restart().await;
        // Counted without copying the sink's log: under this load a copy per poll costs the
        // test process a core.
        let seen = sink.count();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while sink.count() < seen + 400 {
            assert!(tokio::time::Instant::now() < deadline, "deliveries stopped");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let rolled = now();
    wait_delivered(&sink, &shots, Duration::from_secs(60)).await;
    let end = now() - 2_000;

    let all = deliveries(&sink);
    let dupes = duplicates(&sink);
    let mut late: Vec<i64> = all
        .iter()
        .filter(|(k, _)| shots.contains(*k))
        .filter_map(|(_, got)| {
            let r = got.first()?;
            Some(r.at_ms - ms(r.header("x-chime-scheduled-at")?))
        })
        .collect();
    late.sort_unstable();
    let p99 = late[(late.len() * 99).div_ceil(100) - 1];
    let got = ticks_by_timer(&sink);
    let worst_ticker = ticks
        .iter()
        .map(|t| ticks_missing(&got, t, t.first, end).len())
        .max()
        .unwrap_or(0);
    eprintln!(
        "{test}: rolling upgrade of 6 processes over {} ms under 200 every-1s timers and \
         3,000 one-shots: one-shots 0 lost, p99 lateness {p99} ms; {dupes} duplicates in {} \
         deliveries; most seconds one timer missed: {worst_ticker}",
        rolled - rolling,
        all.len()
    );
    assert!(dupes * 1000 <= all.len(), "{dupes} duplicates");
    assert!(
        p99 <= chime_e2e::ON_TIME_MS,
        "one-shot p99 lateness {p99} ms"
    );
    assert!(
        worst_ticker <= 1,
        "an every-1s timer missed {worst_ticker} seconds"
    );
    c.stop().await;
}
