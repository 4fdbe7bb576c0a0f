//! [`crate::Shards`] on SQLite: the shared impl, writing through the one writer.

crate::sql::shards_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
