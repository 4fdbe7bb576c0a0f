//! Statements both SQL backends run as written, so a third dialect is a question of which of
//! these it accepts rather than another copy. They use `$N` parameters (SQLite accepts them
//! as well as `?N`) and `CAST(… AS …)` rather than PostgreSQL's `::`. What only one backend
//! can say (arrays, `json_each`, `SKIP LOCKED`) stays in its own folder.

/// A timer row, its spec as text whatever the column's type.
macro_rules! shared_timer_cols {
    () => {
        "id, app, name, CAST(spec AS TEXT) AS spec, enabled, version, bucket, created_at, \
         updated_at, deleted_at"
    };
}

/// Live timers by id after `$4`, optionally of one app, enabled state and bucket.
pub(crate) const LIST_TIMERS: &str = concat!(
    "SELECT ",
    shared_timer_cols!(),
    " FROM timers WHERE deleted_at IS NULL \
      AND (CAST($1 AS TEXT) IS NULL OR app = $1) \
      AND (CAST($2 AS BOOLEAN) IS NULL OR enabled = $2) \
      AND (CAST($3 AS INTEGER) IS NULL OR bucket = $3) \
      AND id > $4 ORDER BY id LIMIT $5"
);

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
