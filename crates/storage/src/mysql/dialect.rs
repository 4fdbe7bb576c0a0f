//! The shared statements ([`crate::sql::Dialect`]) in MySQL's words: positional `?`, each
//! bound once in the order it appears.

use crate::sql::Dialect;

pub(crate) struct MySql;

impl Dialect for MySql {
    // Each filter value is read once into the one-row table `p` (merged away by the
    // optimizer, so each condition on an absent value folds to true before planning).
    const LIST_TIMERS: &'static str = concat!(
        "SELECT ",
        timer_cols!(),
        " FROM (SELECT ? AS p_app, ? AS p_enabled, ? AS p_bucket, ? AS p_prefix, \
             ? AS p_state, ? AS p_now, ? AS p_labels) p, timers \
         WHERE deleted_at IS NULL AND (p_app IS NULL OR app = p_app) \
           AND (p_enabled IS NULL OR enabled = p_enabled) \
           AND (p_bucket IS NULL OR bucket = p_bucket) \
           AND (p_prefix IS NULL OR LEFT(name, CHAR_LENGTH(p_prefix)) = p_prefix) \
           AND (p_state IS NULL \
             OR (p_state = 'paused' AND NOT enabled) \
             OR (p_state = 'done' AND enabled AND ",
        finish_ms!(),
        " < p_now) \
             OR (p_state = 'enabled' AND enabled AND COALESCE(",
        finish_ms!(),
        " >= p_now, TRUE))) \
           AND (p_labels = '{}' OR JSON_CONTAINS(JSON_EXTRACT(spec, '$.labels'), p_labels)) \
           AND id > ? ORDER BY id LIMIT ?"
    );
    const LIVE_TIMER: &'static str = concat!(
        "SELECT ",
        timer_cols!(),
        " FROM timers WHERE id = ? AND deleted_at IS NULL"
    );
    const UNWRITTEN_TIMERS: &'static str = concat!(
        "SELECT ",
        timer_cols!(),
        ", materialized_until FROM timers WHERE bucket = ? AND NOT written_ahead AND enabled \
         AND deleted_at IS NULL AND id > ? ORDER BY id LIMIT ?"
    );
    const TIMER_BY_ID: &'static str =
        concat!("SELECT ", timer_cols!(), " FROM timers WHERE id = ?");
    // MySQL assigns left to right, so the version and time read `enabled` before it is
    // cleared.
    const PAUSE_TIMER: &'static str = "UPDATE timers SET version = version + IF(enabled, 1, 0), \
           updated_at = IF(enabled, ?, updated_at), enabled = FALSE, \
           paused_reason = ?, paused_at = ?, paused_by = ? \
         WHERE id = ? AND deleted_at IS NULL";
    // IGNORE: the only error this insert can meet is the key taken already.
    const CLAIM_IDEMPOTENCY_KEY: &'static str = "INSERT IGNORE INTO idempotency_keys \
           (app, `key`, fingerprint, timer_id, created_at) VALUES (?, ?, ?, ?, ?)";
    const IDEMPOTENCY_KEY: &'static str =
        "SELECT fingerprint, timer_id FROM idempotency_keys WHERE app = ? AND `key` = ?";

    // `COALESCE` for "any status": one parameter, bound once.
    const LIST_RUNS: &'static str = concat!(
        "SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE timer_id = ? AND status = COALESCE(?, status) \
          AND run_at < ? ORDER BY run_at DESC LIMIT ?"
    );
    // The optional timer and app read once into a one-row table `p`.
    const LIST_DEAD: &'static str = concat!(
        "SELECT ",
        occurrence_cols!(),
        " FROM (SELECT ? AS t, ? AS a) p, occurrences WHERE status = 'dead' \
           AND (p.t IS NULL OR timer_id = p.t) \
           AND (p.a IS NULL OR timer_id IN (SELECT id FROM timers WHERE app = p.a)) \
           AND (timer_id, run_at) > (?, ?) \
         ORDER BY timer_id, run_at LIMIT ?"
    );
    const REDRIVE: &'static str = "UPDATE occurrences SET status = 'pending', attempt = 0, \
           next_attempt_at = ?, lease_until = NULL, error = NULL \
         WHERE status = 'dead' AND timer_id = ? AND run_at = COALESCE(?, run_at)";
    // On the generated `claimable_due` column and its index.
    const FIND_OVERDUE: &'static str = concat!(
        "(SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE claimable_due < ? ORDER BY claimable_due LIMIT ?) \
         UNION ALL (SELECT ",
        occurrence_cols!(),
        " FROM occurrences WHERE status = 'running' AND lease_until < ? \
           ORDER BY lease_until LIMIT ?)"
    );
    const DUE_IN_BUCKET: &'static str = "SELECT timer_id, run_at, claimable_due AS due \
         FROM occurrences WHERE bucket = ? AND claimable_due >= ? AND claimable_due < ? \
         ORDER BY claimable_due LIMIT ?";

    const BACKFILL_POLICY: &'static str =
        "SELECT backfill FROM occurrences WHERE timer_id = ? AND run_at = ?";
    const OVERLAPPING: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = ? AND run_at <> ? \
           AND ((status = 'running' AND lease_until >= ?) OR status = 'retrying') LIMIT 1";
    const BUFFERED: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = ? AND run_at < ? AND COALESCE(next_attempt_at, run_at) <= ? \
           AND status = 'pending' ORDER BY run_at LIMIT 1";
    const SKIP_ONE: &'static str = "UPDATE occurrences SET status = 'skipped', error = ?, \
           next_attempt_at = NULL WHERE timer_id = ? AND run_at = ? \
           AND status IN ('pending', 'retrying')";
    const CLAIM_ONE: &'static str = "UPDATE occurrences SET status = 'running', \
           attempt = attempt + 1, lease_until = ? \
         WHERE timer_id = ? AND run_at = ? \
           AND (status IN ('pending', 'retrying') OR (status = 'running' AND lease_until < ?))";
    const CLAIMED_ONE: &'static str = concat!(
        "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
           COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
        crate::rows::timer_now_col!(),
        " FROM occurrences o WHERE o.timer_id = ? AND o.run_at = ?"
    );
    const NEWER_IN_FLIGHT: &'static str = "SELECT run_at FROM occurrences \
         WHERE timer_id = ? AND run_at > ? \
           AND ((status = 'running' AND lease_until >= ?) OR status = 'retrying') LIMIT 1";
    const CANCEL_EARLIER: &'static str = "UPDATE occurrences SET status = 'skipped', error = ?, \
           lease_until = NULL, next_attempt_at = NULL \
         WHERE timer_id = ? AND run_at < ? \
           AND ((status = 'running' AND lease_until >= ?) OR status = 'retrying')";

    const ACTIVITY_UPSERT: &'static str = "INSERT INTO activity \
         (app, minute, writer, fired, succeeded, failed, dead, lateness) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE fired = VALUES(fired), succeeded = VALUES(succeeded), \
         failed = VALUES(failed), dead = VALUES(dead), lateness = VALUES(lateness)";
    const ACTIVITY_ALL: &'static str = "SELECT app, minute, fired, succeeded, failed, dead, \
         lateness FROM activity WHERE minute >= ? ORDER BY minute, app";
    const ACTIVITY_OF_APP: &'static str = "SELECT app, minute, fired, succeeded, failed, dead, \
         lateness FROM activity WHERE minute >= ? AND app = ? ORDER BY minute, app";
    const ACTIVITY_PURGE: &'static str = "DELETE FROM activity WHERE minute < ?";

    const CALENDAR_EXISTS: &'static str =
        "SELECT 1 FROM calendars WHERE app = ? AND name = ? FOR UPDATE";
    const CALENDAR_UPSERT: &'static str = "INSERT INTO calendars (app, name, dates, updated_at) \
         VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE dates = VALUES(dates), updated_at = VALUES(updated_at)";
    const CALENDARS_OF_APP: &'static str =
        "SELECT app, name, dates, updated_at FROM calendars WHERE app = ? ORDER BY name";

    const NOTIFY_SETTINGS_EXISTS: &'static str =
        "SELECT 1 FROM notification_settings WHERE app = ? FOR UPDATE";
    const NOTIFY_SETTINGS_UPSERT: &'static str = "INSERT INTO notification_settings \
         (app, settings, updated_at) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE settings = VALUES(settings), updated_at = VALUES(updated_at)";
    const NOTIFY_SETTINGS_GET: &'static str =
        "SELECT settings FROM notification_settings WHERE app = ?";
    const STREAK_ADD: &'static str = "INSERT INTO failure_streaks (timer_id, failed) \
         VALUES (?, 1) ON DUPLICATE KEY UPDATE failed = failed + 1";
    const STREAK_GET: &'static str = "SELECT failed FROM failure_streaks WHERE timer_id = ?";
    const STREAKS_OF: &'static str = "SELECT timer_id, failed FROM failure_streaks \
         WHERE timer_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) j) \
         FOR UPDATE";
    const STREAK_DELETE: &'static str = "DELETE FROM failure_streaks WHERE timer_id = ?";
    const SENT_UPSERT: &'static str = "INSERT INTO notifications_sent (app, id, at, sent) \
         VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE at = VALUES(at), sent = VALUES(sent)";
    const SENT_PURGE: &'static str = "DELETE FROM notifications_sent WHERE app = ? AND at < ?";
    const SENT_RECENT: &'static str =
        "SELECT sent FROM notifications_sent WHERE app = ? ORDER BY at DESC, id LIMIT ?";

    const CHAIN_STEP_INSERT: &'static str = "INSERT IGNORE INTO chain_steps \
         (parent_timer_id, parent_run_at, step, on_outcome, app, status, at) \
         VALUES (?, ?, ?, ?, ?, 'skipped', ?)";
    const CHAIN_TIMER_BY_NAME: &'static str = "SELECT id, version, bucket, enabled FROM timers \
         WHERE app = ? AND live_name = ?";
    const CHAIN_RUN_INSERT: &'static str = "INSERT IGNORE INTO occurrences \
         (timer_id, run_at, timer_version, bucket, parent) VALUES (?, ?, ?, ?, ?)";
    const CHAIN_STEP_STARTED: &'static str = "UPDATE chain_steps SET status = 'started', \
         run_timer_id = ?, run_at = ? \
         WHERE parent_timer_id = ? AND parent_run_at = ? AND step = ?";
    const CHAIN_STEP_SKIPPED: &'static str = "UPDATE chain_steps SET reason = ? \
         WHERE parent_timer_id = ? AND parent_run_at = ? AND step = ?";
    const CHAIN_STEPS_OF: &'static str = "SELECT step, on_outcome, status, run_timer_id, \
         run_at, reason, at FROM chain_steps \
         WHERE parent_timer_id = ? AND parent_run_at = ? ORDER BY step";
    const CHAIN_STEPS_PURGE: &'static str = "DELETE FROM chain_steps WHERE at < ?";
    const SHARD_PLAN: &'static str = "INSERT IGNORE INTO run_shards \
         (timer_id, run_at, idx, total, status, attempt) VALUES (?, ?, ?, ?, 'pending', 0)";
    const SHARD_RECORD: &'static str = "UPDATE run_shards SET status = ?, attempt = ?, \
         worker = ?, error = ? WHERE timer_id = ? AND run_at = ? AND idx = ?";
    const SHARDS_BETWEEN: &'static str = "SELECT run_at, idx, total, status, attempt, worker, \
         error FROM run_shards WHERE timer_id = ? AND run_at BETWEEN ? AND ? \
         ORDER BY run_at, idx";
    const SHARDS_PURGE: &'static str = "DELETE FROM run_shards WHERE run_at < ?";

    const TOKEN_CREATE: &'static str = "INSERT INTO api_tokens \
         (id, app, name, scopes, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)";
    const TOKENS_OF_APP: &'static str = concat!(
        "SELECT ",
        crate::credentials::token_cols!(),
        " FROM api_tokens WHERE app = ? AND revoked_at IS NULL ORDER BY created_at, id"
    );
    const TOKEN_BY_ID: &'static str = concat!(
        "SELECT ",
        crate::credentials::token_cols!(),
        " FROM api_tokens WHERE id = ? AND revoked_at IS NULL"
    );
    const TOKEN_REVOKE: &'static str =
        "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND app = ? AND revoked_at IS NULL";
    const SECRETS_ACTIVE: &'static str = "SELECT secret FROM signing_secrets WHERE app = ? \
         AND (retires_at IS NULL OR retires_at > ?) \
         ORDER BY retires_at IS NOT NULL, created_at DESC";
    // The unique current_app key keeps one of racing first uses; the others change nothing.
    const SECRET_FIRST: &'static str = "INSERT INTO signing_secrets (app, secret, created_at) \
         VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE app = app";
    const SECRET_RETIRE: &'static str =
        "UPDATE signing_secrets SET retires_at = ? WHERE app = ? AND retires_at IS NULL";
    const SECRET_INSERT: &'static str =
        "INSERT INTO signing_secrets (app, secret, created_at) VALUES (?, ?, ?)";
}

/// [`crate::Schedule::finishes_at`] from the stored spec (see `sql::finish_ms`).
macro_rules! finish_ms {
    () => {
        "CAST(COALESCE(JSON_VALUE(spec, '$.schedule.finish_ms'), \
           CASE WHEN JSON_VALUE(spec, '$.schedule.cron') IS NULL \
                 AND JSON_VALUE(spec, '$.schedule.every_ms') IS NULL \
             THEN JSON_VALUE(spec, '$.schedule.at_ms') END, \
           JSON_VALUE(spec, '$.schedule.end_at_ms')) AS SIGNED)"
    };
}
pub(crate) use finish_ms;
