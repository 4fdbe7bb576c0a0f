//! [`crate::Shards`] on PostgreSQL: the shared impl.

crate::sql::shards_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
