//! PostgreSQL backend for [`TimerStore`] and [`OccurrenceStore`]: the durable truth of a
//! distributed deployment.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{
    Bucket, BucketCount, Claim, ClaimedOccurrence, Clock, NewOccurrence, NewTimer, Occurrence,
    Outcome, Page, TaskKey, Timer, TimerId, TimerSpec, Timestamp,
};
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::migrate::{SchemaStatus, applied_versions_or_none, compare, postgres_migrator};
use crate::rows::{self, spec_json, timer_not_found};
use crate::{
    CreateTimer, DeadFilter, OccurrenceStore, PageRequest, Redrive, RunFilter, StoreError,
    StoreResult, TimerFilter, TimerStore, decode_page_token, into_page,
};

macro_rules! timer_cols {
    () => {
        "id, app, name, spec::text AS spec, enabled, version, bucket, created_at, updated_at, deleted_at"
    };
}

/// Connection settings for [`PgStore::connect`].
#[derive(Debug, Clone)]
pub struct PgSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PgSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Timer ids taken from the sequence per round trip. Ids reserved by a process that stops
/// are never used: ids have gaps, never repeats.
const ID_BLOCK: i64 = 64;

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    buckets: BucketCount,
    /// Ids reserved from `timers_id_seq` and not handed out yet: a create then needs one
    /// round trip instead of two.
    spare_ids: Arc<std::sync::Mutex<std::collections::VecDeque<i64>>>,
    /// Group commit for single creates, started on first use.
    creates: Arc<tokio::sync::OnceCell<CreateQueue>>,
}

/// A create waiting for a writer, with the channel its caller awaits the result on.
type PendingCreate = (Timer, tokio::sync::oneshot::Sender<StoreResult<Timer>>);
type CreateQueue = tokio::sync::mpsc::Sender<PendingCreate>;

/// Most timers one group-commit statement inserts.
const CREATE_GROUP: usize = 128;
/// Writers inserting groups concurrently: one collects while another waits on its commit.
const CREATE_WRITERS: usize = 2;

impl PgStore {
    /// Opens a pool. Connections are made lazily and re-made after a server restart, so a
    /// store outlives PostgreSQL restarts; calls fail with `Unavailable` meanwhile.
    pub async fn connect(
        url: &str,
        settings: &PgSettings,
        clock: Arc<dyn Clock>,
        buckets: BucketCount,
    ) -> StoreResult<Self> {
        let options: PgConnectOptions = url
            .parse::<PgConnectOptions>()
            .map_err(|e| StoreError::Internal(format!("invalid database URL: {e}")))?
            .log_statements(tracing::log::LevelFilter::Trace);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(Self::from_pool(pool, clock, buckets))
    }

    pub fn from_pool(pool: PgPool, clock: Arc<dyn Clock>, buckets: BucketCount) -> Self {
        Self {
            pool,
            clock,
            buckets,
            spare_ids: Arc::default(),
            creates: Arc::default(),
        }
    }

    /// The group-commit queue; its writers stop when every clone of the store is gone.
    async fn create_queue(&self) -> &CreateQueue {
        self.creates
            .get_or_init(|| async {
                let (tx, rx) = tokio::sync::mpsc::channel(CREATE_GROUP * 8);
                let rx = Arc::new(tokio::sync::Mutex::new(rx));
                for _ in 0..CREATE_WRITERS {
                    tokio::spawn(create_writer(self.pool.clone(), rx.clone()));
                }
                tx
            })
            .await
    }

    /// `n` fresh timer ids, from the reserve when it has them.
    async fn next_ids(&self, n: usize) -> StoreResult<Vec<TimerId>> {
        let take = |spare: &mut std::collections::VecDeque<i64>| -> Option<Vec<i64>> {
            (spare.len() >= n).then(|| spare.drain(..n).collect())
        };
        let poisoned = || StoreError::Internal("id reserve poisoned by an earlier panic".into());
        if let Some(ids) = take(&mut *self.spare_ids.lock().map_err(|_| poisoned())?) {
            return ids.into_iter().map(rows::timer_id).collect();
        }
        let fetched: Vec<i64> =
            sqlx::query_scalar("SELECT nextval('timers_id_seq') FROM generate_series(1, $1)")
                .bind(ID_BLOCK.max(n as i64))
                .fetch_all(&self.pool)
                .await?;
        let mut spare = self.spare_ids.lock().map_err(|_| poisoned())?;
        spare.extend(fetched);
        take(&mut spare)
            .unwrap_or_default()
            .into_iter()
            .map(rows::timer_id)
            .collect()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations under PostgreSQL's advisory lock; a no-op when current.
    pub async fn migrate(&self) -> StoreResult<()> {
        postgres_migrator().run(&self.pool).await?;
        Ok(())
    }

    pub async fn schema_status(&self) -> StoreResult<SchemaStatus> {
        let applied = sqlx::query_scalar::<_, i64>(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await;
        Ok(compare(
            &postgres_migrator(),
            &applied_versions_or_none(applied)?,
        ))
    }

    async fn insert_timer<'e, E>(&self, db: E, id: TimerId, new: &NewTimer) -> StoreResult<Timer>
    where
        E: sqlx::PgExecutor<'e>,
    {
        let timer = rows::new_timer_row(id, new, self.buckets, self.clock.now());
        // No RETURNING: the row is exactly what we send, and reading the JSON spec back
        // would cost PostgreSQL a render and us a re-parse on the hottest write path.
        sqlx::query(
            "INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $9)",
        )
        .bind(id.get())
        .bind(new.spec.app.as_str())
        .bind(new.spec.name.as_str())
        .bind(new.spec.schedule.kind_name())
        .bind(spec_json(&new.spec)?)
        .bind(new.enabled)
        .bind(timer.version)
        .bind(timer.bucket.get() as i32)
        .bind(timer.created_at.as_millis())
        .execute(db)
        .await
        .map_err(rows::name_taken_or(&new.spec))?;
        Ok(timer)
    }

    async fn current_version(&self, id: TimerId) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT version FROM timers WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id.get())
        .fetch_optional(&self.pool)
        .await?)
    }
}

#[async_trait]
impl TimerStore for PgStore {
    async fn create_timer(&self, new: NewTimer) -> StoreResult<Timer> {
        let id = self
            .next_ids(1)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Internal("no timer id reserved".into()))?;
        let timer = rows::new_timer_row(id, &new, self.buckets, self.clock.now());
        let (reply, answer) = tokio::sync::oneshot::channel();
        let gone = || StoreError::Unavailable("timer writer stopped".into());
        self.create_queue()
            .await
            .send((timer, reply))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    async fn create_timers(&self, batch: Vec<CreateTimer>) -> StoreResult<Vec<Timer>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let ids = self.next_ids(batch.len()).await?;
        let mut tx = self.pool.begin().await?;
        let mut created = Vec::with_capacity(batch.len());
        for (req, id) in batch.iter().zip(ids) {
            if let Some(idem) = &req.idempotency {
                // Waits for a concurrent holder of the same key, then sees its commit.
                let fresh = sqlx::query(
                    "INSERT INTO idempotency_keys (app, key, fingerprint, timer_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (app, key) DO NOTHING",
                )
                .bind(req.timer.spec.app.as_str())
                .bind(&idem.key)
                .bind(&idem.fingerprint)
                .bind(id.get())
                .bind(self.clock.now().as_millis())
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if !fresh {
                    let (fingerprint, original): (String, i64) = sqlx::query_as(
                        "SELECT fingerprint, timer_id FROM idempotency_keys \
                         WHERE app = $1 AND key = $2",
                    )
                    .bind(req.timer.spec.app.as_str())
                    .bind(&idem.key)
                    .fetch_one(&mut *tx)
                    .await?;
                    rows::check_fingerprint(idem, &fingerprint)?;
                    let row = sqlx::query(concat!(
                        "SELECT ",
                        timer_cols!(),
                        " FROM timers WHERE id = $1"
                    ))
                    .bind(original)
                    .fetch_one(&mut *tx)
                    .await?;
                    created.push(rows::timer(&row)?);
                    continue;
                }
            }
            created.push(self.insert_timer(&mut *tx, id, &req.timer).await?);
        }
        tx.commit().await?;
        Ok(created)
    }

    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = $1 AND deleted_at IS NULL"
        ))
        .bind(id.get())
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| timer_not_found(id))?;
        rows::timer(&row)
    }

    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        // One primary-key probe per id, whatever the plan cache decides: a LATERAL
        // subquery with OFFSET 0 is never flattened into a join. As a join, the custom plans
        // PostgreSQL makes for a statement's first executions on a connection may hash a
        // scan of the whole table (they did for small timers), and `id = ANY($1)`'s generic
        // plan walked the partial index timers_app_live, every entry of it per call.
        sqlx::query(concat!(
            "SELECT t.* FROM (SELECT DISTINCT UNNEST($1::bigint[]) AS id) k \
             CROSS JOIN LATERAL (SELECT ",
            timer_cols!(),
            " FROM timers WHERE id = k.id AND deleted_at IS NULL OFFSET 0) t ORDER BY t.id"
        ))
        .bind(ids)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::timer)
        .collect()
    }

    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>> {
        let scope = filter.scope();
        let after = decode_page_token(page, &scope)?.map_or(0, |(id, _)| id);
        let rows = sqlx::query(concat!(
            "SELECT ",
            timer_cols!(),
            " FROM timers WHERE deleted_at IS NULL \
              AND ($1::text IS NULL OR app = $1) \
              AND ($2::boolean IS NULL OR enabled = $2) \
              AND ($3::integer IS NULL OR bucket = $3) \
              AND id > $4 ORDER BY id LIMIT $5"
        ))
        .bind(filter.app.as_ref().map(|a| a.as_str()))
        .bind(filter.enabled)
        .bind(filter.bucket.map(|b| b.get() as i32))
        .bind(after)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows::timers(&rows)?;
        Ok(into_page(items, page.size, &scope, |t| (t.id.get(), 0)))
    }

    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
    ) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "UPDATE timers SET app = $2, name = $3, schedule_kind = $4, spec = $5::jsonb, \
             version = version + 1, updated_at = $6 \
             WHERE id = $1 AND deleted_at IS NULL AND ($7::bigint IS NULL OR version = $7) \
             RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(spec.app.as_str())
        .bind(spec.name.as_str())
        .bind(spec.schedule.kind_name())
        .bind(spec_json(&spec)?)
        .bind(self.clock.now().as_millis())
        .bind(expected_version)
        .fetch_optional(&self.pool)
        .await
        .map_err(rows::name_taken_or(&spec))?;
        match row {
            Some(row) => rows::timer(&row),
            None => match (self.current_version(id).await?, expected_version) {
                (Some(actual), Some(expected)) => {
                    Err(StoreError::VersionConflict { expected, actual })
                }
                _ => Err(timer_not_found(id)),
            },
        }
    }

    async fn set_timer_enabled(&self, id: TimerId, enabled: bool) -> StoreResult<Timer> {
        let row = sqlx::query(concat!(
            "UPDATE timers SET enabled = $2, version = version + 1, updated_at = $3 \
             WHERE id = $1 AND deleted_at IS NULL AND enabled <> $2 RETURNING ",
            timer_cols!()
        ))
        .bind(id.get())
        .bind(enabled)
        .bind(self.clock.now().as_millis())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => rows::timer(&row),
            // Already in that state (or gone): nothing changed, report what is stored.
            None => self.get_timer(id).await,
        }
    }

    async fn delete_timer(&self, id: TimerId) -> StoreResult<()> {
        let done = sqlx::query(
            "UPDATE timers SET deleted_at = $2, updated_at = $2, version = version + 1 \
             WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id.get())
        .bind(self.clock.now().as_millis())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(timer_not_found(id));
        }
        Ok(())
    }
}

#[async_trait]
impl OccurrenceStore for PgStore {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        let batch = crate::dedup_new_occurrences(batch);
        if batch.is_empty() {
            return Ok(0);
        }
        let (mut ids, mut run_ats, mut versions, mut buckets) = (
            Vec::with_capacity(batch.len()),
            Vec::with_capacity(batch.len()),
            Vec::with_capacity(batch.len()),
            Vec::with_capacity(batch.len()),
        );
        for o in &batch {
            ids.push(o.key.timer_id.get());
            run_ats.push(o.key.run_at.as_millis());
            versions.push(o.timer_version);
            buckets.push(o.bucket.get() as i32);
        }
        // Not `ON CONFLICT DO UPDATE … WHERE`: that locks every conflicting row, even those
        // it leaves alone, so a step re-writing its horizon held the rows executors were
        // claiming (claims skipped them, late to the sweeper) and deadlocked with outcome
        // writes. Only a pending row of an older version is updated, so only it is locked.
        let written: i64 = sqlx::query_scalar(
            "WITH new AS ( \
               SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::integer[]) \
                 AS n(timer_id, run_at, timer_version, bucket)), \
             adopted AS ( \
               UPDATE occurrences o SET timer_version = n.timer_version, bucket = n.bucket \
               FROM new n WHERE o.timer_id = n.timer_id AND o.run_at = n.run_at \
                 AND o.status = 'pending' AND o.timer_version < n.timer_version \
               RETURNING 1), \
             inserted AS ( \
               INSERT INTO occurrences (timer_id, run_at, timer_version, bucket) \
               SELECT * FROM new ON CONFLICT (timer_id, run_at) DO NOTHING \
               RETURNING 1) \
             SELECT (SELECT count(*) FROM adopted) + (SELECT count(*) FROM inserted)",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(versions)
        .bind(buckets)
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(written).unwrap_or(0))
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
        // executions on a connection hashed every claimable row (measured: twice the time
        // per claim), and a fresh deployment's burst runs mostly on those. One corner: a row
        // another transaction updated after this statement's snapshot is locked at its new
        // version, which the TID scan cannot see, so it is not claimed this time; it stays
        // claimable for the sweeper. That needs a timer's version rewrite by the migrator,
        // or an outcome written just as a lapsed claim is taken over, in that instant.
        let rows = sqlx::query(
            "WITH cand AS ( \
               SELECT c.tid FROM UNNEST($1::bigint[], $2::bigint[]) AS k(timer_id, run_at) \
               CROSS JOIN LATERAL ( \
                 SELECT o.ctid AS tid FROM occurrences o \
                 WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at \
                   AND (o.status IN ('pending', 'retrying') \
                        OR (o.status = 'running' AND o.lease_until < $3)) \
                 FOR UPDATE SKIP LOCKED) c) \
             UPDATE occurrences o SET status = 'running', attempt = o.attempt + 1, \
               lease_until = $4 \
             WHERE o.ctid = ANY(ARRAY(SELECT tid FROM cand)) \
             RETURNING o.timer_id, o.run_at, o.timer_version, o.bucket, o.attempt, \
               COALESCE(o.next_attempt_at, o.run_at) AS due",
        )
        .bind(ids)
        .bind(run_ats)
        .bind(claim.now.as_millis())
        .bind(claim.lease_until.as_millis())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        if outcomes.is_empty() {
            return Ok(0);
        }
        let cols = crate::OutcomeColumns::new(outcomes)?;
        let done = sqlx::query(
            "UPDATE occurrences o SET status = u.status, fired_at = u.fired_at, \
               lateness_ms = u.fired_at - o.run_at, http_status = u.http_status, \
               output = u.output, error = u.error, next_attempt_at = u.next_attempt_at, \
               lease_until = NULL \
             FROM UNNEST($1::bigint[], $2::bigint[], $3::integer[], $4::text[], $5::bigint[], \
                         $6::integer[], $7::text[], $8::text[], $9::bigint[]) \
               AS u(timer_id, run_at, attempt, status, fired_at, http_status, output, error, \
                    next_attempt_at) \
             WHERE o.timer_id = u.timer_id AND o.run_at = u.run_at \
               AND o.status = 'running' AND o.attempt = u.attempt",
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
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
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
        let scope = filter.scope();
        let before = filter.before(decode_page_token(page, &scope)?);
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE timer_id = $1 AND ($2::text IS NULL OR status = $2) \
              AND run_at < $3 ORDER BY run_at DESC LIMIT $4"
        ))
        .bind(filter.timer_id.get())
        .bind(filter.status.map(|s| s.as_str()))
        .bind(before)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(into_page(items, page.size, &scope, |o| {
            (o.key.run_at.as_millis(), 0)
        }))
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

    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        let scope = filter.scope();
        let (after_id, after_run) = decode_page_token(page, &scope)?.unwrap_or((0, i64::MIN));
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status = 'dead' \
               AND ($1::bigint IS NULL OR timer_id = $1) \
               AND ($2::text IS NULL OR timer_id IN \
                    (SELECT id FROM timers WHERE app = $2)) \
               AND (timer_id, run_at) > ($3, $4) \
             ORDER BY timer_id, run_at LIMIT $5"
        ))
        .bind(filter.timer_id.map(|t| t.get()))
        .bind(filter.app.as_ref().map(chime_domain::AppName::as_str))
        .bind(after_id)
        .bind(after_run)
        .bind(i64::from(page.size.get()) + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(into_page(items, page.size, &scope, |o| {
            (o.key.timer_id.get(), o.key.run_at.as_millis())
        }))
    }

    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        let (timer, run_at) = what.parts();
        let done = sqlx::query(
            "UPDATE occurrences SET status = 'pending', attempt = 0, next_attempt_at = $3, \
               lease_until = NULL, error = NULL \
             WHERE status = 'dead' AND timer_id = $1 AND ($2::bigint IS NULL OR run_at = $2)",
        )
        .bind(timer)
        .bind(run_at)
        .bind(now.as_millis())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        let rows = sqlx::query(concat!(
            "(SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status IN ('pending', 'retrying') \
               AND COALESCE(next_attempt_at, run_at) < $1 \
               ORDER BY COALESCE(next_attempt_at, run_at) LIMIT $3) \
             UNION ALL (SELECT ",
            occurrence_cols!(),
            " FROM occurrences WHERE status = 'running' AND lease_until < $2 \
               ORDER BY lease_until LIMIT $3)"
        ))
        .bind(due_before.as_millis())
        .bind(now.as_millis())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let items = rows::occurrences(&rows)?;
        Ok(crate::oldest_first(items, limit))
    }

    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        let rows = sqlx::query(
            "SELECT timer_id, run_at, COALESCE(next_attempt_at, run_at) AS due FROM occurrences \
             WHERE status IN ('pending', 'retrying') AND bucket = $1 \
               AND COALESCE(next_attempt_at, run_at) >= $2 \
               AND COALESCE(next_attempt_at, run_at) < $3 \
             ORDER BY due LIMIT $4",
        )
        .bind(bucket.get() as i32)
        .bind(from.as_millis())
        .bind(to.as_millis())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::due_pair).collect()
    }
}

/// Group commit: takes every create queued so far (up to [`CREATE_GROUP`]), inserts them in
/// one statement and one transaction, and answers each caller after the commit. A row the
/// statement skipped had its (app, name) taken, by an existing timer or by an earlier row of
/// the same group.
async fn create_writer(
    pool: PgPool,
    queue: Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<PendingCreate>>>,
) {
    loop {
        let mut group = Vec::with_capacity(CREATE_GROUP);
        {
            let mut rx = queue.lock().await;
            if rx.recv_many(&mut group, CREATE_GROUP).await == 0 {
                return;
            }
        }
        let result = insert_group(&pool, &group).await;
        for (timer, reply) in group {
            let answer = match &result {
                Ok(inserted) if inserted.contains(&timer.id.get()) => Ok(timer),
                Ok(_) => Err(rows::name_taken(&timer.spec)),
                Err(StoreError::Unavailable(m)) => Err(StoreError::Unavailable(m.clone())),
                Err(other) => Err(StoreError::Internal(other.to_string())),
            };
            // The caller may have gone (request cancelled); the timer stays created.
            let _ = reply.send(answer);
        }
    }
}

async fn insert_group(
    pool: &PgPool,
    group: &[PendingCreate],
) -> StoreResult<std::collections::HashSet<i64>> {
    let n = group.len();
    let mut ids = Vec::with_capacity(n);
    let mut apps = Vec::with_capacity(n);
    let mut names = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut specs = Vec::with_capacity(n);
    let mut enabled = Vec::with_capacity(n);
    let mut buckets = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    for (t, _) in group {
        ids.push(t.id.get());
        apps.push(t.spec.app.as_str().to_owned());
        names.push(t.spec.name.as_str().to_owned());
        kinds.push(t.spec.schedule.kind_name());
        specs.push(spec_json(&t.spec)?);
        enabled.push(t.enabled);
        buckets.push(t.bucket.get() as i32);
        times.push(t.created_at.as_millis());
    }
    let inserted: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
         created_at, updated_at) \
         SELECT id, app, name, kind, spec::jsonb, enabled, 1, bucket, at, at \
         FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                     $6::boolean[], $7::integer[], $8::bigint[]) \
           AS t(id, app, name, kind, spec, enabled, bucket, at) \
         ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(ids)
    .bind(apps)
    .bind(names)
    .bind(kinds)
    .bind(specs)
    .bind(enabled)
    .bind(buckets)
    .bind(times)
    .fetch_all(pool)
    .await?;
    Ok(inserted.into_iter().collect())
}

fn split_keys(keys: &[TaskKey]) -> (Vec<i64>, Vec<i64>) {
    keys.iter()
        .map(|k| (k.timer_id.get(), k.run_at.as_millis()))
        .unzip()
}
