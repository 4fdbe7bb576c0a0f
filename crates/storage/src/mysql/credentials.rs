//! [`crate::Credentials`] on MySQL: the shared impl.

crate::sql::credentials_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
