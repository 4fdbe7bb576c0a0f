//! [`crate::Activity`] on PostgreSQL: the shared statements.

crate::activity::activity_impl!(super::PgStore, pool, pool);
