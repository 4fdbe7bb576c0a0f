//! Materialization against real PostgreSQL and Redis.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    BucketCount, CallbackInput, Clock, ManualClock, NewTimer, ScheduleInput, ShardKey, SystemClock,
    TaskKey, Timer, TimerSpec, Timestamp,
};
use chime_migrator::{Materialized, Materializer, Migrator, StepReport, StepSettings};
use chime_storage::testkit::{self, PgFixture, RedisFixture};
use chime_storage::{HotIndex, OccurrenceStore, PageRequest, RunFilter, TimerStore};

const HORIZON: Duration = Duration::from_secs(60);

struct Setup {
    db: PgFixture,
    redis: RedisFixture,
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
    let m = Materializer::new(
        db.store(),
        db.store(),
        index.clone(),
        Arc::new(clock.clone()),
    );
    Setup {
        db,
        redis,
        index,
        clock,
        m,
    }
}

fn spec(name: &str, schedule: ScheduleInput, now: Timestamp) -> TimerSpec {
    TimerSpec {
        app: chime_domain::AppName::parse("billing").unwrap(),
        name: chime_domain::TimerName::parse(name).unwrap(),
        schedule: schedule.resolve(now, None, None).unwrap(),
        callback: CallbackInput {
            url: "http://127.0.0.1:9/".into(),
            ..Default::default()
        }
        .parse()
        .unwrap(),
        retry: Default::default(),
        misfire: Default::default(),
        delivery: Default::default(),
    }
}

async fn create(s: &Setup, name: &str, schedule: ScheduleInput, enabled: bool) -> Timer {
    s.db.store
        .create_timer(NewTimer {
            spec: spec(name, schedule, s.clock.now()),
            enabled,
        })
        .await
        .unwrap()
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

async fn all_buckets(s: &Setup) -> Materialized {
    let mut total = Materialized::default();
    for b in BucketCount::DEFAULT.all() {
        total += s.m.bucket(b, HORIZON).await.unwrap();
    }
    total
}

async fn indexed(s: &Setup, t: &Timer) -> Vec<i64> {
    let now = s.clock.now();
    let mut found = Vec::new();
    for minute in 0..3 {
        let shard = ShardKey::new(now.add_millis(minute * 60_000), t.bucket);
        for (key, _) in s
            .index
            .due(shard, now.add_millis(3_600_000), 1000)
            .await
            .unwrap()
        {
            if key.timer_id == t.id {
                found.push(key.run_at.as_millis() - now.as_millis());
            }
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn a_step_materializes_the_horizon_once() {
    let s = setup().await;
    let now = s.clock.now();
    let ticking = create(&s, "every-10s", every("10s"), true).await;
    let once = create(&s, "once", at(now.add_millis(30_000)), true).await;
    create(&s, "later", at(now.add_millis(7_200_000)), true).await;
    create(&s, "off", every("10s"), false).await;

    let first = all_buckets(&s).await;
    assert_eq!(first.timers, 3, "disabled timers are not read");
    // every-10s fires at +10 … +50 inside [now, now+60s); the one-shot at +30s.
    assert_eq!((first.occurrences, first.written, first.indexed), (6, 6, 6));
    assert_eq!(
        indexed(&s, &ticking).await,
        vec![10_000, 20_000, 30_000, 40_000, 50_000]
    );
    assert_eq!(indexed(&s, &once).await, vec![30_000]);

    // Every shard of the window exists, empty or not; none beyond it.
    for b in BucketCount::DEFAULT.all() {
        assert!(s.index.shard_exists(ShardKey::new(now, b)).await.unwrap());
        assert!(
            s.index
                .shard_exists(ShardKey::new(now.add_millis(59_999), b))
                .await
                .unwrap()
        );
        assert!(
            !s.index
                .shard_exists(ShardKey::new(now.add_millis(120_000), b))
                .await
                .unwrap()
        );
    }

    let again = all_buckets(&s).await;
    assert_eq!(
        (again.occurrences, again.written),
        (6, 0),
        "a repeat writes nothing"
    );
    assert_eq!(indexed(&s, &ticking).await.len(), 5);

    // Thirty seconds on, [+30s, +90s) adds the ticks at +60, +70 and +80.
    s.clock.advance(Duration::from_secs(30));
    let later = all_buckets(&s).await;
    assert_eq!(later.written, 3);
    let runs =
        s.db.store
            .list_runs(
                &RunFilter {
                    timer_id: ticking.id,
                    status: None,
                    due_by: None,
                },
                &PageRequest::default(),
            )
            .await
            .unwrap();
    assert_eq!(runs.items.len(), 8);
    assert!(
        runs.items
            .iter()
            .all(|o| o.timer_version == 1 && o.bucket == ticking.bucket)
    );
}

#[tokio::test]
async fn one_timer_on_demand() {
    let s = setup().await;
    let t = create(&s, "every-20s", every("20s"), true).await;
    let done = s.m.timer(t.id, HORIZON, None).await.unwrap();
    assert_eq!((done.timers, done.written), (1, 2));
    assert_eq!(s.m.timer(t.id, HORIZON, None).await.unwrap().written, 0);

    // A newer version adopts the pending rows it keeps and adds the new fire times.
    let mut changed = t.spec.clone();
    changed.schedule = every("10s").resolve(s.clock.now(), None, None).unwrap();
    let v2 =
        s.db.store
            .update_timer(t.id, Some(1), changed)
            .await
            .unwrap();
    let after = s.m.timer(t.id, HORIZON, None).await.unwrap();
    assert_eq!(after.occurrences, 5);
    assert_eq!(after.written, 5, "2 adopted by version 2, 3 new");
    let row =
        s.db.store
            .get_occurrence(TaskKey::new(t.id, s.clock.now().add_millis(20_000)))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.timer_version, v2.version);

    s.db.store.set_timer_enabled(t.id, false).await.unwrap();
    assert_eq!(
        s.m.timer(t.id, HORIZON, None).await.unwrap(),
        Materialized::default()
    );
    s.db.store.delete_timer(t.id).await.unwrap();
    assert!(s.m.timer(t.id, HORIZON, None).await.is_err());
}

fn replica(s: &Setup, leases: Arc<dyn chime_storage::Leases>, step: Duration) -> Arc<Migrator> {
    Arc::new(Migrator::new(
        Materializer::new(
            s.db.store(),
            s.db.store(),
            s.index.clone(),
            Arc::new(s.clock.clone()),
        ),
        leases,
        Arc::new(s.clock.clone()),
        StepSettings::new(step, BucketCount::DEFAULT),
    ))
}

#[tokio::test]
async fn replicas_split_a_step_by_bucket_and_do_it_once() {
    let s = setup().await;
    for i in 0..40 {
        create(&s, &format!("t{i}"), every("10s"), true).await;
    }
    let leases = s.redis.leases();
    let step = Duration::from_secs(30);
    let (a, b) = (
        replica(&s, leases.clone(), step),
        replica(&s, leases.clone(), step),
    );
    let (ra, rb) = tokio::join!(a.run_step(), b.run_step());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(
        ra.buckets + rb.buckets,
        16,
        "each bucket once: {ra:?} {rb:?}"
    );
    assert_eq!(ra.materialized.timers + rb.materialized.timers, 40);
    // The horizon is two steps: 60 s of every-10s ticks.
    assert_eq!(ra.materialized.written + rb.materialized.written, 40 * 5);
    // The step is done: no replica repeats it.
    assert_eq!(a.run_step().await.unwrap(), StepReport::default());
    assert_eq!(b.run_step().await.unwrap(), StepReport::default());
}

#[tokio::test]
async fn a_bucket_held_elsewhere_is_picked_up_once_free() {
    let s = setup().await;
    create(&s, "t", every("10s"), true).await;
    let leases = s.redis.leases();
    let m = replica(&s, leases.clone(), Duration::from_secs(30));
    // Take one bucket's lease as if another replica were working on it.
    let now = s.clock.now().as_millis();
    let index = now / 30_000;
    let other = chime_storage::LeaseToken::random();
    assert!(
        leases
            .acquire(
                &format!("migrator:{index}:3"),
                &other,
                Duration::from_secs(30)
            )
            .await
            .unwrap()
    );
    assert_eq!(m.run_step().await.unwrap().buckets, 15);
    leases
        .release(&format!("migrator:{index}:3"), &other)
        .await
        .unwrap();
    assert_eq!(
        m.run_step().await.unwrap().buckets,
        1,
        "the freed bucket is picked up"
    );
}

type MigratorClient =
    chime_proto::v1::migrator_service_client::MigratorServiceClient<tonic::transport::Channel>;

/// A migrator replica (30 s steps) serving gRPC on loopback, a client, and how to stop it.
async fn serve_grpc(
    s: &Setup,
) -> (
    MigratorClient,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let m = replica(s, s.redis.leases(), Duration::from_secs(30));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(chime_migrator::grpc::serve(
        m,
        listener,
        None,
        Arc::new(chime_runtime::admin::AlwaysReady),
        stop.clone(),
    ));
    let client = MigratorClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (client, stop, server)
}

#[tokio::test]
async fn migrate_timer_over_grpc() {
    use chime_proto::v1::MigrateTimerRequest;

    let s = setup().await;
    let t = create(&s, "every-20s", every("20s"), true).await;
    let (mut client, stop, server) = serve_grpc(&s).await;
    // A trigger's occurrence, off the schedule: inserted by the gateway, indexed on request.
    let triggered = TaskKey::new(t.id, s.clock.now().add_millis(5_000));
    s.db.store
        .insert_occurrences(&[chime_domain::NewOccurrence {
            key: triggered,
            timer_version: t.version,
            bucket: t.bucket,
        }])
        .await
        .unwrap();
    // The step ran at start too, so the on-demand call may find the rows written already.
    let done = client
        .migrate_timer(MigrateTimerRequest {
            timer_id: t.id.get(),
            triggered_run_at_ms: Some(triggered.run_at.as_millis()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(done.materialized <= 3);
    assert_eq!(indexed(&s, &t).await, vec![5_000, 20_000, 40_000]);
    let runs =
        s.db.store
            .list_runs(
                &RunFilter {
                    timer_id: t.id,
                    status: None,
                    due_by: None,
                },
                &PageRequest::default(),
            )
            .await
            .unwrap();
    assert_eq!(
        runs.items.len(),
        3,
        "the trigger, +20s and +40s within the 60s horizon"
    );
    let missing = client
        .migrate_timer(MigrateTimerRequest {
            timer_id: 987_654_321,
            triggered_run_at_ms: None,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let bad = client
        .migrate_timer(MigrateTimerRequest {
            timer_id: -1,
            triggered_run_at_ms: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_batch_of_timers_materializes_in_one_call() {
    let s = setup().await;
    let a = create(&s, "a", every("20s"), true).await;
    let b = create(&s, "b", every("30s"), true).await;
    let off = create(&s, "off", every("20s"), false).await;
    let unknown = chime_domain::TimerId::new(987_654_321).unwrap();
    let done =
        s.m.timers(&[a.id, b.id, off.id, unknown], Duration::from_secs(60))
            .await
            .unwrap();
    assert_eq!((done.timers, done.written, done.indexed), (2, 3, 3));
    assert_eq!(indexed(&s, &a).await, vec![20_000, 40_000]);
    assert_eq!(indexed(&s, &b).await, vec![30_000]);
    assert!(indexed(&s, &off).await.is_empty(), "disabled: nothing");
}

#[tokio::test]
async fn migrate_timers_over_grpc_checks_its_ids() {
    use chime_proto::v1::MigrateTimersRequest;

    let s = setup().await;
    let a = create(&s, "a", every("20s"), true).await;
    let (mut client, stop, server) = serve_grpc(&s).await;
    client
        .migrate_timers(MigrateTimersRequest {
            timer_ids: vec![a.id.get(), 987_654_321],
        })
        .await
        .unwrap();
    assert_eq!(indexed(&s, &a).await, vec![20_000, 40_000]);
    for bad in [vec![-1], vec![1; 1_001]] {
        let e = client
            .migrate_timers(MigrateTimersRequest { timer_ids: bad })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn on_demand_catches_up_fire_times_since_the_change() {
    let s = setup().await;
    let t0 = s.clock.now();
    let t = create(&s, "every-1s", every("1s"), true).await;
    // The call arrives 5 s after the create: the ticks since are not lost. (The store
    // stamps updated_at by the real clock, a little after t0.)
    s.clock.advance(Duration::from_secs(5));
    let done = s.m.timer(t.id, HORIZON, None).await.unwrap();
    let tick = |n: i64| TaskKey::new(t.id, t0.add_millis(n * 1_000));
    assert!(
        s.db.store.get_occurrence(tick(2)).await.unwrap().is_some(),
        "a tick before the call is materialized"
    );
    let since = t.updated_at.as_millis() - t0.as_millis();
    let first = ((since + 999) / 1_000).max(1);
    // Ticks `first` … 64 (the horizon ends at t0 + 65 s, exclusive).
    assert_eq!(done.written, (65 - first) as u64);
    assert_eq!(
        done.indexed, done.written,
        "indexed too, in shards the schedulers still work"
    );
    // A timer changed long ago catches up at most CATCH_UP.
    s.clock.advance(Duration::from_secs(120));
    let late = s.m.timer(t.id, HORIZON, None).await.unwrap();
    assert_eq!(
        late.occurrences,
        30 + 60,
        "30 s of catch-up and the 60 s horizon"
    );
}
