//! What the fault tests (`tests/faults.rs`) share: a deployment on the machine's PostgreSQL
//! and Redis, on PostgreSQL alone, or on MariaDB and Redis, and waits on the schedulers'
//! shares.

use std::time::Duration;

use chime_storage::testkit;

use crate::cluster::{Cluster, Spec};

/// The store of a deployment: a fresh PostgreSQL schema or MySQL/MariaDB database.
pub enum Db {
    Postgres(testkit::PgFixture),
    MySql(testkit::MySqlFixture),
}

impl Db {
    pub fn url(&self) -> String {
        match self {
            Self::Postgres(f) => f.url(),
            Self::MySql(f) => f.url(),
        }
    }

    pub fn is_mysql(&self) -> bool {
        matches!(self, Self::MySql(_))
    }
}

/// The machine's database (a fresh schema) and Redis (a fresh prefix); no Redis in
/// PostgreSQL-only mode.
pub struct Shared {
    pub db: Db,
    pub redis: Option<testkit::RedisFixture>,
}

pub async fn shared() -> Shared {
    Shared {
        db: Db::Postgres(testkit::pg_unmigrated().await),
        redis: Some(testkit::redis().await),
    }
}

/// PostgreSQL alone: hot index, leases and membership in the database.
pub async fn pg_only() -> Shared {
    Shared {
        db: Db::Postgres(testkit::pg_unmigrated().await),
        redis: None,
    }
}

/// MariaDB (`CHIME_TEST_MYSQL_URL`) as the store, with Redis.
pub async fn mariadb() -> Shared {
    Shared {
        db: Db::MySql(testkit::mysql().await),
        redis: Some(testkit::redis().await),
    }
}

impl Shared {
    /// `CHIME_REDIS_URL` and the prefix, or nothing in PostgreSQL-only mode.
    pub fn redis(&self) -> (String, &str) {
        match &self.redis {
            Some(r) => (testkit::redis_url(), r.backend.prefix()),
            None => (String::new(), ""),
        }
    }

    pub async fn cluster(
        &self,
        test: &'static str,
        schedulers: usize,
        executors: usize,
        env: Vec<(&'static str, String)>,
    ) -> Cluster {
        let (url, prefix) = self.redis();
        cluster(test, self.db.url(), url, prefix, schedulers, executors, env).await
    }
}

pub async fn cluster(
    test: &'static str,
    database_url: String,
    redis_url: String,
    prefix: &str,
    schedulers: usize,
    executors: usize,
    env: Vec<(&'static str, String)>,
) -> Cluster {
    Cluster::start(Spec {
        test,
        database_url,
        redis_url,
        redis_prefix: prefix.to_owned(),
        schedulers,
        executors,
        env: crate::test_env(env),
    })
    .await
}

/// Each scheduler's `chime_scheduler_shards_held`.
pub async fn shards_held(c: &Cluster) -> Vec<f64> {
    let mut held = Vec::new();
    for s in &c.schedulers {
        held.push(s.counter("chime_scheduler_shards_held").await);
    }
    held
}

/// Waits until every scheduler holds at least a fifth of the shards held; how long it took.
pub async fn until_shared(c: &Cluster, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        let held = shards_held(c).await;
        let total: f64 = held.iter().sum();
        if total > 0.0 && held.iter().all(|h| *h >= 0.2 * total) {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "shards not shared: {held:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Waits until `done` holds, polling every 200 ms; fails naming `what` after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
