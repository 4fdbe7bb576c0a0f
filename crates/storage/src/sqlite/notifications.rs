//! [`crate::Notifications`] on SQLite: the shared impl.

crate::sql::notifications_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
