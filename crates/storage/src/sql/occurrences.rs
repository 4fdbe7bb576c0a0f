//! Shared bodies of `OccurrenceStore` methods, over a [`super::Dialect`] `$d`; `$db` is a
//! pool, `$tx` a transaction.

/// `OccurrenceStore::claim_exclusive` inside a transaction `$tx` that already serializes
/// the claimers of the key's timer, with dialect `$d`.
macro_rules! claim_exclusive {
    ($tx:expr, $key:expr, $claim:expr, $overlap:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (key, claim): (chime_domain::TaskKey, chime_domain::Claim) = ($key, $claim);
        let (id, run_at) = (key.timer_id.get(), key.run_at.as_millis());
        // A backfilled occurrence goes by its backfill's policy.
        let own: Option<Option<String>> = sqlx::query_scalar(<$d>::BACKFILL_POLICY)
            .bind(id)
            .bind(run_at)
            .fetch_optional(&mut *$tx)
            .await?;
        let overlap: chime_domain::OverlapPolicy = match own.flatten() {
            Some(p) => p.parse().map_err($crate::StoreError::corrupt)?,
            None => $overlap,
        };
        let cancels = overlap == chime_domain::OverlapPolicy::CancelOther;
        let busy: Option<i64> = if overlap.is_allow_all() {
            None
        } else if cancels {
            // Only a later occurrence in flight stops this one; earlier ones it cancels.
            sqlx::query_scalar(<$d>::NEWER_IN_FLIGHT)
                .bind(id)
                .bind(run_at)
                .bind(claim.now.as_millis())
                .fetch_optional(&mut *$tx)
                .await?
        } else {
            sqlx::query_scalar(<$d>::OVERLAPPING)
                .bind(id)
                .bind(run_at)
                .bind(claim.now.as_millis())
                .fetch_optional(&mut *$tx)
                .await?
        };
        // `buffer_one`: the first occurrence to find its timer busy waits; the rest skip.
        let buffered: Option<i64> = match busy {
            Some(_) if overlap == chime_domain::OverlapPolicy::BufferOne => {
                sqlx::query_scalar(<$d>::BUFFERED)
                    .bind(id)
                    .bind(run_at)
                    .bind(claim.now.as_millis())
                    .fetch_optional(&mut *$tx)
                    .await?
            }
            _ => None,
        };
        let waits = busy.is_some()
            && buffered.is_none()
            && overlap == chime_domain::OverlapPolicy::BufferOne;
        if let (Some(other), true) = (busy, waits) {
            $crate::Exclusive::Waiting {
                beside: chime_domain::Timestamp::from_millis(other),
            }
        } else if let Some(other) = busy {
            let other = chime_domain::Timestamp::from_millis(other);
            let reason = match buffered {
                _ if cancels => format!(
                    "overlap: skipped while the later occurrence at {} is in flight or retrying",
                    other.to_rfc3339()
                ),
                Some(first) => format!(
                    "overlap: skipped while the occurrence at {} is in flight or retrying and \
                     the one at {} waits for it",
                    other.to_rfc3339(),
                    chime_domain::Timestamp::from_millis(first).to_rfc3339()
                ),
                None => format!(
                    "overlap: skipped while the occurrence at {} is in flight or retrying",
                    other.to_rfc3339()
                ),
            };
            let skipped = sqlx::query(<$d>::SKIP_ONE)
                .bind(reason)
                .bind(id)
                .bind(run_at)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
            if skipped == 0 {
                $crate::Exclusive::NotClaimable
            } else {
                $crate::Exclusive::Skipped { beside: other }
            }
        } else {
            let claimed = sqlx::query(<$d>::CLAIM_ONE)
                .bind(claim.lease_until.as_millis())
                .bind(id)
                .bind(run_at)
                .bind(claim.now.as_millis())
                .execute(&mut *$tx)
                .await?
                .rows_affected();
            let row = if claimed == 1 {
                sqlx::query(<$d>::CLAIMED_ONE)
                    .bind(id)
                    .bind(run_at)
                    .fetch_optional(&mut *$tx)
                    .await?
            } else {
                None
            };
            match row {
                Some(row) => {
                    if cancels {
                        sqlx::query(<$d>::CANCEL_EARLIER)
                            .bind(format!(
                                "overlap: cancelled by the occurrence at {}",
                                key.run_at.to_rfc3339()
                            ))
                            .bind(id)
                            .bind(run_at)
                            .bind(claim.now.as_millis())
                            .execute(&mut *$tx)
                            .await?;
                    }
                    $crate::Exclusive::Claimed($crate::rows::claimed(&row)?)
                }
                None => $crate::Exclusive::NotClaimable,
            }
        }
    }};
}

/// `OccurrenceStore::list_runs`: [`super::Dialect::LIST_RUNS`].
macro_rules! list_runs {
    ($db:expr, $filter:expr, $page:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let before = filter.before($crate::decode_page_token(page, &scope)?);
        let rows = sqlx::query(<$d>::LIST_RUNS)
            .bind(filter.timer_id.get())
            .bind(filter.status.map(|s| s.as_str()))
            .bind(before)
            .bind(i64::from(page.size.get()) + 1)
            .fetch_all($db)
            .await?;
        let items = $crate::rows::occurrences(&rows)?;
        Ok($crate::into_page(items, page.size, &scope, |o| {
            (o.key.run_at.as_millis(), 0)
        }))
    }};
}

/// `OccurrenceStore::list_dead`: [`super::Dialect::LIST_DEAD`].
macro_rules! list_dead {
    ($db:expr, $filter:expr, $page:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let (after_id, after_run) =
            $crate::decode_page_token(page, &scope)?.unwrap_or((0, i64::MIN));
        let rows = sqlx::query(<$d>::LIST_DEAD)
            .bind(filter.timer_id.map(|t| t.get()))
            .bind(filter.app.as_ref().map(chime_domain::AppName::as_str))
            .bind(after_id)
            .bind(after_run)
            .bind(i64::from(page.size.get()) + 1)
            .fetch_all($db)
            .await?;
        let items = $crate::rows::occurrences(&rows)?;
        Ok($crate::into_page(items, page.size, &scope, |o| {
            (o.key.timer_id.get(), o.key.run_at.as_millis())
        }))
    }};
}

/// `OccurrenceStore::redrive`: [`super::Dialect::REDRIVE`].
macro_rules! redrive {
    ($db:expr, $what:expr, $now:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (timer, run_at) = $what.parts();
        let done = sqlx::query(<$d>::REDRIVE)
            .bind($now.as_millis())
            .bind(timer)
            .bind(run_at)
            .execute($db)
            .await?;
        Ok(done.rows_affected())
    }};
}

/// `OccurrenceStore::find_overdue`: [`super::Dialect::FIND_OVERDUE`].
macro_rules! find_overdue {
    ($db:expr, $due_before:expr, $now:expr, $limit:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let limit = $limit;
        let rows = sqlx::query(<$d>::FIND_OVERDUE)
            .bind($due_before.as_millis())
            .bind(i64::from(limit))
            .bind($now.as_millis())
            .bind(i64::from(limit))
            .fetch_all($db)
            .await?;
        let items = $crate::rows::occurrences(&rows)?;
        Ok($crate::oldest_first(items, limit))
    }};
}

/// `OccurrenceStore::due_in_bucket`: [`super::Dialect::DUE_IN_BUCKET`].
macro_rules! due_in_bucket {
    ($db:expr, $bucket:expr, $from:expr, $to:expr, $limit:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let rows = sqlx::query(<$d>::DUE_IN_BUCKET)
            .bind($bucket.get() as i32)
            .bind($from.as_millis())
            .bind($to.as_millis())
            .bind(i64::from($limit))
            .fetch_all($db)
            .await?;
        rows.iter().map($crate::rows::due_pair).collect()
    }};
}

pub(crate) use {claim_exclusive, due_in_bucket, find_overdue, list_dead, list_runs, redrive};

/// `[[timer_id, run_at, version, due, reason], …]` (`due` null for a stopped timer's run):
/// the runs of
/// `OccurrenceStore::skip_before_claim` as one JSON parameter (`json_each`, `JSON_TABLE`).
/// `[[timer_id, version], …]` for `OccurrenceStore::drop_pending` on the stores that take
/// JSON.
pub(crate) fn stopped_timers_json(timers: &[chime_domain::StoppedTimer]) -> String {
    serde_json::Value::Array(
        timers
            .iter()
            .map(|t| serde_json::json!([t.id.get(), t.version]))
            .collect(),
    )
    .to_string()
}

pub(crate) fn early_skips_json(runs: &[chime_domain::EarlySkip]) -> String {
    serde_json::Value::Array(
        runs.iter()
            .map(|r| {
                serde_json::json!([
                    r.key.timer_id.get(),
                    r.key.run_at.as_millis(),
                    r.timer_version,
                    r.kind.due().map(chime_domain::Timestamp::as_millis),
                    r.reason
                ])
            })
            .collect(),
    )
    .to_string()
}

/// Unwritten runs that ended, as one JSON parameter for the stores that take JSON:
/// `[[timer_id, run_at, version, bucket, status, attempt, fired_at, http_status, output,
/// error, next_attempt_at], …]`.
pub(crate) fn ended_rows_json(outcomes: &[&chime_domain::Outcome]) -> crate::StoreResult<String> {
    let owned: Vec<chime_domain::Outcome> = outcomes.iter().map(|o| (*o).clone()).collect();
    let c = crate::OutcomeColumns::new(&owned)?;
    Ok(serde_json::Value::Array(
        outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let (version, bucket) = o
                    .unwritten
                    .map_or((0, 0), |u| (u.timer_version, u.bucket.get()));
                serde_json::json!([
                    c.timer_ids[i],
                    c.run_ats[i],
                    version,
                    bucket,
                    c.statuses[i],
                    c.attempts[i],
                    c.fired_ats[i],
                    c.http_statuses[i],
                    c.outputs[i],
                    c.errors[i],
                    c.next_attempt_ats[i]
                ])
            })
            .collect(),
    )
    .to_string())
}

/// `[[timer_id, run_at], …]`, keys as one JSON parameter.
pub(crate) fn keys_json(keys: &[chime_domain::TaskKey]) -> String {
    serde_json::Value::Array(
        keys.iter()
            .map(|k| serde_json::json!([k.timer_id.get(), k.run_at.as_millis()]))
            .collect(),
    )
    .to_string()
}
