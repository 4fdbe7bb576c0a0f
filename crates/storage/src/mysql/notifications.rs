//! [`crate::Notifications`] on MySQL: the shared impl.

crate::sql::notifications_impl!(super::MySqlStore, pool, pool, super::dialect::MySql);
