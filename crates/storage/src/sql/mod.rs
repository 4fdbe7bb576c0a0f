//! The one way the SQL backends (PostgreSQL, SQLite, MySQL) share code.
//!
//! - **Statements** that more than one backend runs are consts of [`Dialect`], one impl per
//!   backend ([`Postgres`], [`Sqlite`], `mysql::dialect::MySql`). The defaults are written
//!   once for PostgreSQL and SQLite, which accept the same `$N` parameters and `CAST(… AS …)`;
//!   MySQL says each in its own words. Parameters are numbered in the order they appear and
//!   each is bound once, so MySQL's positional `?` can say the same statement; where a value
//!   is needed twice, the shared code binds it twice.
//! - **The code around them** (binds, decoding, transactions) is written once, as a macro
//!   over the dialect type in this folder: a method body (`sql::list_runs!(pool, filter,
//!   page, Postgres)`) or, where a whole trait is the same, its impl
//!   (`sql::activity_impl!(PgStore, pool, pool, Postgres)`). A macro rather than a generic
//!   function, because each driver's bind and row traits would have to be spelled out as
//!   bounds; expanded, each body is checked against its own driver.
//! - What only one backend can say (arrays, `json_each`, `JSON_TABLE`, `SKIP LOCKED`,
//!   partitions) stays in its own folder.
//!
//! The contract suites (`contract/`) run against all three, so a dialect's statement that
//! does not parse or bind fails there.

/// The purges of what is kept beside the runs, in dialect `$d` on `$pool`: the activity
/// tallies as long as the history they sum up (`before.history`), chain steps and broadcast
/// shards as long as the runs they could start or retry again (`before.dead`).
macro_rules! purge_beside_runs {
    ($pool:expr, $d:ty, $before:expr) => {{
        use $crate::sql::Dialect as _;
        for (statement, before) in [
            (<$d>::ACTIVITY_PURGE, $before.history),
            (<$d>::CHAIN_STEPS_PURGE, $before.dead),
            (<$d>::SHARDS_PURGE, $before.dead),
        ] {
            sqlx::query(statement)
                .bind(before.as_millis())
                .execute($pool)
                .await?;
        }
    }};
}
pub(crate) use purge_beside_runs;

/// A timer row, its spec as text whatever the column's type.
macro_rules! shared_timer_cols {
    () => {
        "id, app, name, CAST(spec AS TEXT) AS spec, enabled, version, bucket, created_at, \
         updated_at, deleted_at, paused_reason, paused_at, paused_by, written_ahead"
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

/// [`Dialect::LIST_TIMERS`] for PostgreSQL and SQLite; `$labels` is the dialect's "every
/// pair of `$7` (a JSON object) is on the timer".
macro_rules! list_timers_sql {
    ($labels:expr) => {
        concat!(
            "SELECT ",
            shared_timer_cols!(),
            " FROM timers WHERE deleted_at IS NULL \
              AND (CAST($1 AS TEXT) IS NULL OR app = $1) \
              AND (CAST($2 AS BOOLEAN) IS NULL OR enabled = $2) \
              AND (CAST($3 AS INTEGER) IS NULL OR bucket = $3) \
              AND (CAST($4 AS TEXT) IS NULL OR substr(name, 1, length($4)) = $4) \
              AND (CAST($5 AS TEXT) IS NULL \
                OR ($5 = 'paused' AND NOT enabled) \
                OR ($5 = 'done' AND enabled AND ",
            finish_ms!(),
            " < $6) \
                OR ($5 = 'enabled' AND enabled AND COALESCE(",
            finish_ms!(),
            " >= $6, TRUE))) \
              AND ",
            $labels,
            " AND id > $8 ORDER BY id LIMIT $9"
        )
    };
}

/// `TimerStore::remove_finished` for the ids `$ids` selects, at `$2` (PostgreSQL and SQLite
/// only: MySQL has no `UPDATE … RETURNING`).
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

mod activity;
mod calendars;
mod chains;
mod credentials;
mod notifications;
mod occurrences;
mod shards;
mod timers;

pub(crate) use activity::activity_impl;
pub(crate) use calendars::calendars_impl;
pub(crate) use chains::chains_impl;
pub(crate) use credentials::credentials_impl;
pub(crate) use notifications::notifications_impl;
pub(crate) use occurrences::{
    claim_exclusive, due_in_bucket, early_skips_json, ended_rows_json, find_overdue, keys_json,
    list_dead, list_runs, redrive, stopped_timers_json,
};
pub(crate) use shards::shards_impl;
pub(crate) use timers::{
    claim_idempotency_key, create_timers, list_timers, pause_timer, unwritten_timers,
};

/// The statements more than one backend runs, in each backend's words (see the module
/// comment). The defaults are PostgreSQL's and SQLite's.
pub(crate) trait Dialect {
    // Timers.

    /// Live timers by id after `$8` (at most `$9`), optionally of one app `$1`, enabled
    /// state `$2`, bucket `$3`, name prefix `$4`, state `$5` at `$6` and labels `$7` (a JSON
    /// object). No default: each dialect reads labels its own way.
    const LIST_TIMERS: &'static str;
    /// Timer `$1` if live.
    const LIVE_TIMER: &'static str = concat!(
        "SELECT ",
        shared_timer_cols!(),
        " FROM timers WHERE id = $1 AND deleted_at IS NULL"
    );
    /// The enabled live timers of bucket `$1` whose runs are unwritten, with their
    /// watermarks, by id after `$2`, at most `$3`.
    const UNWRITTEN_TIMERS: &'static str = concat!(
        "SELECT ",
        shared_timer_cols!(),
        ", materialized_until FROM timers WHERE bucket = $1 AND NOT written_ahead AND enabled \
         AND deleted_at IS NULL AND id > $2 ORDER BY id LIMIT $3"
    );
    /// Timer `$1`, deleted or not.
    const TIMER_BY_ID: &'static str = concat!(
        "SELECT ",
        shared_timer_cols!(),
        " FROM timers WHERE id = $1"
    );
    /// Disables timer `$5` with note (`$2` reason, `$3` at, `$4` by; `$1` the same instant
    /// as `$3`); the version and `updated_at` move only if it was enabled (SET reads the row
    /// as it was).
    const PAUSE_TIMER: &'static str = "UPDATE timers \
         SET version = version + CASE WHEN enabled THEN 1 ELSE 0 END, \
           updated_at = CASE WHEN enabled THEN $1 ELSE updated_at END, enabled = FALSE, \
           paused_reason = $2, paused_at = $3, paused_by = $4 \
         WHERE id = $5 AND deleted_at IS NULL";
    /// Takes idempotency key `$2` of app `$1` (fingerprint `$3`) for timer `$4` at `$5`,
    /// unless it was taken before: one row affected on first use, none after. A concurrent
    /// holder of the key is waited for, then seen.
    const CLAIM_IDEMPOTENCY_KEY: &'static str = "INSERT INTO idempotency_keys \
           (app, key, fingerprint, timer_id, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (app, key) DO NOTHING";
    /// What key `$2` of app `$1` was first used for: `fingerprint, timer_id`.
    const IDEMPOTENCY_KEY: &'static str =
        "SELECT fingerprint, timer_id FROM idempotency_keys WHERE app = $1 AND key = $2";

    // Occurrences.

    /// One timer's (`$1`) occurrences before `$3`, newest first, of status `$2` if given;
    /// at most `$4`.
    const LIST_RUNS: &'static str = concat!(
        "SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE timer_id = $1 AND (CAST($2 AS TEXT) IS NULL OR status = $2) \
          AND run_at < $3 ORDER BY run_at DESC LIMIT $4"
    );
    /// Dead occurrences after (`$3`, `$4`), of timer `$1` or app `$2` if given; at most `$5`.
    const LIST_DEAD: &'static str = concat!(
        "SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE status = 'dead' \
           AND (CAST($1 AS BIGINT) IS NULL OR timer_id = $1) \
           AND (CAST($2 AS TEXT) IS NULL \
             OR timer_id IN (SELECT id FROM timers WHERE app = $2)) \
           AND (timer_id, run_at) > ($3, $4) \
         ORDER BY timer_id, run_at LIMIT $5"
    );
    /// Dead occurrences of timer `$2` (or only the one at `$3`) pending again from `$1`.
    const REDRIVE: &'static str = "UPDATE occurrences SET status = 'pending', attempt = 0, \
           next_attempt_at = $1, lease_until = NULL, error = NULL \
         WHERE status = 'dead' AND timer_id = $2 AND run_at = COALESCE(CAST($3 AS BIGINT), run_at)";
    /// Unfinished work due before `$1` (at most `$2`), and claims whose lease ran out before
    /// `$3` (at most `$4`).
    const FIND_OVERDUE: &'static str = concat!(
        "SELECT * FROM (SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE status IN ('pending', 'retrying') \
           AND COALESCE(next_attempt_at, run_at) < $1 \
           ORDER BY COALESCE(next_attempt_at, run_at) LIMIT $2) AS due \
         UNION ALL SELECT * FROM (SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE status = 'running' AND lease_until < $3 \
           ORDER BY lease_until LIMIT $4) AS lapsed"
    );
    /// Claimable occurrences of bucket `$1` due in [`$2`, `$3`), earliest first; at most `$4`.
    const DUE_IN_BUCKET: &'static str = "SELECT timer_id, run_at, \
           COALESCE(next_attempt_at, run_at) AS due FROM occurrences \
         WHERE status IN ('pending', 'retrying') AND bucket = $1 \
           AND COALESCE(next_attempt_at, run_at) >= $2 \
           AND COALESCE(next_attempt_at, run_at) < $3 \
         ORDER BY due LIMIT $4";

    // The exclusive claim (`claim_exclusive!`).

    /// The overlap policy the backfill that added (`$1`, `$2`) asked for, if one did.
    const BACKFILL_POLICY: &'static str =
        "SELECT backfill FROM occurrences WHERE timer_id = $1 AND run_at = $2";
    /// Another occurrence of timer `$1` than the one at `$2` whose callback is in flight (a
    /// claim still live at `$3`) or waiting to retry: what `overlap: skip` must not start
    /// beside.
    const OVERLAPPING: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at <> $2 \
           AND ((status = 'running' AND lease_until >= $3) OR status = 'retrying') LIMIT 1";
    /// `buffer_one`: an occurrence of timer `$1` earlier than `$2` and due by `$3` (its
    /// nominal time) still waiting to be claimed, other than one in flight.
    const BUFFERED: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at < $2 AND COALESCE(next_attempt_at, run_at) <= $3 \
           AND status = 'pending' ORDER BY run_at LIMIT 1";
    /// Skips, with reason `$1`, the occurrence at (`$2`, `$3`) if still claimable.
    const SKIP_ONE: &'static str = "UPDATE occurrences SET status = 'skipped', error = $1, \
           next_attempt_at = NULL WHERE timer_id = $2 AND run_at = $3 \
           AND status IN ('pending', 'retrying')";
    /// Claims for a lease until `$1` the occurrence at (`$2`, `$3`), if claimable at `$4`.
    const CLAIM_ONE: &'static str = "UPDATE occurrences SET status = 'running', \
           attempt = attempt + 1, lease_until = $1 \
         WHERE timer_id = $2 AND run_at = $3 \
           AND (status IN ('pending', 'retrying') OR (status = 'running' AND lease_until < $4))";
    /// The claim of the occurrence at (`$1`, `$2`), as `rows::claimed` reads it.
    const CLAIMED_ONE: &'static str = concat!(
        "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
           COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
        crate::rows::timer_now_col!(),
        " FROM occurrences o WHERE o.timer_id = $1 AND o.run_at = $2"
    );
    /// `cancel_other`: an occurrence of timer `$1` later than `$2` in flight (lease live at
    /// `$3`) or retrying.
    const NEWER_IN_FLIGHT: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = $1 AND run_at > $2 \
           AND ((status = 'running' AND lease_until >= $3) OR status = 'retrying') LIMIT 1";
    /// `cancel_other`: skips, with reason `$1`, the occurrences of timer `$2` earlier than
    /// `$3` in flight (lease live at `$4`) or retrying.
    const CANCEL_EARLIER: &'static str = "UPDATE occurrences SET status = 'skipped', error = $1, \
           lease_until = NULL, next_attempt_at = NULL \
         WHERE timer_id = $2 AND run_at < $3 \
           AND ((status = 'running' AND lease_until >= $4) OR status = 'retrying')";

    // Activity (per app and minute tallies).

    /// Writer `$3`'s tally of app `$1` in minute `$2`, replacing the one it wrote before.
    const ACTIVITY_UPSERT: &'static str = "INSERT INTO activity \
         (app, minute, writer, fired, succeeded, failed, dead, lateness) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (minute, app, writer) DO UPDATE SET fired = excluded.fired, \
         succeeded = excluded.succeeded, failed = excluded.failed, dead = excluded.dead, \
         lateness = excluded.lateness";
    /// Every tally from minute `$1` on.
    const ACTIVITY_ALL: &'static str = "SELECT app, minute, fired, succeeded, failed, dead, \
         lateness FROM activity WHERE minute >= $1 ORDER BY minute, app";
    /// App `$2`'s tallies from minute `$1` on.
    const ACTIVITY_OF_APP: &'static str = "SELECT app, minute, fired, succeeded, failed, dead, \
         lateness FROM activity WHERE minute >= $1 AND app = $2 ORDER BY minute, app";
    /// Tallies of minutes before `$1`, with the janitor's purge.
    const ACTIVITY_PURGE: &'static str = "DELETE FROM activity WHERE minute < $1";

    // Calendars.

    /// Whether app `$1` has calendar `$2`, inside the put's transaction.
    const CALENDAR_EXISTS: &'static str = "SELECT 1 FROM calendars WHERE app = $1 AND name = $2";
    /// Creates or replaces app `$1`'s calendar `$2`: dates `$3`, at `$4`.
    const CALENDAR_UPSERT: &'static str = "INSERT INTO calendars (app, name, dates, updated_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (app, name) \
         DO UPDATE SET dates = excluded.dates, updated_at = excluded.updated_at";
    /// App `$1`'s calendars in name order.
    const CALENDARS_OF_APP: &'static str =
        "SELECT app, name, dates, updated_at FROM calendars WHERE app = $1 ORDER BY name";

    // Failure notifications.

    /// Whether app `$1` has settings, inside the put's transaction.
    const NOTIFY_SETTINGS_EXISTS: &'static str =
        "SELECT 1 FROM notification_settings WHERE app = $1";
    /// Creates or replaces app `$1`'s settings `$2` (JSON), at `$3`.
    const NOTIFY_SETTINGS_UPSERT: &'static str = "INSERT INTO notification_settings \
         (app, settings, updated_at) VALUES ($1, $2, $3) ON CONFLICT (app) \
         DO UPDATE SET settings = excluded.settings, updated_at = excluded.updated_at";
    /// App `$1`'s settings.
    const NOTIFY_SETTINGS_GET: &'static str =
        "SELECT settings FROM notification_settings WHERE app = $1";
    /// One more failed run of timer `$1`.
    const STREAK_ADD: &'static str = "INSERT INTO failure_streaks (timer_id, failed) \
         VALUES ($1, 1) ON CONFLICT (timer_id) DO UPDATE SET failed = failure_streaks.failed + 1";
    /// Timer `$1`'s streak, inside the transaction that added to it.
    const STREAK_GET: &'static str = "SELECT failed FROM failure_streaks WHERE timer_id = $1";
    /// The streaks of the timers in `$1` (a JSON array of ids), locked where the backend can.
    /// No default: each dialect reads a JSON array its own way.
    const STREAKS_OF: &'static str;
    /// Timer `$1`'s streak ends.
    const STREAK_DELETE: &'static str = "DELETE FROM failure_streaks WHERE timer_id = $1";
    /// App `$1`'s record of notification `$2`, sent at `$3`: `$4` (JSON).
    const SENT_UPSERT: &'static str = "INSERT INTO notifications_sent (app, id, at, sent) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (app, id) \
         DO UPDATE SET at = excluded.at, sent = excluded.sent";
    /// App `$1`'s records older than `$2` go.
    const SENT_PURGE: &'static str = "DELETE FROM notifications_sent WHERE app = $1 AND at < $2";
    /// App `$1`'s latest `$2` records, newest first.
    const SENT_RECENT: &'static str =
        "SELECT sent FROM notifications_sent WHERE app = $1 ORDER BY at DESC, id LIMIT $2";

    // Chains.

    /// Records step `$3` (`$4`: on_success | on_failure, app `$5`, at `$6`) of parent run
    /// (`$1`, `$2`) as skipped, unless recorded before: one row affected when it is new.
    const CHAIN_STEP_INSERT: &'static str = "INSERT INTO chain_steps \
         (parent_timer_id, parent_run_at, step, on_outcome, app, status, at) \
         VALUES ($1, $2, $3, $4, $5, 'skipped', $6) ON CONFLICT DO NOTHING";
    /// App `$1`'s live timer named `$2`: id, version, bucket, enabled.
    const CHAIN_TIMER_BY_NAME: &'static str = "SELECT id, version, bucket, enabled FROM timers \
         WHERE app = $1 AND name = $2 AND deleted_at IS NULL";
    /// Timer `$1`'s run at `$2` (version `$3`, bucket `$4`) started by parent run `$5`,
    /// unless that instant is taken.
    const CHAIN_RUN_INSERT: &'static str = "INSERT INTO occurrences \
         (timer_id, run_at, timer_version, bucket, parent) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (timer_id, run_at) DO NOTHING";
    /// Step `$5` of parent run (`$3`, `$4`) started run (`$1`, `$2`).
    const CHAIN_STEP_STARTED: &'static str = "UPDATE chain_steps SET status = 'started', \
         run_timer_id = $1, run_at = $2 \
         WHERE parent_timer_id = $3 AND parent_run_at = $4 AND step = $5";
    /// Step `$4` of parent run (`$2`, `$3`) was skipped because `$1`.
    const CHAIN_STEP_SKIPPED: &'static str = "UPDATE chain_steps SET reason = $1 \
         WHERE parent_timer_id = $2 AND parent_run_at = $3 AND step = $4";
    /// The steps of parent run (`$1`, `$2`), by name.
    const CHAIN_STEPS_OF: &'static str = "SELECT step, on_outcome, status, run_timer_id, \
         run_at, reason, at FROM chain_steps \
         WHERE parent_timer_id = $1 AND parent_run_at = $2 ORDER BY step";
    /// Steps recorded before `$1` go (the janitor's purge).
    const CHAIN_STEPS_PURGE: &'static str = "DELETE FROM chain_steps WHERE at < $1";

    // Broadcast shards.

    /// Shard `$3` of `$4` of run (`$1`, `$2`), pending, unless planned already.
    const SHARD_PLAN: &'static str = "INSERT INTO run_shards \
         (timer_id, run_at, idx, total, status, attempt) VALUES ($1, $2, $3, $4, 'pending', 0) \
         ON CONFLICT DO NOTHING";
    /// Shard `$7` of run (`$5`, `$6`): status `$1` at attempt `$2`, by worker `$3`, error `$4`.
    const SHARD_RECORD: &'static str = "UPDATE run_shards SET status = $1, attempt = $2, \
         worker = $3, error = $4 WHERE timer_id = $5 AND run_at = $6 AND idx = $7";
    /// The shards of timer `$1`'s runs at `$2..=$3`, by run and index.
    const SHARDS_BETWEEN: &'static str = "SELECT run_at, idx, total, status, attempt, worker, \
         error FROM run_shards WHERE timer_id = $1 AND run_at BETWEEN $2 AND $3 \
         ORDER BY run_at, idx";
    /// Shards of runs before `$1` go (the janitor's purge).
    const SHARDS_PURGE: &'static str = "DELETE FROM run_shards WHERE run_at < $1";

    // Credentials.

    /// A new API token: id, app, name, scopes, hash, created_at, expires_at.
    const TOKEN_CREATE: &'static str = "INSERT INTO api_tokens \
         (id, app, name, scopes, hash, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)";
    /// App `$1`'s unrevoked tokens, oldest first.
    const TOKENS_OF_APP: &'static str = concat!(
        "SELECT ",
        crate::credentials::token_cols!(),
        " FROM api_tokens WHERE app = $1 AND revoked_at IS NULL ORDER BY created_at, id"
    );
    /// Token `$1` unless revoked.
    const TOKEN_BY_ID: &'static str = concat!(
        "SELECT ",
        crate::credentials::token_cols!(),
        " FROM api_tokens WHERE id = $1 AND revoked_at IS NULL"
    );
    /// Revokes at `$1` token `$2` of app `$3`, unless revoked already.
    const TOKEN_REVOKE: &'static str = "UPDATE api_tokens SET revoked_at = $1 \
         WHERE id = $2 AND app = $3 AND revoked_at IS NULL";
    /// The signing secrets of app `$1` live at `$2`, the current one first.
    const SECRETS_ACTIVE: &'static str = "SELECT secret FROM signing_secrets WHERE app = $1 \
         AND (retires_at IS NULL OR retires_at > $2) \
         ORDER BY retires_at IS NOT NULL, created_at DESC";
    /// App `$1`'s first secret `$2` at `$3`; racing first uses keep whichever row the
    /// unique index of current secrets let in, and the others change nothing.
    const SECRET_FIRST: &'static str = "INSERT INTO signing_secrets (app, secret, created_at) \
         VALUES ($1, $2, $3) ON CONFLICT (app) WHERE retires_at IS NULL DO NOTHING";
    /// Inside a rotation of app `$1`, before anything else: what queues rotations of one app
    /// so each retires exactly the secret current before it, where the dialect needs it.
    const SECRET_ROTATION_LOCK: Option<&'static str> = None;
    /// Retires at `$1` app `$2`'s current secret.
    const SECRET_RETIRE: &'static str =
        "UPDATE signing_secrets SET retires_at = $1 WHERE app = $2 AND retires_at IS NULL";
    /// App `$1`'s new current secret `$2`, from `$3`.
    const SECRET_INSERT: &'static str =
        "INSERT INTO signing_secrets (app, secret, created_at) VALUES ($1, $2, $3)";
}

/// PostgreSQL's words.
pub(crate) struct Postgres;

impl Dialect for Postgres {
    const LIST_TIMERS: &'static str = list_timers_sql!(
        "NOT EXISTS (SELECT 1 FROM json_each_text(CAST($7 AS JSON)) s \
           WHERE (spec->'labels'->>s.key) IS DISTINCT FROM s.value)"
    );
    const SECRET_ROTATION_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtext('chime.signing-secret.' || $1))");
    const STREAKS_OF: &'static str = "SELECT timer_id, failed FROM failure_streaks \
         WHERE timer_id IN (SELECT CAST(value AS BIGINT) \
           FROM jsonb_array_elements_text(CAST($1 AS JSONB))) FOR UPDATE";
}

/// SQLite's words. Its writes go through one connection, so a rotation needs no lock.
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    const LIST_TIMERS: &'static str = list_timers_sql!(
        "NOT EXISTS (SELECT 1 FROM json_each($7) s \
           WHERE json_extract(spec, '$.labels.\"' || s.key || '\"') IS NOT s.value)"
    );
    const STREAKS_OF: &'static str = "SELECT timer_id, failed FROM failure_streaks \
         WHERE timer_id IN (SELECT value FROM json_each($1))";
}

#[cfg(test)]
mod tests {
    use super::{Dialect, Postgres, Sqlite};
    use crate::mysql::dialect::MySql;

    /// Every statement of dialect `D`, by name.
    fn statements<D: Dialect>() -> Vec<(&'static str, &'static str)> {
        let mut all = vec![
            ("LIST_TIMERS", D::LIST_TIMERS),
            ("LIVE_TIMER", D::LIVE_TIMER),
            ("UNWRITTEN_TIMERS", D::UNWRITTEN_TIMERS),
            ("TIMER_BY_ID", D::TIMER_BY_ID),
            ("PAUSE_TIMER", D::PAUSE_TIMER),
            ("CLAIM_IDEMPOTENCY_KEY", D::CLAIM_IDEMPOTENCY_KEY),
            ("IDEMPOTENCY_KEY", D::IDEMPOTENCY_KEY),
            ("LIST_RUNS", D::LIST_RUNS),
            ("LIST_DEAD", D::LIST_DEAD),
            ("REDRIVE", D::REDRIVE),
            ("FIND_OVERDUE", D::FIND_OVERDUE),
            ("DUE_IN_BUCKET", D::DUE_IN_BUCKET),
            ("BACKFILL_POLICY", D::BACKFILL_POLICY),
            ("OVERLAPPING", D::OVERLAPPING),
            ("BUFFERED", D::BUFFERED),
            ("SKIP_ONE", D::SKIP_ONE),
            ("CLAIM_ONE", D::CLAIM_ONE),
            ("CLAIMED_ONE", D::CLAIMED_ONE),
            ("NEWER_IN_FLIGHT", D::NEWER_IN_FLIGHT),
            ("CANCEL_EARLIER", D::CANCEL_EARLIER),
            ("ACTIVITY_UPSERT", D::ACTIVITY_UPSERT),
            ("ACTIVITY_ALL", D::ACTIVITY_ALL),
            ("ACTIVITY_OF_APP", D::ACTIVITY_OF_APP),
            ("ACTIVITY_PURGE", D::ACTIVITY_PURGE),
            ("CALENDAR_EXISTS", D::CALENDAR_EXISTS),
            ("CALENDAR_UPSERT", D::CALENDAR_UPSERT),
            ("CALENDARS_OF_APP", D::CALENDARS_OF_APP),
            ("TOKEN_CREATE", D::TOKEN_CREATE),
            ("TOKENS_OF_APP", D::TOKENS_OF_APP),
            ("TOKEN_BY_ID", D::TOKEN_BY_ID),
            ("TOKEN_REVOKE", D::TOKEN_REVOKE),
            ("SECRETS_ACTIVE", D::SECRETS_ACTIVE),
            ("SECRET_FIRST", D::SECRET_FIRST),
            ("SECRET_RETIRE", D::SECRET_RETIRE),
            ("SECRET_INSERT", D::SECRET_INSERT),
            ("NOTIFY_SETTINGS_EXISTS", D::NOTIFY_SETTINGS_EXISTS),
            ("NOTIFY_SETTINGS_UPSERT", D::NOTIFY_SETTINGS_UPSERT),
            ("NOTIFY_SETTINGS_GET", D::NOTIFY_SETTINGS_GET),
            ("STREAK_ADD", D::STREAK_ADD),
            ("STREAK_GET", D::STREAK_GET),
            ("STREAKS_OF", D::STREAKS_OF),
            ("STREAK_DELETE", D::STREAK_DELETE),
            ("SENT_UPSERT", D::SENT_UPSERT),
            ("SENT_PURGE", D::SENT_PURGE),
            ("SENT_RECENT", D::SENT_RECENT),
            ("CHAIN_STEP_INSERT", D::CHAIN_STEP_INSERT),
            ("CHAIN_TIMER_BY_NAME", D::CHAIN_TIMER_BY_NAME),
            ("CHAIN_RUN_INSERT", D::CHAIN_RUN_INSERT),
            ("CHAIN_STEP_STARTED", D::CHAIN_STEP_STARTED),
            ("CHAIN_STEP_SKIPPED", D::CHAIN_STEP_SKIPPED),
            ("CHAIN_STEPS_OF", D::CHAIN_STEPS_OF),
            ("CHAIN_STEPS_PURGE", D::CHAIN_STEPS_PURGE),
            ("SHARD_PLAN", D::SHARD_PLAN),
            ("SHARD_RECORD", D::SHARD_RECORD),
            ("SHARDS_BETWEEN", D::SHARDS_BETWEEN),
            ("SHARDS_PURGE", D::SHARDS_PURGE),
        ];
        all.extend(D::SECRET_ROTATION_LOCK.map(|s| ("SECRET_ROTATION_LOCK", s)));
        all
    }

    /// The `$N` parameters of a statement in the order they first appear.
    fn numbered(statement: &str) -> Vec<u32> {
        let mut seen = Vec::new();
        let mut rest = statement;
        while let Some(at) = rest.find('$') {
            rest = &rest[at + 1..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse::<u32>()
                && !seen.contains(&n)
            {
                seen.push(n);
            }
        }
        seen
    }

    #[test]
    fn numbered_dialects_number_parameters_in_the_order_they_appear() {
        for (name, s) in statements::<Postgres>()
            .into_iter()
            .chain(statements::<Sqlite>())
        {
            let order = numbered(s);
            let expected: Vec<u32> = (1..=order.len() as u32).collect();
            assert_eq!(order, expected, "{name}: parameters out of order in {s}");
            assert!(!s.contains('?'), "{name}: a positional parameter in {s}");
        }
    }

    /// The shared bodies bind one value per `$N`, in order: MySQL's statement must have as
    /// many `?` as PostgreSQL's has numbers.
    #[test]
    fn mysql_takes_the_values_the_shared_bodies_bind() {
        let pg = statements::<Postgres>();
        let mysql = statements::<MySql>();
        let pg_names: Vec<_> = pg
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| *n != "SECRET_ROTATION_LOCK")
            .collect();
        let mysql_names: Vec<_> = mysql.iter().map(|(n, _)| *n).collect();
        assert_eq!(pg_names, mysql_names);
        for ((name, p), (_, m)) in pg.iter().zip(&mysql) {
            assert!(
                numbered(m).is_empty(),
                "{name}: MySQL's statement has $N: {m}"
            );
            assert_eq!(
                m.matches('?').count(),
                numbered(p).len(),
                "{name}: MySQL binds another number of values than PostgreSQL:\n{m}\n{p}"
            );
        }
    }
}
