//! [`crate::Credentials`] on SQLite: the shared impl. Writes go through the one writer
//! connection, so a rotation needs no lock of its own.

crate::sql::credentials_impl!(super::SqliteStore, writer, reader, crate::sql::Sqlite);
