//! The `Activity` impl every SQL backend shares.

/// `Activity` for a store whose writes go to `$write` and reads to `$read` (pools), in
/// dialect `$d`.
macro_rules! activity_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        #[async_trait::async_trait]
        impl $crate::Activity for $store {
            async fn write_activity(
                &self,
                writer: &str,
                tallies: &[chime_domain::Tally],
            ) -> $crate::StoreResult<()> {
                use $crate::activity::count;
                use $crate::sql::Dialect as _;
                // Few rows (apps active in the open minutes): one transaction, a statement each.
                let mut tx = self.$write.begin().await?;
                for t in tallies {
                    sqlx::query(<$d>::ACTIVITY_UPSERT)
                        .bind(t.app.as_str())
                        .bind(t.minute.as_millis())
                        .bind(writer)
                        .bind(count(t.counts.fired))
                        .bind(count(t.counts.succeeded))
                        .bind(count(t.counts.failed))
                        .bind(count(t.counts.dead))
                        .bind($crate::activity::lateness_json(&t.counts))
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn read_activity(
                &self,
                app: Option<&chime_domain::AppName>,
                since: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::Tally>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<$crate::activity::ActivityRow> = match app {
                    Some(app) => {
                        sqlx::query_as(<$d>::ACTIVITY_OF_APP)
                            .bind(since.as_millis())
                            .bind(app.as_str())
                            .fetch_all(&self.$read)
                            .await?
                    }
                    None => {
                        sqlx::query_as(<$d>::ACTIVITY_ALL)
                            .bind(since.as_millis())
                            .fetch_all(&self.$read)
                            .await?
                    }
                };
                $crate::activity::tallies(rows)
            }
        }
    };
}
pub(crate) use activity_impl;
