//! [`crate::Activity`] on SQLite: the shared statements.

crate::activity::activity_impl!(super::SqliteStore, writer, reader);
