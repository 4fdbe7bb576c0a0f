//! The `Calendars` impl every SQL backend shares.

/// `Calendars` for a store whose writes go to `$write` and reads to `$read` (pools), in
/// dialect `$d`.
macro_rules! calendars_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        #[async_trait::async_trait]
        impl $crate::Calendars for $store {
            async fn put_calendar(&self, c: &chime_domain::Calendar) -> $crate::StoreResult<bool> {
                use $crate::sql::Dialect as _;
                let mut tx = self.$write.begin().await?;
                let existed: Option<i32> = sqlx::query_scalar(<$d>::CALENDAR_EXISTS)
                    .bind(c.app.as_str())
                    .bind(c.name.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                sqlx::query(<$d>::CALENDAR_UPSERT)
                    .bind(c.app.as_str())
                    .bind(c.name.as_str())
                    .bind($crate::calendars::dates_json(c))
                    .bind(c.updated_at.as_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(existed.is_none())
            }

            async fn get_calendars(
                &self,
                app: &chime_domain::AppName,
                names: &[chime_domain::CalendarName],
            ) -> $crate::StoreResult<Vec<chime_domain::Calendar>> {
                // An app has few calendars: read them all and keep those asked for.
                let all = $crate::Calendars::list_calendars(self, app).await?;
                Ok(all
                    .into_iter()
                    .filter(|c| names.contains(&c.name))
                    .collect())
            }

            async fn list_calendars(
                &self,
                app: &chime_domain::AppName,
            ) -> $crate::StoreResult<Vec<chime_domain::Calendar>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<$crate::calendars::CalendarRow> =
                    sqlx::query_as(<$d>::CALENDARS_OF_APP)
                        .bind(app.as_str())
                        .fetch_all(&self.$read)
                        .await?;
                rows.into_iter().map($crate::calendars::calendar).collect()
            }
        }
    };
}
pub(crate) use calendars_impl;
