//! The `Notifications` impl every SQL backend shares.

/// `Notifications` for a store whose writes go to `$write` and reads to `$read` (pools), in
/// dialect `$d`.
macro_rules! notifications_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        #[async_trait::async_trait]
        impl $crate::Notifications for $store {
            async fn put_notifications(
                &self,
                s: &chime_domain::NotificationSettings,
            ) -> $crate::StoreResult<bool> {
                use $crate::sql::Dialect as _;
                let mut tx = self.$write.begin().await?;
                let existed: Option<i32> = sqlx::query_scalar(<$d>::NOTIFY_SETTINGS_EXISTS)
                    .bind(s.app.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                sqlx::query(<$d>::NOTIFY_SETTINGS_UPSERT)
                    .bind(s.app.as_str())
                    .bind($crate::notifications::to_json(s)?)
                    .bind(s.updated_at.as_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(existed.is_none())
            }

            async fn get_notifications(
                &self,
                app: &chime_domain::AppName,
            ) -> $crate::StoreResult<Option<chime_domain::NotificationSettings>> {
                use $crate::sql::Dialect as _;
                let text: Option<String> = sqlx::query_scalar(<$d>::NOTIFY_SETTINGS_GET)
                    .bind(app.as_str())
                    .fetch_optional(&self.$read)
                    .await?;
                text.as_deref()
                    .map($crate::notifications::from_json)
                    .transpose()
            }

            async fn count_failures(
                &self,
                timers: &[chime_domain::TimerId],
            ) -> $crate::StoreResult<Vec<(chime_domain::TimerId, u32)>> {
                use $crate::sql::Dialect as _;
                if timers.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.$write.begin().await?;
                let mut out = Vec::with_capacity(timers.len());
                for id in timers {
                    sqlx::query(<$d>::STREAK_ADD)
                        .bind(id.get())
                        .execute(&mut *tx)
                        .await?;
                    let failed: i64 = sqlx::query_scalar(<$d>::STREAK_GET)
                        .bind(id.get())
                        .fetch_one(&mut *tx)
                        .await?;
                    out.push($crate::notifications::streak(id.get(), failed)?);
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn end_streaks(
                &self,
                timers: &[chime_domain::TimerId],
            ) -> $crate::StoreResult<Vec<(chime_domain::TimerId, u32)>> {
                use $crate::sql::Dialect as _;
                if timers.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.$write.begin().await?;
                // Locked where the backend can: a streak two executors end at once is
                // returned to one of them.
                let rows: Vec<(i64, i64)> = sqlx::query_as(<$d>::STREAKS_OF)
                    .bind($crate::notifications::ids_json(timers))
                    .fetch_all(&mut *tx)
                    .await?;
                for (id, _) in &rows {
                    sqlx::query(<$d>::STREAK_DELETE)
                        .bind(*id)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                rows.into_iter()
                    .map(|(id, failed)| $crate::notifications::streak(id, failed))
                    .collect()
            }

            async fn record_notification(
                &self,
                sent: &chime_domain::SentNotification,
                keep_since: chime_domain::Timestamp,
            ) -> $crate::StoreResult<()> {
                use $crate::sql::Dialect as _;
                let app = sent.event.app.as_str();
                let mut tx = self.$write.begin().await?;
                sqlx::query(<$d>::SENT_UPSERT)
                    .bind(app)
                    .bind(sent.event.id())
                    .bind(sent.at.as_millis())
                    .bind($crate::notifications::to_json(sent)?)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(<$d>::SENT_PURGE)
                    .bind(app)
                    .bind(keep_since.as_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn recent_notifications(
                &self,
                app: &chime_domain::AppName,
                limit: u32,
            ) -> $crate::StoreResult<Vec<chime_domain::SentNotification>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<String> = sqlx::query_scalar(<$d>::SENT_RECENT)
                    .bind(app.as_str())
                    .bind(i64::from(limit))
                    .fetch_all(&self.$read)
                    .await?;
                rows.iter()
                    .map(|t| $crate::notifications::from_json(t))
                    .collect()
            }
        }
    };
}
pub(crate) use notifications_impl;
