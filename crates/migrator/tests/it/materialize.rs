//! Rolling materialization against real PostgreSQL and Redis, on an injected clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use chime_domain::{
    BucketCount, Clock, Horizon, ManualClock, NewTimer, ScheduleInput, ShardKey, SystemClock,
    TaskKey, Timer, TimerSpec, Timestamp,
};
use chime_migrator::{Materialized, Materializer, Migrator, MigratorSettings, PassReport};
use chime_storage::postgres::PgStore;
use chime_storage::testkit::{self, PgFixture, RedisFixture};
use chime_storage::{HotIndex, OccurrenceStore, PageRequest, RunFilter, TimerStore};

const MINUTE: Horizon = Horizon {
    lead: Duration::from_secs(60),
    max_rows: 100,
    spread: Duration::ZERO,
};

struct Setup {
    _db: PgFixture,
    redis: RedisFixture,
    /// The fixture's schema, on the test's clock.
    store: Arc<PgStore>,
    index: Arc<dyn HotIndex>,
    clock: ManualClock,
    m: Materializer,
}

async fn setup() -> Setup {
    let db = testkit::pg().await;
    let redis = testkit::redis().await;
    let index = redis.hot_index();
    // Whole seconds, so fire times are easy to reason about; real time, because Redis
    // expires shards by its own clock.
    let now = SystemClock.now().as_millis() / 1000 * 1000;
    let clock = ManualClock::new(Timestamp::from_millis(now));
    let store = Arc::new(PgStore::from_pool(
        db.store.pool().clone(),
        Arc::new(clock.clone()),
        BucketCount::DEFAULT,
    ));
    let m = Materializer::new(
        store.clone(),
        store.clone(),
        index.clone(),
        Arc::new(clock.clone()),
        MINUTE,
    );
    Setup {
        _db: db,
        redis,
        store,
        index,
        clock,
        m,
    }
}

fn spec(name: &str, schedule: ScheduleInput, now: Timestamp) -> TimerSpec {
    chime_storage::contract::spec_with("billing", name, &schedule, now)
}

/// Creates a timer as the gateway does: with its first occurrences (not indexed here).
async fn create(s: &Setup, name: &str, schedule: ScheduleInput, enabled: bool) -> Timer {
    s.store
        .create_timer(
            NewTimer {
                spec: spec(name, schedule, s.clock.now()),
                enabled,
                runs_unwritten: false,
            },
            MINUTE,
        )
        .await
        .unwrap()
        .timer
}

fn every(d: &str) -> ScheduleInput {
    ScheduleInput {
        every: Some(d.into()),
        ..Default::default()
    }
}

fn at(t: Timestamp) -> ScheduleInput {
    ScheduleInput {
        at: Some(t.to_rfc3339()),
        ..Default::default()
    }
}

/// One pass over every bucket, as a replica holding all of them makes it.
async fn pass(s: &Setup) -> (Materialized, u64, Duration) {
    let mut total = Materialized::default();
    let mut built = 0;
    let mut lag = Duration::ZERO;
    for b in BucketCount::DEFAULT.all() {
        let p = s.m.bucket(b).await.unwrap();
        total += p.materialized;
        built += p.built_shards;
        lag = lag.max(p.lag);
    }
    (total, built, lag)
}

/// Offsets from `origin` (ms) of the timer's members in the hot index.
async fn indexed(s: &Setup, t: &Timer, origin: Timestamp) -> Vec<i64> {
    let mut found = Vec::new();
    for minute in -1..8 {
        let shard = ShardKey::new(origin.add_millis(minute * 60_000), t.bucket);
        for (key, _) in s
            .index
            .due(shard, origin.add_millis(3_600_000), 10_000)
            .await
            .unwrap()
        {
            if key.timer_id == t.id {
                found.push(key.run_at.as_millis() - origin.as_millis());
            }
        }
    }
    found.sort();
    found
}

/// Offsets from `origin` (ms) of the timer's stored occurrences, oldest first.
async fn stored(s: &Setup, t: &Timer, origin: Timestamp) -> Vec<i64> {
    let runs = s
        .store
        .list_runs(
            &RunFilter {
                timer_id: t.id,
                status: None,
                due_by: None,
            },
            &PageRequest {
                size: chime_domain::PageSize::new(Some(1000)).unwrap(),
                token: None,
            },
        )
        .await
        .unwrap();
    let mut offsets: Vec<i64> = runs
        .items
        .iter()
        .map(|o| o.key.run_at.as_millis() - origin.as_millis())
        .collect();
    offsets.sort();
    offsets
}

fn secs(list: &[i64]) -> Vec<i64> {
    list.iter().map(|ms| ms * 1000).collect()
}

#[tokio::test]
async fn a_pass_extends_only_the_timers_running_out_of_rows() {
    let s = setup().await;
    let t0 = s.clock.now();
    let ticking = create(&s, "every-10s", every("10s"), true).await;
    let once = create(&s, "once", at(t0.add_millis(30_000)), true).await;
    let later = create(&s, "later", at(t0.add_millis(7_200_000)), true).await;
    let off = create(&s, "off", every("10s"), false).await;
    // Written with the timers: the lead's fire times, the one-shots whole.
    assert_eq!(stored(&s, &ticking, t0).await, secs(&[10, 20, 30, 40, 50]));
    assert_eq!(stored(&s, &once, t0).await, secs(&[30]));
    assert_eq!(stored(&s, &later, t0).await, secs(&[7200]));
    assert!(stored(&s, &off, t0).await.is_empty());

    // Nothing is running out: a pass writes nothing.
    let (first, _, lag) = pass(&s).await;
    assert_eq!((first.timers, first.written), (0, 0));
    assert_eq!(lag, Duration::ZERO);

    // 31 s on, the every-10s timer has less than half the lead left: it alone is extended
    // to +90 s, and indexed.
    s.clock.advance(Duration::from_secs(31));
    let (second, _, lag) = pass(&s).await;
    assert_eq!((second.timers, second.written), (1, 4));
    assert_eq!(
        lag,
        Duration::from_secs(1),
        "the watermark at +60 s vs. the refill point +61 s"
    );
    assert_eq!(
        stored(&s, &ticking, t0).await,
        secs(&[10, 20, 30, 40, 50, 60, 70, 80, 90])
    );
    // The first pass built the missing shards from the database: all of it is indexed.
    assert_eq!(
        indexed(&s, &ticking, t0).await,
        secs(&[10, 20, 30, 40, 50, 60, 70, 80, 90])
    );
    let again = pass(&s).await.0;
    assert_eq!(again.written, 0, "a repeat writes nothing");

    // The migrator was away for 200 s: the pass catches up 30 s back and writes the lead.
    s.clock.advance(Duration::from_secs(200));
    let (late, _, lag) = pass(&s).await;
    assert_eq!(
        late.written,
        3 + 6,
        "+210..+230 caught up, +240..+290 ahead"
    );
    assert_eq!(lag, Duration::from_secs(261 - 100));
    let rows = stored(&s, &ticking, t0).await;
    assert_eq!(
        rows[9..],
        secs(&[210, 220, 230, 240, 250, 260, 270, 280, 290])
    );
}

#[tokio::test]
async fn missing_shards_are_built_from_the_database() {
    let s = setup().await;
    let t0 = s.clock.now();
    let t = create(&s, "every-10s", every("10s"), true).await;
    // Nothing indexed the rows the create wrote (as when Redis was down then).
    assert!(indexed(&s, &t, t0).await.is_empty());
    let (_, built, _) = pass(&s).await;
    assert!(built >= 16, "every bucket's shards of the lead: {built}");
    assert_eq!(indexed(&s, &t, t0).await, secs(&[10, 20, 30, 40, 50]));
    for b in BucketCount::DEFAULT.all() {
        assert!(s.index.shard_complete(ShardKey::new(t0, b)).await.unwrap());
    }
    // Present shards are left alone.
    assert_eq!(pass(&s).await.1, 0);

    // Redis loses everything: the next pass builds the shards again.
    s.redis.backend.delete_prefix().await.unwrap();
    assert!(indexed(&s, &t, t0).await.is_empty());
    let (_, rebuilt, _) = pass(&s).await;
    assert_eq!(rebuilt, built);
    assert_eq!(indexed(&s, &t, t0).await, secs(&[10, 20, 30, 40, 50]));
}

#[tokio::test]
async fn a_timer_on_demand_is_indexed_and_caught_up() {
    let s = setup().await;
    let t0 = s.clock.now();
    let t = create(&s, "every-20s", every("20s"), true).await;
    let done = s.m.timer(t.id, None).await.unwrap();
    assert_eq!((done.timers, done.written, done.indexed), (1, 0, 2));
    assert_eq!(indexed(&s, &t, t0).await, secs(&[20, 40]));

    // A trigger's occurrence, off the schedule.
    let triggered = TaskKey::new(t.id, t0.add_millis(5_000));
    s.store
        .insert_occurrences(&[chime_domain::NewOccurrence {
            key: triggered,
            timer_version: t.version,
            bucket: t.bucket,
            due: None,
        }])
        .await
        .unwrap();
    s.m.timer(t.id, Some(triggered.run_at)).await.unwrap();
    assert_eq!(indexed(&s, &t, t0).await, secs(&[5, 20, 40]));

    s.store
        .set_timer_enabled(t.id, false, MINUTE)
        .await
        .unwrap();
    assert_eq!(
        s.m.timer(t.id, None).await.unwrap(),
        Materialized::default()
    );
    s.store.delete_timer(t.id).await.unwrap();
    assert!(s.m.timer(t.id, None).await.is_err());
}

fn replica(
    s: &Setup,
    leases: Arc<dyn chime_storage::Leases>,
    work_lease: Duration,
) -> Arc<Migrator> {
    replica_of(s, leases, work_lease, BucketCount::DEFAULT)
}

/// A migrator replica on the test's store, index and clock, with `buckets`.
fn replica_of(
    s: &Setup,
    leases: Arc<dyn chime_storage::Leases>,
    work_lease: Duration,
    buckets: BucketCount,
) -> Arc<Migrator> {
    let mut settings = MigratorSettings::new(MINUTE, buckets);
    settings.work_lease = work_lease;
    Arc::new(Migrator::new(
        Materializer::new(
            s.store.clone(),
            s.store.clone(),
            s.index.clone(),
            Arc::new(s.clock.clone()),
            MINUTE,
        ),
        leases,
        settings,
    ))
}

#[tokio::test]
async fn a_replica_keeps_its_buckets_and_another_takes_them_when_it_dies() {
    let s = setup().await;
    for i in 0..40 {
        create(&s, &format!("t{i}"), every("10s"), true).await;
    }
    let leases = s.redis.leases();
    let lease = Duration::from_secs(1);
    let (a, b) = (
        replica(&s, leases.clone(), lease),
        replica(&s, leases.clone(), lease),
    );
    s.clock.advance(Duration::from_secs(31));
    let ra = a.run_pass().await.unwrap();
    let rb = b.run_pass().await.unwrap();
    assert_eq!((ra.buckets, rb.buckets), (16, 0), "{ra:?} {rb:?}");
    assert_eq!(ra.materialized.written, 40 * 4);
    assert_eq!(a.run_pass().await.unwrap().buckets, 16, "ownership sticks");
    assert_eq!(b.run_pass().await.unwrap(), PassReport::default());

    // `a` stops renewing (as a killed replica does): `b` takes over once the leases lapse.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = b.run_pass().await.unwrap();
        if r.buckets == 16 {
            break;
        }
        assert!(Instant::now() < deadline, "b took {} buckets", r.buckets);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `m` as a member of the migrator group in the test's Redis.
fn join(s: &Setup, m: &Migrator) -> Arc<chime_runtime::Roster> {
    let roster = chime_runtime::Roster::new(
        s.redis.membership(),
        chime_migrator::GROUP,
        m.token().clone(),
        BucketCount::DEFAULT,
        chime_runtime::RosterSettings {
            heartbeat: Duration::from_millis(100),
            ttl: Duration::from_secs(30),
        },
        Arc::new(SystemClock),
    );
    m.join(roster.clone());
    roster
}

#[tokio::test]
async fn replicas_in_a_group_split_the_buckets_and_one_that_leaves_hands_its_share_over() {
    let s = setup().await;
    for i in 0..40 {
        create(&s, &format!("t{i}"), every("10s"), true).await;
    }
    let leases = s.redis.leases();
    let lease = Duration::from_secs(30);
    let (a, b) = (
        replica(&s, leases.clone(), lease),
        replica(&s, leases.clone(), lease),
    );
    let (ra, rb) = (join(&s, &a), join(&s, &b));
    ra.beat().await;
    rb.beat().await;
    ra.beat().await;
    s.clock.advance(Duration::from_secs(31));
    let (pa, pb) = (a.run_pass().await.unwrap(), b.run_pass().await.unwrap());
    assert_eq!((pa.buckets, pb.buckets), (8, 8), "{pa:?} {pb:?}");
    assert_eq!(
        pa.materialized.written + pb.materialized.written,
        40 * 4,
        "every timer extended once"
    );

    // `b` is gone from the group (its leases, 30 s long, still held): `a` owns every bucket
    // from its next heartbeat and takes them at once.
    rb.leave().await;
    ra.beat().await;
    assert_eq!(a.run_pass().await.unwrap().buckets, 16);
}

#[tokio::test]
async fn a_bucket_held_elsewhere_is_left_to_its_holder() {
    let s = setup().await;
    let leases = s.redis.leases();
    let m = replica(&s, leases.clone(), Duration::from_secs(3));
    let other = chime_storage::LeaseToken::random();
    assert!(
        leases
            .acquire("migrator:bucket:3", &other, Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert_eq!(m.run_pass().await.unwrap().buckets, 15);
    leases.release("migrator:bucket:3", &other).await.unwrap();
    assert_eq!(
        m.run_pass().await.unwrap().buckets,
        16,
        "the freed bucket is taken"
    );
}

/// The service as its binary runs it: the admin endpoints answer while the periodic step
/// runs, and both stop on shutdown.
#[tokio::test]
async fn serves_admin_endpoints_until_shutdown() {
    let s = setup().await;
    let m = replica(&s, s.redis.leases(), Duration::from_secs(3));
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = admin.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(chime_migrator::serve(
        m,
        Some(admin),
        Arc::new(chime_runtime::admin::AlwaysReady),
        stop.clone(),
    ));
    let http = chime_runtime::http_client().build().unwrap();
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
    }
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn on_demand_catches_up_fire_times_since_the_change() {
    let s = setup().await;
    let t0 = s.clock.now();
    let t = create(&s, "every-1s", every("1s"), true).await;
    // The create wrote +1 s … +59 s. 200 s later, with no pass in between, on demand
    // writes the last 30 s and the next minute.
    s.clock.advance(Duration::from_secs(200));
    let done = s.m.timer(t.id, None).await.unwrap();
    assert_eq!(done.written, 30 + 60);
    let rows = stored(&s, &t, t0).await;
    assert_eq!(rows.len(), 59 + 90);
    assert_eq!(rows[59], 170_000);
}

#[tokio::test]
async fn a_smaller_bucket_count_moves_timers_and_their_members() {
    let s = setup().await;
    let t0 = s.clock.now();
    let mut timers = Vec::new();
    for i in 0..20 {
        timers.push(create(&s, &format!("t{i}"), every("10s"), true).await);
    }
    assert!(timers.iter().any(|t| t.bucket.get() >= 4));
    let four = BucketCount::new(4).unwrap();
    let m = replica_of(&s, s.redis.leases(), Duration::from_secs(3), four);
    let report = m.run_pass().await.unwrap();
    assert!(
        report.rebucketed > 0 && report.rebucketed <= 4,
        "{report:?}"
    );
    assert_eq!(report.buckets, 4);
    for t in &timers {
        let now = s.store.get_timer(t.id).await.unwrap();
        assert!(now.bucket.get() < 4);
        // Every row of the timer is a member of its new bucket's shards.
        assert_eq!(
            indexed(&s, &now, t0).await,
            stored(&s, &now, t0).await,
            "timer {}",
            t.id
        );
    }
    assert_eq!(
        m.run_pass().await.unwrap().rebucketed,
        0,
        "nothing left to move"
    );
}

/// Occurrences far ahead of the lead are not in the hot index (Redis would hold every timer's
/// next run): their shard is built from the database as its minute comes within the lead,
/// even when a writer created that shard meanwhile with a member of its own.
#[tokio::test]
async fn far_ahead_runs_wait_in_the_database_until_their_minute_comes_within_the_lead() {
    let s = setup().await;
    let t0 = s.clock.now();
    let clock: Arc<dyn Clock> = Arc::new(s.clock.clone());
    let windowed: Arc<dyn HotIndex> = Arc::new(chime_storage::Windowed::new(
        s.index.clone(),
        clock.clone(),
        MINUTE.lead,
    ));
    let m = Materializer::new(
        s.store.clone(),
        s.store.clone(),
        windowed.clone(),
        clock,
        MINUTE,
    );
    let first_at = t0.add_millis(10 * 60_000 + 5_000);
    let first = create(&s, "in-ten-minutes", at(first_at), true).await;
    m.timer(first.id, None).await.unwrap();
    for b in BucketCount::DEFAULT.all() {
        m.bucket(b).await.unwrap();
    }
    let shard = ShardKey::new(first_at, first.bucket);
    let members = |s: &Setup| {
        let index = s.index.clone();
        async move {
            let due = index
                .due(shard, first_at.add_millis(60_000), 100)
                .await
                .unwrap();
            due.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        }
    };
    assert!(
        members(&s).await.is_empty(),
        "ten minutes ahead of a 60 s lead"
    );

    // Nine and a half minutes on, a writer indexes another run of that minute (a create
    // would): the shard now exists in Redis, but nothing built it.
    s.clock.advance(Duration::from_secs(9 * 60 + 30));
    // Two seconds from the first run, within its minute whatever second that fell on.
    let beside = if first_at.as_millis() % 60_000 < 30_000 {
        2_000
    } else {
        -2_000
    };
    let other = TaskKey::new(
        chime_domain::TimerId::new(first.id.get() + 1_000_000).unwrap(),
        first_at.add_millis(beside),
    );
    windowed
        .add(&[chime_storage::HotEntry::new(
            other,
            other.run_at,
            first.bucket,
        )])
        .await
        .unwrap();
    assert_eq!(members(&s).await, vec![other]);
    assert!(!s.index.shard_complete(shard).await.unwrap());

    // The migrator's pass builds it from the database: the first run is indexed too.
    for b in BucketCount::DEFAULT.all() {
        m.bucket(b).await.unwrap();
    }
    assert!(s.index.shard_complete(shard).await.unwrap());
    assert!(
        members(&s)
            .await
            .contains(&TaskKey::new(first.id, first_at)),
        "the far run is in its shard once its minute is within the lead"
    );
}
