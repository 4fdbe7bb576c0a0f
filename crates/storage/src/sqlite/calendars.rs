//! [`crate::Calendars`] on SQLite: the shared statements, written through the one writer.

crate::calendars::calendars_impl!(super::SqliteStore, writer, reader);
