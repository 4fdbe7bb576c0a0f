//! [`crate::Activity`] on PostgreSQL: the shared impl.

crate::sql::activity_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
