//! [`crate::Activity`] on MySQL: the shared impl.

crate::sql::activity_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
