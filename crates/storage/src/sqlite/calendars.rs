//! [`crate::Calendars`] on SQLite: the shared impl.

crate::sql::calendars_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
