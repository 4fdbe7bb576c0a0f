//! Running Chime's binaries as processes for end-to-end tests. The helpers live in
//! `chime_test_support::deploy`, shared with the pipeline benchmark.

// Setup failures end the test with a message, by design.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

pub mod brokers;
pub mod faults;
pub mod servers;
pub mod timers;
pub mod workers;

pub use chime_test_support::deploy::{
    Service, bin, bin_dir, cluster, free_port, free_port_pair, log_dir,
};

/// Each process's database pool in an end-to-end deployment, unless a test sets its own.
/// Tests run side by side against one PostgreSQL (100 connections by default): six
/// processes with the default 16 each would run it out of connections at the third stack.
pub const TEST_POOL: u32 = 4;

/// `env` with the settings every end-to-end deployment shares ([`TEST_POOL`]) ahead of it,
/// so the test's own win.
pub fn test_env(mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    env.insert(
        0,
        ("CHIME_DATABASE__MAX_CONNECTIONS", TEST_POOL.to_string()),
    );
    env
}

/// A deployment on the machine's PostgreSQL (`db`'s schema) and Redis (`redis`'s prefix).
pub async fn start_on(
    test: &'static str,
    db: &chime_storage::testkit::PgFixture,
    redis: &chime_storage::testkit::RedisFixture,
    schedulers: usize,
    executors: usize,
    env: Vec<(&'static str, String)>,
) -> cluster::Cluster {
    start_from(test, db, redis, (schedulers, executors), env, None).await
}

/// [`start_on`] with the binaries of another build (in `from`), as an upgrade starts.
pub async fn start_from(
    test: &'static str,
    db: &chime_storage::testkit::PgFixture,
    redis: &chime_storage::testkit::RedisFixture,
    (schedulers, executors): (usize, usize),
    env: Vec<(&'static str, String)>,
    from: Option<std::path::PathBuf>,
) -> cluster::Cluster {
    let spec = cluster::Spec {
        test,
        database_url: db.url(),
        redis_url: chime_storage::testkit::redis_url(),
        redis_prefix: redis.backend.prefix().to_owned(),
        schedulers,
        executors,
        env: test_env(env),
    };
    cluster::Cluster::start_from(spec, from).await
}

/// How late a callback may arrive in an end-to-end test and still count as on time. The
/// tests run side by side on a shared machine, so they judge outcomes (what arrived, how
/// often, in what order) and leave lateness figures to the benchmark; this bound only
/// catches a callback that waited for something it should not (a lease, a sweep, a slow
/// neighbour), which costs seconds.
pub const ON_TIME_MS: i64 = 3_000;
