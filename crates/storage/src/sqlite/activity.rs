//! [`crate::Activity`] on SQLite: the shared impl.

crate::sql::activity_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
