//! Unwritten runs on MySQL ([`chime_domain::UnwrittenRun`]): which have no row yet, and their
//! rows inserted once, when they end or are skipped.

use std::collections::HashSet;

use chime_domain::{Outcome, TaskKey};

use super::occurrences::existing;
use super::{MySqlStore, keys_json};
use crate::{Absent, StoreResult, rows, sql};

/// `JSON_TABLE` over [`sql::ended_rows_json`], as `u`.
macro_rules! ended_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (timer_id BIGINT PATH '$[0]', run_at BIGINT PATH '$[1]', \
           version BIGINT PATH '$[2]', bucket INT PATH '$[3]', status VARCHAR(16) PATH '$[4]', \
           attempt INT PATH '$[5]', fired_at BIGINT PATH '$[6]', http_status INT PATH '$[7]', \
           output LONGTEXT PATH '$[8]', error LONGTEXT PATH '$[9]', \
           next_attempt_at BIGINT PATH '$[10]')) u"
    };
}

impl MySqlStore {
    /// Those of `keys` without a row, each with its timer's version now.
    pub(super) async fn absent_runs(&self, keys: &[TaskKey]) -> StoreResult<Vec<Absent>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(concat!(
            "SELECT k.timer_id, k.run_at, \
               (SELECT t.version FROM timers t WHERE t.id = k.timer_id AND t.deleted_at IS NULL) \
             FROM ",
            keys_table!(),
            " WHERE NOT EXISTS (SELECT 1 FROM occurrences o \
               WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at)"
        ))
        .bind(keys_json(keys))
        .fetch_all(&self.pool)
        .await?;
        rows::absent(rows)
    }

    /// Inserts the rows of unwritten runs that ended; a skip there already gives way to a
    /// real attempt, anything else stays. Returns the keys written.
    pub(super) async fn insert_ended(&self, outcomes: &[&Outcome]) -> StoreResult<Vec<TaskKey>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<TaskKey> = outcomes.iter().map(|o| o.key).collect();
        let mut tx = self.pool.begin().await?;
        let present = existing(&mut tx, &keys).await?;
        let (taken, fresh): (Vec<&Outcome>, Vec<&Outcome>) = outcomes
            .iter()
            .copied()
            .partition(|o| present.contains(&o.key));
        // A key inserted meanwhile by another writer is left as it is (the no-op update).
        sqlx::query(concat!(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, status, attempt, \
               fired_at, lateness_ms, http_status, output, error, next_attempt_at) \
             SELECT u.timer_id, u.run_at, u.version, u.bucket, u.status, u.attempt, u.fired_at, \
               u.fired_at - u.run_at, u.http_status, u.output, u.error, u.next_attempt_at FROM ",
            ended_table!(),
            " ON DUPLICATE KEY UPDATE timer_id = occurrences.timer_id"
        ))
        .bind(sql::ended_rows_json(&fresh)?)
        .execute(&mut *tx)
        .await?;
        let mut written: Vec<TaskKey> = fresh.iter().map(|o| o.key).collect();
        // A skip gives way to a real attempt that raced it.
        let attempts: Vec<&Outcome> = taken.into_iter().filter(|o| o.attempt > 0).collect();
        if !attempts.is_empty() {
            let skips: HashSet<TaskKey> = sqlx::query(concat!(
                "SELECT o.timer_id, o.run_at FROM ",
                ended_table!(),
                occurrences_by_key!("u"),
                " WHERE o.status = 'skipped' AND o.attempt = 0 FOR UPDATE"
            ))
            .bind(sql::ended_rows_json(&attempts)?)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(rows::task_key)
            .collect::<StoreResult<_>>()?;
            let replace: Vec<&Outcome> = attempts
                .into_iter()
                .filter(|o| skips.contains(&o.key))
                .collect();
            if !replace.is_empty() {
                // The status last: MySQL assigns left to right.
                sqlx::query(concat!(
                    "UPDATE ",
                    ended_table!(),
                    occurrences_by_key!("u"),
                    " SET o.timer_version = u.version, o.attempt = u.attempt, \
                       o.fired_at = u.fired_at, o.lateness_ms = u.fired_at - o.run_at, \
                       o.http_status = u.http_status, o.output = u.output, o.error = u.error, \
                       o.next_attempt_at = u.next_attempt_at, o.status = u.status"
                ))
                .bind(sql::ended_rows_json(&replace)?)
                .execute(&mut *tx)
                .await?;
                written.extend(replace.iter().map(|o| o.key));
            }
        }
        tx.commit().await?;
        Ok(written)
    }
}
