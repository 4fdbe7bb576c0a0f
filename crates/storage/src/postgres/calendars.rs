//! [`crate::Calendars`] on PostgreSQL: the shared statements.

crate::calendars::calendars_impl!(super::PgStore, pool, pool);
