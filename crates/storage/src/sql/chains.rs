//! The `Chains` impl every SQL backend shares.

/// `Chains` for a store whose writes go to `$write` and reads to `$read` (pools), in dialect
/// `$d`.
macro_rules! chains_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        #[async_trait::async_trait]
        impl $crate::Chains for $store {
            async fn start_steps(
                &self,
                steps: &[chime_domain::ChainStep],
                now: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::NewOccurrence>> {
                use $crate::sql::Dialect as _;
                if steps.is_empty() {
                    return Ok(Vec::new());
                }
                let mut started = Vec::new();
                let mut tx = self.$write.begin().await?;
                for s in steps {
                    let (parent_id, parent_at) =
                        (s.parent.timer_id.get(), s.parent.run_at.as_millis());
                    // The step's row first: the one transaction that writes it starts the
                    // step; any other (the same outcome recorded again) finds it and stops.
                    let fresh = sqlx::query(<$d>::CHAIN_STEP_INSERT)
                        .bind(parent_id)
                        .bind(parent_at)
                        .bind(s.step.as_str())
                        .bind(s.on.as_str())
                        .bind(s.app.as_str())
                        .bind(now.as_millis())
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if fresh == 0 {
                        continue;
                    }
                    let timer: Option<(i64, i64, i32, bool)> =
                        sqlx::query_as(<$d>::CHAIN_TIMER_BY_NAME)
                            .bind(s.app.as_str())
                            .bind(s.step.as_str())
                            .fetch_optional(&mut *tx)
                            .await?;
                    let parent = s.parent.to_string();
                    // Where the run went: its instant, or why the step is skipped.
                    let run: Result<(i64, i64, i32, i64), &str> = match timer {
                        None => Err("no timer of that name"),
                        Some((_, _, _, false)) => Err("the timer is paused"),
                        Some((id, version, bucket, true)) => {
                            let mut free = Err("no free instant for its run");
                            for offset in 0..$crate::chains::FREE_INSTANT_TRIES {
                                let at = now.as_millis() + offset;
                                let put = sqlx::query(<$d>::CHAIN_RUN_INSERT)
                                    .bind(id)
                                    .bind(at)
                                    .bind(version)
                                    .bind(bucket)
                                    .bind(&parent)
                                    .execute(&mut *tx)
                                    .await?
                                    .rows_affected();
                                if put == 1 {
                                    free = Ok((id, version, bucket, at));
                                    break;
                                }
                            }
                            free
                        }
                    };
                    let (id, version, bucket, at) = match run {
                        Ok(run) => run,
                        Err(reason) => {
                            sqlx::query(<$d>::CHAIN_STEP_SKIPPED)
                                .bind(reason)
                                .bind(parent_id)
                                .bind(parent_at)
                                .bind(s.step.as_str())
                                .execute(&mut *tx)
                                .await?;
                            continue;
                        }
                    };
                    sqlx::query(<$d>::CHAIN_STEP_STARTED)
                        .bind(id)
                        .bind(at)
                        .bind(parent_id)
                        .bind(parent_at)
                        .bind(s.step.as_str())
                        .execute(&mut *tx)
                        .await?;
                    let key = chime_domain::TaskKey::new(
                        chime_domain::TimerId::new(id).map_err($crate::StoreError::corrupt)?,
                        chime_domain::Timestamp::from_millis(at),
                    );
                    started.push(chime_domain::NewOccurrence {
                        key,
                        timer_version: version,
                        bucket: chime_domain::Bucket::from_stored(
                            u32::try_from(bucket).map_err($crate::StoreError::corrupt)?,
                        ),
                        due: None,
                    });
                }
                tx.commit().await?;
                Ok(started)
            }

            async fn steps_of(
                &self,
                parent: chime_domain::TaskKey,
            ) -> $crate::StoreResult<Vec<chime_domain::StepRecord>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<$crate::chains::StepRow> = sqlx::query_as(<$d>::CHAIN_STEPS_OF)
                    .bind(parent.timer_id.get())
                    .bind(parent.run_at.as_millis())
                    .fetch_all(&self.$read)
                    .await?;
                rows.into_iter()
                    .map(|r| $crate::chains::step_record(parent, r))
                    .collect()
            }
        }
    };
}
pub(crate) use chains_impl;
