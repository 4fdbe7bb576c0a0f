//! [`crate::Chains`] on MySQL and MariaDB: the shared impl.

crate::sql::chains_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
