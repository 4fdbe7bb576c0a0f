//! [`crate::Chains`] on SQLite: the shared impl, writing through the one writer.

crate::sql::chains_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
