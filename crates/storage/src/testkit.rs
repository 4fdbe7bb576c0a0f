//! Test fixtures over real backends, for this crate's tests and for every crate whose tests
//! need a database. Each fixture owns a private namespace (a PostgreSQL schema, a SQLite file,
//! a Redis key prefix) and removes it when dropped, panics included, so tests run in parallel
//! and leave nothing behind. `make test` points them at reachable servers through
//! `CHIME_TEST_DATABASE_URL` and `CHIME_TEST_REDIS_URL`.

// A fixture that cannot be set up ends the test with a message, by design.
#![allow(clippy::expect_used, clippy::panic)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::{RealTime, TimeControl};
use crate::memory::{MemoryHotIndex, MemoryLeases};
use crate::postgres::PgStore;
use crate::redis::{RedisBackend, RedisSettings};
use crate::sqlite::SqliteStore;
use crate::{HotIndex, Leases, Membership};
use chime_domain::{BucketCount, Clock, ManualClock, SystemClock};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

pub fn database_url() -> String {
    std::env::var("CHIME_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn redis_url() -> String {
    std::env::var("CHIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Runs async cleanup from `Drop` on a private runtime, so it works inside or outside tokio.
fn cleanup_blocking<F>(make: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cleanup runtime");
        rt.block_on(make());
    })
    .join();
}

// ---- PostgreSQL ------------------------------------------------------------------------

pub struct PgFixture {
    pub store: Arc<PgStore>,
    schema: String,
}

impl PgFixture {
    pub fn store(&self) -> Arc<PgStore> {
        self.store.clone()
    }

    /// The fixture's private schema, for processes that connect on their own.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A database URL confined to the fixture's schema, for processes under test.
    pub fn url(&self) -> String {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", self.schema)
    }
}

/// A migrated store in a fresh schema.
pub async fn pg() -> PgFixture {
    let fixture = pg_unmigrated().await;
    fixture.store.migrate().await.expect("migrate test schema");
    fixture
}

/// A store in a fresh, empty schema.
pub async fn pg_unmigrated() -> PgFixture {
    let url = database_url();
    let schema = unique("chime_t");
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} is not reachable ({e}); run the tests with `make test`")
    });
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .expect("create test schema");
    let options = PgConnectOptions::from_str(&url)
        .expect("test database URL")
        .options([("search_path", schema.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(12)
        .connect_with(options)
        .await
        .expect("connect to test schema");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    PgFixture {
        store: Arc::new(PgStore::from_pool(pool, clock, BucketCount::DEFAULT)),
        schema,
    }
}

impl Drop for PgFixture {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        cleanup_blocking(move || async move {
            if let Ok(mut conn) = sqlx::PgConnection::connect(&database_url()).await {
                // A test that left a transaction open on its schema (a task of its runtime,
                // stopped mid-way) would make the drop wait for ever: better a schema left
                // behind than a hung run.
                let _ = sqlx::query("SET lock_timeout = '20s'")
                    .execute(&mut conn)
                    .await;
                let _ = sqlx::query(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {schema} CASCADE"
                )))
                .execute(&mut conn)
                .await;
            }
        });
    }
}

impl PgFixture {
    /// The hot index in this fixture's schema (PostgreSQL-only mode).
    pub fn hot_index(&self) -> Arc<dyn HotIndex> {
        Arc::new(self.store.hot_path(Duration::from_secs(300)))
    }
    pub fn leases(&self) -> Arc<dyn Leases> {
        Arc::new(self.store.hot_path(Duration::from_secs(300)))
    }
    pub fn membership(&self) -> Arc<dyn Membership> {
        Arc::new(self.store.hot_path(Duration::from_secs(300)))
    }
    /// The database's clock: contracts wait for expiry instead of moving time.
    pub fn time(&self) -> Arc<dyn TimeControl> {
        Arc::new(crate::contract::RealTime)
    }
}

// ---- MySQL / MariaDB ---------------------------------------------------------------------

pub fn mysql_url() -> String {
    std::env::var("CHIME_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// A migrated MySQL store in a database of its own, dropped with the fixture.
pub struct MySqlFixture {
    pub store: Arc<crate::mysql::MySqlStore>,
    database: String,
}

impl MySqlFixture {
    pub fn store(&self) -> Arc<crate::mysql::MySqlStore> {
        self.store.clone()
    }

    /// The fixture's database, for processes that connect on their own.
    pub fn url(&self) -> String {
        mysql_url_of(&mysql_url(), &self.database)
    }
}

/// `url` with its database replaced by `database`.
fn mysql_url_of(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
    match query {
        Some(q) => format!("{server}/{database}?{q}"),
        None => format!("{server}/{database}"),
    }
}

pub async fn mysql() -> MySqlFixture {
    let url = mysql_url();
    let database = unique("chime_t");
    let mut admin = sqlx::MySqlConnection::connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!("MySQL/MariaDB at {url} is not reachable ({e}); run the tests with `make test`")
        });
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let settings = crate::postgres::PgSettings {
        max_connections: 12,
        ..Default::default()
    };
    let pool = crate::mysql::MySqlStore::pool_options(&settings)
        .connect(&mysql_url_of(&url, &database))
        .await
        .expect("connect to the test database");
    let store =
        crate::mysql::MySqlStore::from_pool(pool, Arc::new(SystemClock), BucketCount::DEFAULT);
    store.migrate().await.expect("migrate the test database");
    MySqlFixture {
        store: Arc::new(store),
        database,
    }
}

impl Drop for MySqlFixture {
    fn drop(&mut self) {
        let database = self.database.clone();
        cleanup_blocking(move || async move {
            if let Ok(mut conn) = sqlx::MySqlConnection::connect(&mysql_url()).await {
                let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {database}")))
                    .execute(&mut conn)
                    .await;
            }
        });
    }
}

// ---- SQLite ----------------------------------------------------------------------------

pub struct SqliteFixture {
    pub store: Arc<SqliteStore>,
    path: std::path::PathBuf,
}

impl SqliteFixture {
    pub fn store(&self) -> Arc<SqliteStore> {
        self.store.clone()
    }
}

pub async fn sqlite() -> SqliteFixture {
    let fixture = sqlite_unmigrated().await;
    fixture
        .store
        .migrate()
        .await
        .expect("migrate test database");
    fixture
}

pub async fn sqlite_unmigrated() -> SqliteFixture {
    open_sqlite(Arc::new(SystemClock), BucketCount::DEFAULT).await
}

/// A migrated throwaway SQLite store whose "now" is `clock` and whose timers fall in
/// `buckets` buckets (tests that drive the pipeline on an injected clock).
pub async fn sqlite_on(clock: Arc<dyn Clock>, buckets: BucketCount) -> SqliteFixture {
    let fixture = open_sqlite(clock, buckets).await;
    fixture
        .store
        .migrate()
        .await
        .expect("migrate test database");
    fixture
}

async fn open_sqlite(clock: Arc<dyn Clock>, buckets: BucketCount) -> SqliteFixture {
    let path = std::env::temp_dir().join(format!("{}.db", unique("chime-test")));
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url, clock, buckets)
        .await
        .expect("open test database");
    SqliteFixture {
        store: Arc::new(store),
        path,
    }
}

impl Drop for SqliteFixture {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

// ---- Redis -----------------------------------------------------------------------------

pub struct RedisFixture {
    pub backend: RedisBackend,
    prefix: String,
}

pub async fn redis() -> RedisFixture {
    let url = redis_url();
    let prefix = unique("chime-test");
    let settings = RedisSettings {
        prefix: prefix.clone(),
        ..Default::default()
    };
    let backend = RedisBackend::connect(&url, settings)
        .await
        .unwrap_or_else(|e| {
            panic!("Redis at {url} is not reachable ({e}); run the tests with `make test`")
        });
    RedisFixture { backend, prefix }
}

impl RedisFixture {
    pub fn hot_index(&self) -> Arc<dyn HotIndex> {
        Arc::new(self.backend.hot_index())
    }
    pub fn leases(&self) -> Arc<dyn Leases> {
        Arc::new(self.backend.leases())
    }
    pub fn membership(&self) -> Arc<dyn Membership> {
        Arc::new(self.backend.leases())
    }
    pub fn time(&self) -> Arc<dyn TimeControl> {
        Arc::new(RealTime)
    }
}

impl Drop for RedisFixture {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        cleanup_blocking(move || async move {
            let settings = RedisSettings {
                prefix,
                pool_size: 1,
                ..Default::default()
            };
            if let Ok(backend) = RedisBackend::connect(&redis_url(), settings).await {
                let _ = backend.delete_prefix().await;
                backend.quit().await;
            }
        });
    }
}

// ---- memory ----------------------------------------------------------------------------

pub struct MemoryFixture {
    clock: ManualClock,
}

pub async fn memory() -> MemoryFixture {
    MemoryFixture {
        clock: ManualClock::new(SystemClock.now()),
    }
}

impl MemoryFixture {
    pub fn hot_index(&self) -> Arc<dyn HotIndex> {
        Arc::new(MemoryHotIndex::new(
            Arc::new(self.clock.clone()),
            Duration::from_secs(300),
        ))
    }
    pub fn leases(&self) -> Arc<dyn Leases> {
        Arc::new(MemoryLeases::new(Arc::new(self.clock.clone())))
    }
    pub fn membership(&self) -> Arc<dyn Membership> {
        Arc::new(MemoryLeases::new(Arc::new(self.clock.clone())))
    }
    pub fn time(&self) -> Arc<dyn TimeControl> {
        Arc::new(self.clock.clone())
    }
}
