//! The databases the storage bench measures: a PostgreSQL schema or a MySQL database of its
//! own, emptied between runs and dropped after.

use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;
use chime_domain::{BucketCount, Clock, SystemClock};
use chime_storage::OccurrenceStore;
use chime_storage::mysql::MySqlStore;
use chime_storage::postgres::{PgSettings, PgStore};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

/// A database of the bench's own (a PostgreSQL schema or a MySQL database), dropped after.
pub(super) struct DbBench {
    pub(super) name: &'static str,
    pub(super) store: Arc<dyn OccurrenceStore>,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    Postgres {
        store: Arc<PgStore>,
        schema: String,
        admin_url: String,
    },
    MySql {
        store: Arc<MySqlStore>,
        database: String,
        admin_url: String,
    },
}

fn scratch_name() -> String {
    format!(
        "chime_bench_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl DbBench {
    pub(super) async fn postgres(url: &str, pool_size: u32) -> anyhow::Result<Self> {
        let schema = scratch_name();
        let mut admin = sqlx::PgConnection::connect(url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut admin)
            .await?;
        let options = PgConnectOptions::from_str(url)?.options([("search_path", schema.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect_with(options)
            .await?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = Arc::new(PgStore::from_pool(pool, clock, BucketCount::DEFAULT));
        store.migrate().await?;
        Ok(Self {
            name: "postgres",
            store: store.clone(),
            kind: Kind::Postgres {
                store,
                schema,
                admin_url: url.to_owned(),
            },
        })
    }

    pub(super) async fn mysql(url: &str, pool_size: u32) -> anyhow::Result<Self> {
        let database = scratch_name();
        let mut admin = sqlx::MySqlConnection::connect(url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {database}")))
            .execute(&mut admin)
            .await?;
        let (server, _) = url
            .rsplit_once('/')
            .context("the MySQL URL names no database")?;
        let settings = PgSettings {
            max_connections: pool_size,
            ..Default::default()
        };
        let store = Arc::new(
            MySqlStore::connect(
                &format!("{server}/{database}"),
                &settings,
                Arc::new(SystemClock),
                BucketCount::DEFAULT,
            )
            .await?,
        );
        store.migrate().await?;
        Ok(Self {
            name: "mariadb",
            store: store.clone(),
            kind: Kind::MySql {
                store,
                database,
                admin_url: url.to_owned(),
            },
        })
    }

    /// Empties the occurrences, with fresh statistics as a real table would have.
    pub(super) async fn truncate(&self) -> anyhow::Result<()> {
        match &self.kind {
            Kind::Postgres { store, .. } => {
                sqlx::query("TRUNCATE occurrences")
                    .execute(store.pool())
                    .await?;
                sqlx::query("ANALYZE occurrences")
                    .execute(store.pool())
                    .await?;
            }
            Kind::MySql { store, .. } => {
                sqlx::query("TRUNCATE TABLE occurrences")
                    .execute(store.pool())
                    .await?;
                sqlx::query("ANALYZE TABLE occurrences")
                    .execute(store.pool())
                    .await?;
            }
        }
        Ok(())
    }

    pub(super) async fn succeeded(&self) -> anyhow::Result<i64> {
        const Q: &str = "SELECT count(*) FROM occurrences WHERE status = 'succeeded'";
        Ok(match &self.kind {
            Kind::Postgres { store, .. } => sqlx::query_scalar(Q).fetch_one(store.pool()).await?,
            Kind::MySql { store, .. } => sqlx::query_scalar(Q).fetch_one(store.pool()).await?,
        })
    }

    pub(super) async fn drop_all(self) -> anyhow::Result<()> {
        match self.kind {
            Kind::Postgres {
                store,
                schema,
                admin_url,
            } => {
                store.pool().close().await;
                let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                    .execute(&mut admin)
                    .await?;
            }
            Kind::MySql {
                store,
                database,
                admin_url,
            } => {
                store.close().await;
                let mut admin = sqlx::MySqlConnection::connect(&admin_url).await?;
                sqlx::query(AssertSqlSafe(format!("DROP DATABASE {database}")))
                    .execute(&mut admin)
                    .await?;
            }
        }
        Ok(())
    }
}
