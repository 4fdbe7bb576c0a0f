//! [`crate::Credentials`] on PostgreSQL: the shared impl; rotations of one app queue on
//! an advisory lock.

crate::sql::credentials_impl!(super::PgStore, pool, pool, crate::sql::Postgres);
