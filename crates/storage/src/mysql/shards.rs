//! [`crate::Shards`] on MySQL and MariaDB: the shared impl.

crate::sql::shards_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
