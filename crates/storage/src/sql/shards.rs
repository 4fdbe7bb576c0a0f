//! The `Shards` impl every SQL backend shares.

/// `Shards` for a store whose writes go to `$write` and reads to `$read` (pools), in dialect
/// `$d`.
macro_rules! shards_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        #[async_trait::async_trait]
        impl $crate::Shards for $store {
            async fn plan_shards(
                &self,
                key: chime_domain::TaskKey,
                total: u32,
            ) -> $crate::StoreResult<Vec<chime_domain::Shard>> {
                use $crate::sql::Dialect as _;
                let mut tx = self.$write.begin().await?;
                // Shard 0 first: the transaction that writes it makes the plan; another
                // (waiting on it, then finding it) leaves the plan as made.
                for index in 0..total {
                    let written = sqlx::query(<$d>::SHARD_PLAN)
                        .bind(key.timer_id.get())
                        .bind(key.run_at.as_millis())
                        .bind($crate::shards::signed(index))
                        .bind($crate::shards::signed(total))
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if index == 0 && written == 0 {
                        break;
                    }
                }
                tx.commit().await?;
                self.shards_of(key).await
            }

            async fn shards_of(
                &self,
                key: chime_domain::TaskKey,
            ) -> $crate::StoreResult<Vec<chime_domain::Shard>> {
                use $crate::sql::Dialect as _;
                // From the writer: a plan just made is read back whole.
                let rows: Vec<$crate::shards::ShardRow> = sqlx::query_as(<$d>::SHARDS_BETWEEN)
                    .bind(key.timer_id.get())
                    .bind(key.run_at.as_millis())
                    .bind(key.run_at.as_millis())
                    .fetch_all(&self.$write)
                    .await?;
                rows.into_iter()
                    .map(|r| $crate::shards::shard(r).map(|(_, s)| s))
                    .collect()
            }

            async fn record_shards(
                &self,
                key: chime_domain::TaskKey,
                shards: &[chime_domain::Shard],
            ) -> $crate::StoreResult<()> {
                use $crate::sql::Dialect as _;
                if shards.is_empty() {
                    return Ok(());
                }
                let mut tx = self.$write.begin().await?;
                for s in shards {
                    sqlx::query(<$d>::SHARD_RECORD)
                        .bind(s.status.as_str())
                        .bind($crate::shards::signed(s.attempt))
                        .bind(s.worker.as_deref())
                        .bind(s.error.as_deref())
                        .bind(key.timer_id.get())
                        .bind(key.run_at.as_millis())
                        .bind($crate::shards::signed(s.index))
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn shards_between(
                &self,
                timer: chime_domain::TimerId,
                from: chime_domain::Timestamp,
                to: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<(chime_domain::Timestamp, chime_domain::Shard)>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<$crate::shards::ShardRow> = sqlx::query_as(<$d>::SHARDS_BETWEEN)
                    .bind(timer.get())
                    .bind(from.as_millis())
                    .bind(to.as_millis())
                    .fetch_all(&self.$read)
                    .await?;
                rows.into_iter().map($crate::shards::shard).collect()
            }
        }
    };
}
pub(crate) use shards_impl;
