//! [`crate::Calendars`] on MySQL: the shared impl.

crate::sql::calendars_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
