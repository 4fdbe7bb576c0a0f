//! [`OccurrenceStore`] on MySQL: batches through `JSON_TABLE`, claims by `SKIP LOCKED`.

use std::collections::HashSet;

use async_trait::async_trait;
use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, EarlySkip, NewOccurrence, Occurrence, Outcome, OverlapPolicy,
    Page, StoppedTimer, TaskKey, Timestamp,
};
use serde_json::json;
use sqlx::MySqlConnection;

use super::dialect::MySql;
use super::{MySqlStore, json_rows, keys_json};
use crate::rows;
use crate::{
    Absent, DeadFilter, Exclusive, HotEntry, OccurrenceStore, PageRequest, Redrive, RunFilter,
    StoreResult,
};

/// `JSON_TABLE` over `[[timer_id, run_at, version, bucket, due], …]`, as `n`.
macro_rules! new_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (timer_id BIGINT PATH '$[0]', run_at BIGINT PATH '$[1]', \
           version BIGINT PATH '$[2]', bucket INT PATH '$[3]', due BIGINT PATH '$[4]')) n"
    };
}

fn new_rows_json(batch: &[NewOccurrence]) -> String {
    json_rows(batch.iter().map(|o| {
        json!([
            o.key.timer_id.get(),
            o.key.run_at.as_millis(),
            o.timer_version,
            o.bucket.get(),
            o.due.map(Timestamp::as_millis)
        ])
    }))
}

/// The keys of `batch` that have a row.
pub(super) async fn existing(
    conn: &mut MySqlConnection,
    keys: &[TaskKey],
) -> StoreResult<HashSet<TaskKey>> {
    let found = sqlx::query(concat!(
        "SELECT o.timer_id, o.run_at FROM ",
        keys_table!(),
        occurrences_by_key!("k")
    ))
    .bind(keys_json(keys))
    .fetch_all(&mut *conn)
    .await?;
    found.iter().map(rows::task_key).collect()
}

/// Inserts the rows of `batch` whose key is free (marked as added by a backfill under
/// `backfill`, if given); a taken key is left as it is.
pub(super) async fn insert_fresh(
    conn: &mut MySqlConnection,
    batch: &[NewOccurrence],
    backfill: Option<&str>,
) -> StoreResult<()> {
    if batch.is_empty() {
        return Ok(());
    }
    sqlx::query(concat!(
        "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at, \
           backfill) SELECT n.timer_id, n.run_at, n.version, n.bucket, n.due, ? FROM ",
        new_table!(),
        " ON DUPLICATE KEY UPDATE timer_id = occurrences.timer_id"
    ))
    .bind(backfill)
    .bind(new_rows_json(batch))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Inserts the occurrences that do not exist yet; a pending row of an older timer version
/// adopts the newer one. Returns how many were inserted or adopted.
pub(super) async fn insert_new(
    conn: &mut MySqlConnection,
    batch: &[NewOccurrence],
) -> StoreResult<u64> {
    let batch = crate::dedup_new_occurrences(batch);
    if batch.is_empty() {
        return Ok(0);
    }
    let rows = new_rows_json(&batch);
    // The version last: MySQL assigns left to right, and the others test the old one.
    let adopted = sqlx::query(concat!(
        "UPDATE ",
        new_table!(),
        occurrences_by_key!("n"),
        " SET o.bucket = n.bucket, o.next_attempt_at = n.due, o.timer_version = n.version \
         WHERE o.status = 'pending' AND o.timer_version < n.version"
    ))
    .bind(&rows)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let keys: Vec<TaskKey> = batch.iter().map(|o| o.key).collect();
    let taken = existing(conn, &keys).await?.len() as u64;
    insert_fresh(conn, &batch, None).await?;
    Ok(adopted + batch.len() as u64 - taken)
}

#[async_trait]
impl OccurrenceStore for MySqlStore {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let n = insert_new(&mut tx, batch).await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn claim(&self, keys: &[TaskKey], claim: Claim) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        // Lock the claimable rows, skipping those another claimer holds (racing claimers
        // never wait on each other, and each row is won once), then take them.
        let locked = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
            crate::rows::timer_now_col!(),
            " FROM ",
            keys_table!(),
            occurrences_by_key!("k"),
            " WHERE (o.status IN ('pending', 'retrying') \
                    OR (o.status = 'running' AND o.lease_until < ?)) \
               AND (o.backfill IS NULL OR o.backfill = 'allow_all') \
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(keys_json(keys))
        .bind(claim.now.as_millis())
        .fetch_all(&mut *tx)
        .await?;
        let mut claimed = locked
            .iter()
            .map(rows::claimed)
            .collect::<StoreResult<Vec<_>>>()?;
        if claimed.is_empty() {
            return Ok(claimed);
        }
        let taken: Vec<TaskKey> = claimed.iter().map(|c| c.key).collect();
        sqlx::query(concat!(
            "UPDATE ",
            keys_table!(),
            occurrences_by_key!("k"),
            " SET o.status = 'running', o.attempt = o.attempt + 1, o.lease_until = ?"
        ))
        .bind(keys_json(&taken))
        .bind(claim.lease_until.as_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        for c in &mut claimed {
            c.attempt += 1;
        }
        Ok(claimed)
    }

    async fn first_attempts(&self, keys: &[TaskKey]) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt + 1 AS attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
            crate::rows::timer_now_col!(),
            " FROM ",
            keys_table!(),
            occurrences_by_key!("k"),
            " WHERE o.status = 'pending' AND (o.backfill IS NULL OR o.backfill = 'allow_all')"
        ))
        .bind(keys_json(keys))
        .fetch_all(&self.pool)
        .await?;
        found.iter().map(rows::leased).collect()
    }

    async fn held_for_exclusive(
        &self,
        keys: &[TaskKey],
        now: Timestamp,
    ) -> StoreResult<Vec<TaskKey>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at FROM ",
            keys_table!(),
            occurrences_by_key!("k"),
            " WHERE o.backfill IS NOT NULL AND o.backfill <> 'allow_all' \
               AND (o.status IN ('pending', 'retrying') \
                    OR (o.status = 'running' AND o.lease_until < ?))"
        ))
        .bind(keys_json(keys))
        .bind(now.as_millis())
        .fetch_all(&self.pool)
        .await?;
        found.iter().map(rows::task_key).collect()
    }

    async fn claim_exclusive(
        &self,
        key: TaskKey,
        claim: Claim,
        overlap: OverlapPolicy,
    ) -> StoreResult<Exclusive> {
        // Claimers of one timer take turns under a named lock of the session (a timer's row
        // may not exist to lock, and a transaction cannot hold such a lock), released on
        // the way out whatever happened; a session that could not release it is closed,
        // which releases it.
        let mut conn = self.pool.acquire().await?;
        let name = format!("chime.overlap.{}", key.timer_id.get());
        let locked: Option<i64> =
            sqlx::query_scalar("SELECT GET_LOCK(CONCAT(LEFT(DATABASE(), 40), '.', ?), 10)")
                .bind(&name)
                .fetch_one(&mut *conn)
                .await?;
        if locked != Some(1) {
            return Err(crate::StoreError::unavailable(
                "timed out waiting for another claimer of the timer",
            ));
        }
        let done = async {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let done = crate::sql::claim_exclusive!(tx, key, claim, overlap, MySql);
            tx.commit().await?;
            Ok::<_, crate::StoreError>(done)
        }
        .await;
        let released = sqlx::query("DO RELEASE_LOCK(CONCAT(LEFT(DATABASE(), 40), '.', ?))")
            .bind(&name)
            .execute(&mut *conn)
            .await;
        if released.is_err() {
            conn.close_on_drop();
        }
        done
    }

    async fn still_running(&self, claims: &[(TaskKey, u32)]) -> StoreResult<Vec<TaskKey>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let rows = json_rows(
            claims
                .iter()
                .map(|(k, a)| json!([k.timer_id.get(), k.run_at.as_millis(), a])),
        );
        let found = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
               timer_id BIGINT PATH '$[0]', run_at BIGINT PATH '$[1]', \
               attempt INT PATH '$[2]')) k",
            occurrences_by_key!("k"),
            " WHERE o.status = 'running' AND o.attempt = k.attempt"
        ))
        .bind(rows)
        .fetch_all(&self.pool)
        .await?;
        found.iter().map(rows::task_key).collect()
    }

    async fn backfill(
        &self,
        batch: &[NewOccurrence],
        overlap: OverlapPolicy,
    ) -> StoreResult<Vec<TaskKey>> {
        let batch = crate::dedup_new_occurrences(batch);
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<TaskKey> = batch.iter().map(|o| o.key).collect();
        let mut tx = self.pool.begin().await?;
        let taken = existing(&mut tx, &keys).await?;
        let fresh: Vec<NewOccurrence> = batch
            .into_iter()
            .filter(|o| !taken.contains(&o.key))
            .collect();
        insert_fresh(&mut tx, &fresh, Some(overlap.as_str())).await?;
        tx.commit().await?;
        Ok(fresh.iter().map(|o| o.key).collect())
    }

    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        let (unwritten, outcomes): (Vec<&Outcome>, Vec<&Outcome>) =
            outcomes.iter().partition(|o| o.unwritten.is_some());
        let inserted = self.insert_ended(&unwritten).await?.len() as u64;
        if outcomes.is_empty() {
            return Ok(inserted);
        }
        let outcomes: Vec<Outcome> = outcomes.into_iter().cloned().collect();
        let c = crate::OutcomeColumns::new(&outcomes)?;
        let rows = json_rows((0..outcomes.len()).map(|i| {
            json!([
                c.timer_ids[i],
                c.run_ats[i],
                c.attempts[i],
                c.statuses[i],
                c.fired_ats[i],
                c.http_statuses[i],
                c.outputs[i],
                c.errors[i],
                c.next_attempt_ats[i],
                c.from_statuses[i],
                c.from_attempts[i]
            ])
        }));
        let done = sqlx::query(concat!(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (timer_id BIGINT PATH '$[0]', \
               run_at BIGINT PATH '$[1]', attempt INT PATH '$[2]', \
               status VARCHAR(16) PATH '$[3]', fired_at BIGINT PATH '$[4]', \
               http_status INT PATH '$[5]', output LONGTEXT PATH '$[6]', \
               error LONGTEXT PATH '$[7]', next_attempt_at BIGINT PATH '$[8]', \
               from_status VARCHAR(16) PATH '$[9]', from_attempt INT PATH '$[10]')) u",
            occurrences_by_key!("u"),
            " SET o.status = u.status, o.attempt = u.attempt, o.fired_at = u.fired_at, \
               o.lateness_ms = u.fired_at - o.run_at, o.http_status = u.http_status, \
               o.output = u.output, o.error = u.error, o.next_attempt_at = u.next_attempt_at, \
               o.lease_until = NULL \
             WHERE o.status = u.from_status AND o.attempt = u.from_attempt"
        ))
        .bind(rows)
        .execute(&self.pool)
        .await?;
        Ok(inserted + done.rows_affected())
    }

    async fn absent(&self, keys: &[TaskKey]) -> StoreResult<Vec<Absent>> {
        self.absent_runs(keys).await
    }

    async fn get_occurrence(&self, key: TaskKey) -> StoreResult<Option<Occurrence>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE timer_id = ? AND run_at = ?"
        ))
        .bind(key.timer_id.get())
        .bind(key.run_at.as_millis())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(rows::occurrence).transpose()
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        crate::sql::list_runs!(&self.pool, filter, page, MySql)
    }

    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        crate::sql::find_overdue!(&self.pool, due_before, now, limit, MySql)
    }

    async fn skip_occurrences(&self, keys: &[TaskKey], reason: &str) -> StoreResult<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        let done = sqlx::query(concat!(
            "UPDATE ",
            keys_table!(),
            occurrences_by_key!("k"),
            " SET o.status = 'skipped', o.error = ?, o.lease_until = NULL \
             WHERE o.status IN ('pending', 'retrying')"
        ))
        .bind(keys_json(keys))
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn skip_before_claim(&self, runs: &[EarlySkip]) -> StoreResult<Vec<TaskKey>> {
        let written: Vec<Outcome> = runs.iter().filter_map(crate::skipped_row).collect();
        let mut marked = self
            .insert_ended(&written.iter().collect::<Vec<_>>())
            .await?;
        let runs: Vec<EarlySkip> = runs
            .iter()
            .filter(|r| r.unwritten.is_none())
            .cloned()
            .collect();
        if runs.is_empty() {
            return Ok(marked);
        }
        // No UPDATE … RETURNING: the rows are locked as the claim locks them (passing over
        // those a claimer holds), then marked.
        let mut tx = self.pool.begin().await?;
        let locked = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at FROM ",
            early_skips_table!(),
            occurrences_by_key!("k"),
            " WHERE o.status = 'pending' AND o.attempt = 0 \
               AND (k.due IS NULL AND o.timer_version <= k.version \
                    OR o.backfill IS NULL AND o.timer_version = k.version \
                       AND COALESCE(o.next_attempt_at, o.run_at) = k.due) \
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(crate::sql::early_skips_json(&runs))
        .fetch_all(&mut *tx)
        .await?;
        let keys: HashSet<TaskKey> = locked
            .iter()
            .map(rows::task_key)
            .collect::<StoreResult<_>>()?;
        if keys.is_empty() {
            return Ok(marked);
        }
        let skipping: Vec<EarlySkip> = runs
            .iter()
            .filter(|r| keys.contains(&r.key))
            .cloned()
            .collect();
        sqlx::query(concat!(
            "UPDATE ",
            early_skips_table!(),
            occurrences_by_key!("k"),
            " SET o.status = 'skipped', o.error = k.reason, o.lease_until = NULL"
        ))
        .bind(crate::sql::early_skips_json(&skipping))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        marked.extend(keys);
        Ok(marked)
    }

    async fn drop_pending(
        &self,
        timers: &[StoppedTimer],
        after: Timestamp,
    ) -> StoreResult<Vec<HotEntry>> {
        if timers.is_empty() {
            return Ok(Vec::new());
        }
        let json = crate::sql::stopped_timers_json(timers);
        // No DELETE … RETURNING in MySQL: the rows are read locked, then removed.
        let mut tx = self.pool.begin().await?;
        let rows: Vec<(i64, i64, i64, i32)> = sqlx::query_as(concat!(
            "SELECT o.timer_id, o.run_at, COALESCE(o.next_attempt_at, o.run_at), o.bucket \
             FROM ",
            stopped_table!(),
            " STRAIGHT_JOIN occurrences o FORCE INDEX (PRIMARY) ON o.timer_id = t.id \
             WHERE o.status = 'pending' AND o.run_at > ? AND o.timer_version <= t.version \
             FOR UPDATE"
        ))
        .bind(&json)
        .bind(after.as_millis())
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query(concat!(
            "DELETE o FROM ",
            stopped_table!(),
            " STRAIGHT_JOIN occurrences o FORCE INDEX (PRIMARY) ON o.timer_id = t.id \
             WHERE o.status = 'pending' AND o.run_at > ? AND o.timer_version <= t.version"
        ))
        .bind(&json)
        .bind(after.as_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        rows::hot_entries(&rows)
    }

    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        crate::sql::list_dead!(&self.pool, filter, page, MySql)
    }

    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        crate::sql::redrive!(&self.pool, what, now, MySql)
    }

    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        crate::sql::due_in_bucket!(&self.pool, bucket, from, to, limit, MySql)
    }
}
