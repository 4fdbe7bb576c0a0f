//! [`OccurrenceStore`] on PostgreSQL: batched inserts, claims, outcomes and the listings.

use async_trait::async_trait;
use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, EarlySkip, NewOccurrence, Occurrence, Outcome, OverlapPolicy,
    Page, StoppedTimer, TaskKey, Timestamp,
};

use super::PgStore;
use crate::rows;
use crate::sql;
use crate::{
    Absent, DeadFilter, Exclusive, HotEntry, OccurrenceStore, PageRequest, Redrive, RunFilter,
    StoreResult,
};

/// `OccurrenceStore::drop_pending` for the timers `$1` at versions `$2`, after `$3` on
/// PostgreSQL. `run_at` bounds the day partitions read. Rows are found by primary
/// key, one timer at a time, and deleted by tuple id, as the claim does; the status is
/// checked only then. Asked for `status = 'pending'` in the same scan, the planner also read
/// the partial index of claimable rows whole (every pending row of the day) to intersect
/// the two.
const DROP_PENDING: &str = "WITH doomed AS ( \
       SELECT x.toid, x.tid, t.version FROM UNNEST($1::bigint[], $2::bigint[]) AS t(id, version) \
       CROSS JOIN LATERAL ( \
         SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
         WHERE o.timer_id = t.id AND o.run_at > $3 OFFSET 0) x) \
     DELETE FROM occurrences o USING doomed d \
     WHERE o.run_at > $3 AND o.ctid = ANY(ARRAY(SELECT tid FROM doomed)) \
       AND o.tableoid = d.toid AND o.ctid = d.tid AND o.status = 'pending' \
       AND o.timer_version <= d.version \
     RETURNING o.timer_id, o.run_at, COALESCE(o.next_attempt_at, o.run_at), o.bucket";

#[async_trait]
impl OccurrenceStore for PgStore {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        insert_new(&self.pool, batch).await
    }

    async fn claim(&self, keys: &[TaskKey], claim: Claim) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = split_keys(keys);
        // Lock each claimable key's row, skipping rows another claimer holds (so racing
        // claimers never wait, hence never deadlock, and each row is won once), then update
        // the locked rows by their tuple ids. Both steps are index or TID lookups whatever
        // the plan cache decides: as joins, the custom plans of a statement's first
        // executions on a connection hashed every claimable row, and a fresh deployment's burst runs mostly on those. One corner: a row
        // another transaction updated after this statement's snapshot is locked at its new
        // version, which the TID scan cannot see, so it is not claimed this time; it stays
        // claimable for the sweeper. That needs a timer's version rewrite by the migrator,
        // or an outcome written just as a lapsed claim is taken over, in that instant.
        // Tuple ids repeat across day partitions: the update matches table and tuple id, and
        // its run_at conditions keep the tuple-id probes to the days in the batch. The range
        // ($5, $6) is what prunes the other days from a cached generic plan (`= ANY` of an
        // array parameter prunes nothing there): without it every claim also read each day
        // partition that was empty when the plan was made, whole once it had filled
        // (tomorrow's runs of millions of daily timers: seconds per claim).
        let (from, to) = span(&run_ats);
        let rows = sqlx::query(concat!(
            "WITH cand AS ( \
               SELECT c.toid, c.tid FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
               CROSS JOIN LATERAL ( \
                 SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
                 WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
                   AND (o.status IN ('pending', 'retrying') \
                        OR (o.status = 'running' AND o.lease_until < $3)) \
                   AND (o.backfill IS NULL OR o.backfill = 'allow_all') \
                 FOR UPDATE SKIP LOCKED) c) \
             UPDATE occurrences o SET status = 'running', attempt = o.attempt + 1, \
               lease_until = $4 \
             WHERE o.run_at BETWEEN $5 AND $6 AND o.run_at = ANY($2::bigint[]) \
               AND o.ctid = ANY(ARRAY(SELECT tid FROM cand)) \
               AND (o.tableoid, o.ctid) IN (SELECT toid, tid FROM cand) \
             RETURNING o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
            crate::rows::timer_now_col!()
        ))
        .bind(ids)
        .bind(&run_ats)
        .bind(claim.now.as_millis())
        .bind(claim.lease_until.as_millis())
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn first_attempts(&self, keys: &[TaskKey]) -> StoreResult<Vec<ClaimedOccurrence>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = split_keys(keys);
        // One primary-key probe per key, within the batch's days, as the claim's are.
        let (from, to) = span(&run_ats);
        let rows = sqlx::query(concat!(
            "SELECT o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt + 1 AS attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due, o.backfill, o.parent, ",
            crate::rows::timer_now_col!(),
            " FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             CROSS JOIN LATERAL ( \
               SELECT * FROM occurrences o \
               WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
                 AND o.run_at BETWEEN $3 AND $4 OFFSET 0) o \
             WHERE o.status = 'pending' AND (o.backfill IS NULL OR o.backfill = 'allow_all')"
        ))
        .bind(ids)
        .bind(run_ats)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::leased).collect()
    }

    async fn held_for_exclusive(
        &self,
        keys: &[TaskKey],
        now: Timestamp,
    ) -> StoreResult<Vec<TaskKey>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, run_ats) = split_keys(keys);
        // The run_at range prunes the other day partitions from a cached generic plan.
        let (from, to) = span(&run_ats);
        let rows = sqlx::query(
            "SELECT o.timer_id, o.run_at FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             JOIN occurrences o ON o.timer_id = k.timer_id AND o.run_at = k.run_at \
             WHERE o.run_at BETWEEN $4 AND $5 \
               AND o.backfill IS NOT NULL AND o.backfill <> 'allow_all' \
               AND (o.status IN ('pending', 'retrying') \
                    OR (o.status = 'running' AND o.lease_until < $3))",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(now.as_millis())
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::task_key).collect()
    }

    async fn claim_exclusive(
        &self,
        key: TaskKey,
        claim: Claim,
        overlap: OverlapPolicy,
    ) -> StoreResult<Exclusive> {
        let mut tx = self.pool.begin().await?;
        // Claimers of one timer take turns (a transaction-scoped lock, gone at commit). The
        // class keeps it apart from other advisory locks; timers sharing a key only wait.
        sqlx::query("SELECT pg_advisory_xact_lock($1, CAST($2 % 2147483647 AS INTEGER))")
            .bind(OVERLAP_LOCK_CLASS)
            .bind(key.timer_id.get())
            .execute(&mut *tx)
            .await?;
        let done = crate::sql::claim_exclusive!(tx, key, claim, overlap, sql::Postgres);
        tx.commit().await?;
        Ok(done)
    }

    async fn still_running(&self, claims: &[(TaskKey, u32)]) -> StoreResult<Vec<TaskKey>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<TaskKey> = claims.iter().map(|(k, _)| *k).collect();
        let (ids, run_ats) = split_keys(&keys);
        let attempts: Vec<i32> = claims
            .iter()
            .map(|(_, a)| i32::try_from(*a).unwrap_or(i32::MAX))
            .collect();
        let rows = sqlx::query(
            "SELECT o.timer_id, o.run_at FROM occurrences o \
             JOIN UNNEST($1::bigint[], $2::bigint[], $3::integer[]) AS k(timer_id, run_at, attempt) \
               ON o.timer_id = k.timer_id AND o.run_at = k.run_at \
             WHERE o.status = 'running' AND o.attempt = k.attempt",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(attempts)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::task_key).collect()
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
        let (ids, run_ats, versions, buckets, dues) = new_columns(&batch);
        let rows = sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at, \
               backfill) \
             SELECT n.*, $6 FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], \
               $4::integer[], $5::bigint[]) AS n \
             ON CONFLICT (timer_id, run_at) DO NOTHING RETURNING timer_id, run_at",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(versions)
        .bind(buckets)
        .bind(dues)
        .bind(overlap.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::task_key).collect()
    }

    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        let (unwritten, outcomes): (Vec<&Outcome>, Vec<&Outcome>) =
            outcomes.iter().partition(|o| o.unwritten.is_some());
        let inserted = self.insert_ended(&unwritten).await?.len() as u64;
        if outcomes.is_empty() {
            return Ok(inserted);
        }
        let outcomes: Vec<Outcome> = outcomes.into_iter().cloned().collect();
        let cols = crate::OutcomeColumns::new(&outcomes)?;
        let (from, to) = span(&cols.run_ats);
        // Each row found by its key (one primary-key probe each, as the claim does), then
        // updated by its tuple id within the batch's time range: a plan that joined the
        // batch with the table hashed every running or pending row once the partitions had
        // grown past what the plan assumed.
        let done = sqlx::query(
            "WITH u AS ( \
               SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::integer[], $4::text[], \
                 $5::bigint[], $6::integer[], $7::text[], $8::text[], $9::bigint[], \
                 $12::text[], $13::integer[]) \
               AS u(timer_id, run_at, attempt, status, fired_at, http_status, output, error, \
                    next_attempt_at, from_status, from_attempt)), \
             cand AS ( \
               SELECT x.toid, x.tid, u.* FROM u CROSS JOIN LATERAL ( \
                 SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
                 WHERE o.timer_id = u.timer_id AND o.run_at = u.run_at \
                   AND o.status = u.from_status AND o.attempt = u.from_attempt OFFSET 0) x) \
             UPDATE occurrences o SET status = c.status, attempt = c.attempt, \
               fired_at = c.fired_at, \
               lateness_ms = c.fired_at - o.run_at, http_status = c.http_status, \
               output = c.output, error = c.error, next_attempt_at = c.next_attempt_at, \
               lease_until = NULL \
             FROM cand c \
             WHERE o.run_at BETWEEN $10 AND $11 AND o.ctid = ANY(ARRAY(SELECT tid FROM cand)) \
               AND o.tableoid = c.toid AND o.ctid = c.tid \
               AND o.status = c.from_status AND o.attempt = c.from_attempt",
        )
        .bind(cols.timer_ids)
        .bind(cols.run_ats)
        .bind(cols.attempts)
        .bind(cols.statuses)
        .bind(cols.fired_ats)
        .bind(cols.http_statuses)
        .bind(cols.outputs)
        .bind(cols.errors)
        .bind(cols.next_attempt_ats)
        .bind(from)
        .bind(to)
        .bind(cols.from_statuses)
        .bind(cols.from_attempts)
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
            " FROM occurrences WHERE timer_id = $1 AND run_at = $2"
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
        sql::list_runs!(&self.pool, filter, page, sql::Postgres)
    }

    async fn skip_occurrences(&self, keys: &[TaskKey], reason: &str) -> StoreResult<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        let (ids, run_ats) = split_keys(keys);
        let done = sqlx::query(
            "UPDATE occurrences o SET status = 'skipped', error = $3, lease_until = NULL \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
             WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
               AND o.status IN ('pending', 'retrying')",
        )
        .bind(ids)
        .bind(run_ats)
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
        let runs: Vec<&EarlySkip> = runs.iter().filter(|r| r.unwritten.is_none()).collect();
        if runs.is_empty() {
            return Ok(marked);
        }
        let keys: Vec<TaskKey> = runs.iter().map(|r| r.key).collect();
        let (ids, run_ats) = split_keys(&keys);
        let (from, to) = span(&run_ats);
        // Found and locked as the claim does (rows a claimer holds are passed over), then
        // updated by tuple id; the conditions hold on the locked version of each row.
        let skipped = sqlx::query(
            "WITH r AS ( \
               SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], \
                 $5::text[]) AS r(timer_id, run_at, version, due, reason)), \
             cand AS ( \
               SELECT x.toid, x.tid, r.reason FROM r CROSS JOIN LATERAL ( \
                 SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
                 WHERE o.timer_id = r.timer_id AND o.run_at = r.run_at \
                   AND o.status = 'pending' AND o.attempt = 0 \
                   AND (r.due IS NULL AND o.timer_version <= r.version \
                        OR o.backfill IS NULL AND o.timer_version = r.version \
                           AND COALESCE(o.next_attempt_at, o.run_at) = r.due) \
                 FOR UPDATE SKIP LOCKED) x) \
             UPDATE occurrences o SET status = 'skipped', error = c.reason, lease_until = NULL \
             FROM cand c \
             WHERE o.run_at BETWEEN $6 AND $7 AND o.ctid = ANY(ARRAY(SELECT tid FROM cand)) \
               AND o.tableoid = c.toid AND o.ctid = c.tid \
               AND o.status = 'pending' AND o.attempt = 0 \
             RETURNING o.timer_id, o.run_at",
        )
        .bind(ids)
        .bind(&run_ats)
        .bind(runs.iter().map(|r| r.timer_version).collect::<Vec<i64>>())
        .bind(
            runs.iter()
                .map(|r| r.kind.due().map(Timestamp::as_millis))
                .collect::<Vec<Option<i64>>>(),
        )
        .bind(
            runs.iter()
                .map(|r| r.reason.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        for row in &skipped {
            marked.push(rows::task_key(row)?);
        }
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
        let rows: Vec<(i64, i64, i64, i32)> = sqlx::query_as(DROP_PENDING)
            .bind(timers.iter().map(|t| t.id.get()).collect::<Vec<i64>>())
            .bind(timers.iter().map(|t| t.version).collect::<Vec<i64>>())
            .bind(after.as_millis())
            .fetch_all(&self.pool)
            .await?;
        rows::hot_entries(&rows)
    }

    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        sql::list_dead!(&self.pool, filter, page, sql::Postgres)
    }

    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        sql::redrive!(&self.pool, what, now, sql::Postgres)
    }

    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        sql::find_overdue!(&self.pool, due_before, now, limit, sql::Postgres)
    }

    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        sql::due_in_bucket!(&self.pool, bucket, from, to, limit, sql::Postgres)
    }
}

pub(super) fn split_keys(keys: &[TaskKey]) -> (Vec<i64>, Vec<i64>) {
    keys.iter()
        .map(|k| (k.timer_id.get(), k.run_at.as_millis()))
        .unzip()
}

/// Inserts the occurrences that do not exist yet, and lets a pending row of an older timer
/// version adopt the newer one; in one statement, on `db` (the pool or a transaction).
pub(super) async fn insert_new<'e, E>(db: E, batch: &[NewOccurrence]) -> StoreResult<u64>
where
    E: sqlx::PgExecutor<'e>,
{
    let batch = crate::dedup_new_occurrences(batch);
    if batch.is_empty() {
        return Ok(0);
    }
    let (ids, run_ats, versions, buckets, dues) = new_columns(&batch);
    let (from, to) = span(&run_ats);
    // Older versions are found by key and updated by tuple id within the batch's range, as
    // the claim does: joined instead, a plan made while the day partitions were small hashed
    // every pending row (seconds per step with millions of daily timers).
    // Not `ON CONFLICT DO UPDATE … WHERE`: that locks every conflicting row, even those
    // it leaves alone, so a step re-writing its horizon held the rows executors were
    // claiming (claims skipped them, late to the sweeper) and deadlocked with outcome
    // writes. Only a pending row of an older version is updated, so only it is locked.
    let written: i64 = sqlx::query_scalar(
        "WITH new AS ( \
           SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::integer[], \
                                $5::bigint[]) \
             AS n(timer_id, run_at, timer_version, bucket, next_attempt_at)), \
         older AS ( \
           SELECT x.toid, x.tid, n.* FROM new n CROSS JOIN LATERAL ( \
             SELECT o.tableoid AS toid, o.ctid AS tid FROM occurrences o \
             WHERE o.timer_id = n.timer_id AND o.run_at = n.run_at \
               AND o.status = 'pending' AND o.timer_version < n.timer_version OFFSET 0) x), \
         adopted AS ( \
           UPDATE occurrences o SET timer_version = n.timer_version, bucket = n.bucket, \
             next_attempt_at = n.next_attempt_at \
           FROM older n WHERE o.run_at BETWEEN $6 AND $7 \
             AND o.ctid = ANY(ARRAY(SELECT tid FROM older)) \
             AND o.tableoid = n.toid AND o.ctid = n.tid \
             AND o.status = 'pending' AND o.timer_version < n.timer_version \
           RETURNING 1), \
         inserted AS ( \
           INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at) \
           SELECT * FROM new ON CONFLICT (timer_id, run_at) DO NOTHING \
           RETURNING 1) \
         SELECT (SELECT count(*) FROM adopted) + (SELECT count(*) FROM inserted)",
    )
    .bind(ids)
    .bind(run_ats)
    .bind(versions)
    .bind(buckets)
    .bind(dues)
    .bind(from)
    .bind(to)
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(written).unwrap_or(0))
}

/// The earliest and latest of `run_ats` (0, 0 when empty): the range that prunes a cached
/// plan to the day partitions a batch touches.
pub(super) fn span(run_ats: &[i64]) -> (i64, i64) {
    run_ats
        .iter()
        .fold(None, |span, &t| match span {
            None => Some((t, t)),
            Some((from, to)) => Some((i64::min(from, t), i64::max(to, t))),
        })
        .unwrap_or((0, 0))
}

/// New occurrences as the parallel columns the inserts `UNNEST`: timer ids, run times,
/// versions, buckets, due instants.
type NewColumns = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i32>, Vec<Option<i64>>);

fn new_columns(batch: &[NewOccurrence]) -> NewColumns {
    let mut cols: NewColumns = Default::default();
    for o in batch {
        cols.0.push(o.key.timer_id.get());
        cols.1.push(o.key.run_at.as_millis());
        cols.2.push(o.timer_version);
        cols.3.push(o.bucket.get() as i32);
        cols.4.push(o.due.map(Timestamp::as_millis));
    }
    cols
}

/// Advisory lock class of `claim_exclusive` ("CHME").
const OVERLAP_LOCK_CLASS: i32 = 0x4348_4d45;
