//! The shared statements ([`crate::sql::Dialect`]) in MySQL's words.

use crate::sql::Dialect;

pub(crate) struct MySql;

impl Dialect for MySql {
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
           COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, ",
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
    // IGNORE: the only error this insert can meet is the key taken already.
    const CLAIM_IDEMPOTENCY_KEY: &'static str = "INSERT IGNORE INTO idempotency_keys \
           (app, `key`, fingerprint, timer_id, created_at) VALUES (?, ?, ?, ?, ?)";
    const IDEMPOTENCY_KEY: &'static str =
        "SELECT fingerprint, timer_id FROM idempotency_keys WHERE app = ? AND `key` = ?";
    const TIMER_BY_ID: &'static str =
        concat!("SELECT ", timer_cols!(), " FROM timers WHERE id = ?");
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
