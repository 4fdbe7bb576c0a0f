//! [`crate::Chains`] on PostgreSQL: the shared impl.

crate::sql::chains_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
