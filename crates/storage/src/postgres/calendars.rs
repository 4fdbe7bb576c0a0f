//! [`crate::Calendars`] on PostgreSQL: the shared impl.

crate::sql::calendars_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
