//! [`crate::Notifications`] on PostgreSQL: the shared impl.

crate::sql::notifications_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
