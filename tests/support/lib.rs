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

/// A deployment on the machine's PostgreSQL (`db`'s schema) and Redis (`redis`'s prefix).
pub async fn start_on(
    test: &'static str,
    db: &chime_storage::testkit::PgFixture,
    redis: &chime_storage::testkit::RedisFixture,
    schedulers: usize,
    executors: usize,
    env: Vec<(&'static str, String)>,
) -> cluster::Cluster {
    cluster::Cluster::start(cluster::Spec {
        test,
        database_url: db.url(),
        redis_url: chime_storage::testkit::redis_url(),
        redis_prefix: redis.backend.prefix().to_owned(),
        schedulers,
        executors,
        env,
    })
    .await
}
