//! Statements both SQL backends run as written, so a third dialect is a question of which of
//! these it accepts rather than another copy. They use `$N` parameters (SQLite accepts them
//! as well as `?N`) and `CAST(… AS …)` rather than PostgreSQL's `::`. What only one backend
//! can say (arrays, `json_each`, `SKIP LOCKED`) stays in its own folder.

/// A timer row, its spec as text whatever the column's type.
macro_rules! shared_timer_cols {
    () => {
        "id, app, name, CAST(spec AS TEXT) AS spec, enabled, version, bucket, created_at, \
         updated_at, deleted_at, paused_reason, paused_at, paused_by"
    };
}

/// The instant after which a timer never fires, from its spec (`Schedule::finishes_at`);
/// rows written before `finish_ms` existed fall back to a one-shot's instant or `end_at`.
macro_rules! finish_ms {
    () => {
        "COALESCE(CAST(spec->'schedule'->>'finish_ms' AS BIGINT), \
           CASE WHEN spec->'schedule'->>'cron' IS NULL AND spec->'schedule'->>'every_ms' IS NULL \
             THEN CAST(spec->'schedule'->>'at_ms' AS BIGINT) END, \
           CAST(spec->'schedule'->>'end_at_ms' AS BIGINT))"
    };
}

/// Live timers by id after `$4`, optionally of one app, enabled state, bucket, state `$8`
/// at `$9`, name prefix `$7`, and labels `$6` (a JSON object; `$labels` is the dialect's
/// "every pair of `$6` is on the timer").
macro_rules! list_timers_sql {
    ($labels:expr) => {
        concat!(
            "SELECT ",
            shared_timer_cols!(),
            " FROM timers WHERE deleted_at IS NULL \
              AND (CAST($1 AS TEXT) IS NULL OR app = $1) \
              AND (CAST($2 AS BOOLEAN) IS NULL OR enabled = $2) \
              AND (CAST($3 AS INTEGER) IS NULL OR bucket = $3) \
              AND (CAST($7 AS TEXT) IS NULL OR substr(name, 1, length($7)) = $7) \
              AND (CAST($8 AS TEXT) IS NULL \
                OR ($8 = 'paused' AND NOT enabled) \
                OR ($8 = 'done' AND enabled AND ",
            finish_ms!(),
            " < $9) \
                OR ($8 = 'enabled' AND enabled AND COALESCE(",
            finish_ms!(),
            " >= $9, TRUE))) \
              AND ",
            $labels,
            " AND id > $4 ORDER BY id LIMIT $5"
        )
    };
}

/// [`list_timers_sql`] on PostgreSQL.
pub(crate) const LIST_TIMERS_PG: &str = list_timers_sql!(
    "NOT EXISTS (SELECT 1 FROM json_each_text(CAST($6 AS JSON)) s \
       WHERE (spec->'labels'->>s.key) IS DISTINCT FROM s.value)"
);

/// [`list_timers_sql`] on SQLite.
pub(crate) const LIST_TIMERS_SQLITE: &str = list_timers_sql!(
    "NOT EXISTS (SELECT 1 FROM json_each($6) s \
       WHERE json_extract(spec, '$.labels.\"' || s.key || '\"') IS NOT s.value)"
);

/// Disables timer `$1` with note (`$2` reason, `$3` at, `$4` by); the version moves only
/// if it was enabled (SET reads the row as it was).
pub(crate) const PAUSE_TIMER: &str = concat!(
    "UPDATE timers SET version = version + CASE WHEN enabled THEN 1 ELSE 0 END, \
       updated_at = CASE WHEN enabled THEN $3 ELSE updated_at END, enabled = FALSE, \
       paused_reason = $2, paused_at = $3, paused_by = $4 \
     WHERE id = $1 AND deleted_at IS NULL RETURNING ",
    shared_timer_cols!()
);

/// `TimerStore::remove_finished` for the ids `$ids` selects, at `$2`.
macro_rules! remove_finished_sql {
    ($ids:expr) => {
        concat!(
            "UPDATE timers SET deleted_at = $2, updated_at = $2, version = version + 1 \
             WHERE id IN (",
            $ids,
            ") AND deleted_at IS NULL AND spec->>'on_complete' = 'delete' AND ",
            finish_ms!(),
            " <= $2 AND NOT EXISTS (SELECT 1 FROM occurrences o WHERE o.timer_id = timers.id \
               AND o.status IN ('pending', 'running', 'retrying')) RETURNING id"
        )
    };
}

pub(crate) const REMOVE_FINISHED_PG: &str = remove_finished_sql!("SELECT UNNEST($1::bigint[])");
pub(crate) const REMOVE_FINISHED_SQLITE: &str =
    remove_finished_sql!("SELECT value FROM json_each($1)");

/// One timer's occurrences before `$3`, newest first, optionally of one status.
pub(crate) const LIST_RUNS: &str = concat!(
    "SELECT ",
    occurrence_cols!(),
    " FROM occurrences WHERE timer_id = $1 AND (CAST($2 AS TEXT) IS NULL OR status = $2) \
      AND run_at < $3 ORDER BY run_at DESC LIMIT $4"
);

/// Dead occurrences after (`$3`, `$4`), optionally of one timer or app.
pub(crate) const LIST_DEAD: &str = concat!(
    "SELECT ",
    occurrence_cols!(),
    " FROM occurrences WHERE status = 'dead' \
       AND (CAST($1 AS BIGINT) IS NULL OR timer_id = $1) \
       AND (CAST($2 AS TEXT) IS NULL OR timer_id IN (SELECT id FROM timers WHERE app = $2)) \
       AND (timer_id, run_at) > ($3, $4) \
     ORDER BY timer_id, run_at LIMIT $5"
);

/// Dead occurrences of timer `$1` (or only the one at `$2`) pending again from `$3`.
pub(crate) const REDRIVE: &str = "UPDATE occurrences SET status = 'pending', attempt = 0, \
       next_attempt_at = $3, lease_until = NULL, error = NULL \
     WHERE status = 'dead' AND timer_id = $1 AND (CAST($2 AS BIGINT) IS NULL OR run_at = $2)";

/// Unfinished work due before `$1`, and claims whose lease ran out before `$2`; `$3` of each.
pub(crate) const FIND_OVERDUE: &str = concat!(
    "SELECT * FROM (SELECT ",
    occurrence_cols!(),
    " FROM occurrences WHERE status IN ('pending', 'retrying') \
       AND COALESCE(next_attempt_at, run_at) < $1 \
       ORDER BY COALESCE(next_attempt_at, run_at) LIMIT $3) AS due \
     UNION ALL SELECT * FROM (SELECT ",
    occurrence_cols!(),
    " FROM occurrences WHERE status = 'running' AND lease_until < $2 \
       ORDER BY lease_until LIMIT $3) AS lapsed"
);

/// Claimable occurrences of bucket `$1` due in [`$2`, `$3`), earliest first.
pub(crate) const DUE_IN_BUCKET: &str = "SELECT timer_id, run_at, \
       COALESCE(next_attempt_at, run_at) AS due FROM occurrences \
     WHERE status IN ('pending', 'retrying') AND bucket = $1 \
       AND COALESCE(next_attempt_at, run_at) >= $2 \
       AND COALESCE(next_attempt_at, run_at) < $3 \
     ORDER BY due LIMIT $4";

/// The statements of [`claim_exclusive`] and [`claim_idempotency_key`], per dialect. Parameters are numbered in the order
/// they appear and each appears once, so MySQL's positional `?` can say the same.
pub(crate) trait Dialect {
    /// The overlap policy the backfill that added (`$1`, `$2`) asked for, if one did.
    const BACKFILL_POLICY: &'static str;
    /// Another occurrence of timer `$1` than the one at `$2` whose callback is in flight (a
    /// claim still live at `$3`) or waiting to retry: what `overlap: skip` must not start
    /// beside.
    const OVERLAPPING: &'static str;
    /// `buffer_one`: an occurrence of timer `$1` earlier than `$2` and due by `$3` (its
    /// nominal time) still waiting to be claimed, other than one in flight.
    const BUFFERED: &'static str;
    /// Skips, with reason `$1`, the occurrence at (`$2`, `$3`) if still claimable.
    const SKIP_ONE: &'static str;
    /// Claims for a lease until `$1` the occurrence at (`$2`, `$3`), if claimable at `$4`.
    const CLAIM_ONE: &'static str;
    /// The claim of the occurrence at (`$1`, `$2`), as [`rows::claimed`] reads it.
    const CLAIMED_ONE: &'static str;
    /// `cancel_other`: an occurrence of timer `$1` later than `$2` in flight (lease live at
    /// `$3`) or retrying.
    const NEWER_IN_FLIGHT: &'static str;
    /// `cancel_other`: skips, with reason `$1`, the occurrences of timer `$2` earlier than
    /// `$3` in flight (lease live at `$4`) or retrying.
    const CANCEL_EARLIER: &'static str;
    /// Takes idempotency key `$2` of app `$1` (fingerprint `$3`) for timer `$4` at `$5`,
    /// unless it was taken before: one row affected on first use, none after. A concurrent
    /// holder of the key is waited for, then seen.
    const CLAIM_IDEMPOTENCY_KEY: &'static str;
    /// What key `$2` of app `$1` was first used for: `fingerprint, timer_id`.
    const IDEMPOTENCY_KEY: &'static str;
    /// Timer `$1`, deleted or not.
    const TIMER_BY_ID: &'static str;
}

/// PostgreSQL and SQLite.
pub(crate) struct Numbered;

impl Dialect for Numbered {
    const BACKFILL_POLICY: &'static str =
        "SELECT backfill FROM occurrences WHERE timer_id = $1 AND run_at = $2";
    const OVERLAPPING: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at <> $2 \
           AND ((status = 'running' AND lease_until >= $3) OR status = 'retrying') LIMIT 1";
    const BUFFERED: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at < $2 AND COALESCE(next_attempt_at, run_at) <= $3 \
           AND status = 'pending' ORDER BY run_at LIMIT 1";
    const SKIP_ONE: &'static str = "UPDATE occurrences SET status = 'skipped', error = $1, \
           next_attempt_at = NULL WHERE timer_id = $2 AND run_at = $3 \
           AND status IN ('pending', 'retrying')";
    const CLAIM_ONE: &'static str = "UPDATE occurrences SET status = 'running', \
           attempt = attempt + 1, lease_until = $1 \
         WHERE timer_id = $2 AND run_at = $3 \
           AND (status IN ('pending', 'retrying') OR (status = 'running' AND lease_until < $4))";
    const CLAIMED_ONE: &'static str = concat!(
        "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
           COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, ",
        crate::rows::timer_now_col!(),
        " FROM occurrences o WHERE o.timer_id = $1 AND o.run_at = $2"
    );
    const NEWER_IN_FLIGHT: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at > $2 \
           AND ((status = 'running' AND lease_until >= $3) OR status = 'retrying') LIMIT 1";
    const CANCEL_EARLIER: &'static str = "UPDATE occurrences SET status = 'skipped', error = $1, \
           lease_until = NULL, next_attempt_at = NULL \
         WHERE timer_id = $2 AND run_at < $3 \
           AND ((status = 'running' AND lease_until >= $4) OR status = 'retrying')";
    const CLAIM_IDEMPOTENCY_KEY: &'static str = "INSERT INTO idempotency_keys \
           (app, key, fingerprint, timer_id, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (app, key) DO NOTHING";
    const IDEMPOTENCY_KEY: &'static str =
        "SELECT fingerprint, timer_id FROM idempotency_keys WHERE app = $1 AND key = $2";
    const TIMER_BY_ID: &'static str = concat!(
        "SELECT ",
        shared_timer_cols!(),
        " FROM timers WHERE id = $1"
    );
}

/// `OccurrenceStore::drop_pending` for the timers `$1`, after `$2`. `run_at` bounds the
/// day partitions read; a pending run due later than its run time (a flexible window) whose
/// run time has passed stays, for the executor to skip. Rows are found by primary key, one
/// timer at a time, and deleted by tuple id, as the claim does; the status is checked only
/// then. Asked for `status = 'pending'` in the same scan, the planner also read the partial
/// index of claimable rows whole (every pending row of the day) to intersect the two.
pub(crate) const DROP_PENDING_PG: &str = "WITH doomed AS ( \
       SELECT x.toid, x.tid FROM UNNEST($1::bigint[]) AS t(id) CROSS JOIN LATERAL ( \
         SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
         WHERE o.timer_id = t.id AND o.run_at > $2 OFFSET 0) x) \
     DELETE FROM occurrences o USING doomed d \
     WHERE o.run_at > $2 AND o.ctid = ANY(ARRAY(SELECT tid FROM doomed)) \
       AND o.tableoid = d.toid AND o.ctid = d.tid AND o.status = 'pending' \
     RETURNING o.timer_id, o.run_at, COALESCE(o.next_attempt_at, o.run_at), o.bucket";

/// [`DROP_PENDING_PG`] for SQLite: `$1` is a JSON array of ids.
pub(crate) const DROP_PENDING_SQLITE: &str = "DELETE FROM occurrences \
     WHERE timer_id IN (SELECT value FROM json_each($1)) AND status = 'pending' \
       AND run_at > $2 \
     RETURNING timer_id, run_at, COALESCE(next_attempt_at, run_at), bucket";

/// [`PAUSE_TIMER`] for `TimerStore::pause_timer`.
macro_rules! pause_timer {
    ($db:expr, $id:expr, $note:expr) => {{
        let (id, note): (chime_domain::TimerId, &chime_domain::PauseNote) = ($id, $note);
        let row = sqlx::query($crate::sql::PAUSE_TIMER)
            .bind(id.get())
            .bind(&note.reason)
            .bind(note.at.as_millis())
            .bind(note.by.as_deref())
            .fetch_optional($db)
            .await?
            .ok_or_else(|| $crate::StoreError::timer_not_found(id))?;
        $crate::rows::timer(&row)
    }};
}

/// `OccurrenceStore::claim_exclusive` inside a transaction `$tx` that already serializes
/// the claimers of the key's timer, with dialect `$d`'s [`Dialect`].
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

// Running them: the binds and the decoding are the same for both backends too. A macro rather
// than a generic function, because each driver's bind and row traits would have to be spelled
// out as bounds; expanded, each body is checked against its own driver. `$db` is the pool.

/// [`list_timers_sql`] (the dialect's `$statement`) for `TimerStore::list_timers`.
macro_rules! list_timers {
    ($db:expr, $statement:expr, $filter:expr, $page:expr) => {{
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let after = $crate::decode_page_token(page, &scope)?.map_or(0, |(id, _)| id);
        let rows = sqlx::query($statement)
            .bind(filter.app.as_ref().map(|a| a.as_str()))
            .bind(filter.enabled)
            .bind(filter.bucket.map(|b| b.get() as i32))
            .bind(after)
            .bind(i64::from(page.size.get()) + 1)
            .bind(filter.labels_json())
            .bind(filter.name_prefix.as_deref())
            .bind(filter.state.map(|(s, _)| s.as_str()))
            .bind(filter.state.map_or(0, |(_, now)| now.as_millis()))
            .fetch_all($db)
            .await?;
        let items = $crate::rows::timers(&rows)?;
        Ok($crate::into_page(items, page.size, &scope, |t| {
            (t.id.get(), 0)
        }))
    }};
}

/// [`LIST_RUNS`] (or the dialect's `$statement`, binding the same values in the same order)
/// for `OccurrenceStore::list_runs`.
macro_rules! list_runs {
    ($db:expr, $filter:expr, $page:expr) => {
        $crate::sql::list_runs!($db, $crate::sql::LIST_RUNS, $filter, $page)
    };
    ($db:expr, $statement:expr, $filter:expr, $page:expr) => {{
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let before = filter.before($crate::decode_page_token(page, &scope)?);
        let rows = sqlx::query($statement)
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

/// [`LIST_DEAD`] (or the dialect's `$statement`, binding the same values in the same order)
/// for `OccurrenceStore::list_dead`.
macro_rules! list_dead {
    ($db:expr, $filter:expr, $page:expr) => {
        $crate::sql::list_dead!($db, $crate::sql::LIST_DEAD, $filter, $page)
    };
    ($db:expr, $statement:expr, $filter:expr, $page:expr) => {{
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let (after_id, after_run) =
            $crate::decode_page_token(page, &scope)?.unwrap_or((0, i64::MIN));
        let rows = sqlx::query($statement)
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

/// [`REDRIVE`] for `OccurrenceStore::redrive`.
macro_rules! redrive {
    ($db:expr, $what:expr, $now:expr) => {{
        let (timer, run_at) = $what.parts();
        let done = sqlx::query($crate::sql::REDRIVE)
            .bind(timer)
            .bind(run_at)
            .bind($now.as_millis())
            .execute($db)
            .await?;
        Ok(done.rows_affected())
    }};
}

/// [`FIND_OVERDUE`] for `OccurrenceStore::find_overdue`.
macro_rules! find_overdue {
    ($db:expr, $due_before:expr, $now:expr, $limit:expr) => {{
        let limit = $limit;
        let rows = sqlx::query($crate::sql::FIND_OVERDUE)
            .bind($due_before.as_millis())
            .bind($now.as_millis())
            .bind(i64::from(limit))
            .fetch_all($db)
            .await?;
        let items = $crate::rows::occurrences(&rows)?;
        Ok($crate::oldest_first(items, limit))
    }};
}

/// [`DUE_IN_BUCKET`] (or the dialect's `$statement`, binding the same values in the same
/// order) for `OccurrenceStore::due_in_bucket`.
macro_rules! due_in_bucket {
    ($db:expr, $bucket:expr, $from:expr, $to:expr, $limit:expr) => {
        $crate::sql::due_in_bucket!($db, $crate::sql::DUE_IN_BUCKET, $bucket, $from, $to, $limit)
    };
    ($db:expr, $statement:expr, $bucket:expr, $from:expr, $to:expr, $limit:expr) => {{
        let rows = sqlx::query($statement)
            .bind($bucket.get() as i32)
            .bind($from.as_millis())
            .bind($to.as_millis())
            .bind(i64::from($limit))
            .fetch_all($db)
            .await?;
        rows.iter().map($crate::rows::due_pair).collect()
    }};
}

/// The idempotent part of a create, the same on every backend: inside the create's
/// transaction `$tx`, before timer `$id` of request `$req` is written, claims its key. The
/// first use of a key goes on to write the timer (`None`); a repeat gets the timer the
/// first use created, once its fingerprint shows it is the same request (`Some`).
macro_rules! claim_idempotency_key {
    ($tx:expr, $req:expr, $id:expr, $now:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let req: &$crate::CreateTimer = $req;
        match &req.idempotency {
            None => None,
            Some(idem) => {
                let app = req.timer.spec.app.as_str();
                let first_use = sqlx::query(<$d>::CLAIM_IDEMPOTENCY_KEY)
                    .bind(app)
                    .bind(&idem.key)
                    .bind(&idem.fingerprint)
                    .bind($id.get())
                    .bind($now.as_millis())
                    .execute(&mut *$tx)
                    .await?
                    .rows_affected()
                    == 1;
                if first_use {
                    None
                } else {
                    let (fingerprint, original): (String, i64) =
                        sqlx::query_as(<$d>::IDEMPOTENCY_KEY)
                            .bind(app)
                            .bind(&idem.key)
                            .fetch_one(&mut *$tx)
                            .await?;
                    $crate::rows::check_fingerprint(idem, &fingerprint)?;
                    let row = sqlx::query(<$d>::TIMER_BY_ID)
                        .bind(original)
                        .fetch_one(&mut *$tx)
                        .await?;
                    Some($crate::Written {
                        timer: $crate::rows::timer(&row)?,
                        occurrences: Vec::new(),
                    })
                }
            }
        }
    }};
}

pub(crate) use claim_idempotency_key;
pub(crate) use {
    claim_exclusive, due_in_bucket, find_overdue, list_dead, list_runs, list_timers, pause_timer,
    redrive,
};
