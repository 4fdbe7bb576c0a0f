//! Group commit for single creates: concurrent requests share one statement and one commit,
//! each timer with its first occurrences.

use std::collections::HashSet;
use std::sync::Arc;

use chime_domain::{Timer, Timestamp};
use sqlx::postgres::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::rows::{self, spec_json};
use crate::{StoreResult, Written};

/// A create waiting for a writer: the timer, its first occurrences and watermark, and the
/// channel its caller awaits the result on.
pub(super) struct PendingCreate {
    pub written: Written,
    pub watermark: Timestamp,
    pub reply: oneshot::Sender<StoreResult<Written>>,
}

pub(super) type CreateQueue = mpsc::Sender<PendingCreate>;

/// Most timers one group-commit statement inserts.
const CREATE_GROUP: usize = 128;
/// Writers inserting groups concurrently. One: while it waits on a commit the next group
/// collects in the queue. Each statement and commit costs PostgreSQL ~0.25 ms of CPU
/// whatever its size, and a second writer halved the groups, costing more CPU per create for
/// no gain in throughput (docs/performance.md).
const CREATE_WRITERS: usize = 1;

/// Starts the writers; they stop when every sender is gone.
pub(super) fn start(pool: PgPool) -> CreateQueue {
    let (tx, rx) = mpsc::channel(CREATE_GROUP * 8);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..CREATE_WRITERS {
        tokio::spawn(create_writer(pool.clone(), rx.clone()));
    }
    tx
}

/// Takes every create queued so far (up to [`CREATE_GROUP`]), inserts them in one statement,
/// and answers each caller after the commit. A row the statement skipped had its (app, name)
/// taken, by an existing timer or by an earlier row of the same group; its occurrences are
/// skipped with it.
async fn create_writer(pool: PgPool, queue: Arc<Mutex<mpsc::Receiver<PendingCreate>>>) {
    loop {
        let mut group = Vec::with_capacity(CREATE_GROUP);
        {
            let mut rx = queue.lock().await;
            if rx.recv_many(&mut group, CREATE_GROUP).await == 0 {
                return;
            }
            // Let requests that are ready to enqueue do so before the statement goes: a
            // yield, not a timer, so an idle gateway adds no latency.
            tokio::task::yield_now().await;
            while group.len() < CREATE_GROUP {
                match rx.try_recv() {
                    Ok(p) => group.push(p),
                    Err(_) => break,
                }
            }
        }
        let result = {
            let rows: Vec<(&Written, Timestamp)> =
                group.iter().map(|p| (&p.written, p.watermark)).collect();
            // Atomic, so safe to repeat: once more on a transient failure (a day partition
            // attached under the statement, a deadlock), which the next try does not meet.
            match insert_timers(&pool, &rows).await {
                Err(e) if e.is_retryable() => insert_timers(&pool, &rows).await,
                done => done,
            }
        };
        for pending in group {
            let timer = &pending.written.timer;
            let answer = match &result {
                Ok(inserted) if inserted.contains(&timer.id.get()) => Ok(pending.written),
                Ok(_) => Err(rows::name_taken(&timer.spec)),
                Err(e) => Err(e.clone()),
            };
            // The caller may have gone (request cancelled); the timer stays created.
            let _ = pending.reply.send(answer);
        }
    }
}

/// One statement: new timers with their watermarks, then the occurrences of those inserted
/// (a data-modifying CTE runs whether or not it is read, and the statement is atomic).
/// Returns the ids inserted; a timer left out had its (app, name) taken.
pub(super) async fn insert_timers<'e, E>(
    db: E,
    group: &[(&Written, Timestamp)],
) -> StoreResult<HashSet<i64>>
where
    E: sqlx::PgExecutor<'e>,
{
    let n = group.len();
    let mut ids = Vec::with_capacity(n);
    let mut apps = Vec::with_capacity(n);
    let mut names = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut specs = Vec::with_capacity(n);
    let mut enabled = Vec::with_capacity(n);
    let mut buckets = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    let mut watermarks = Vec::with_capacity(n);
    let (mut occ_ids, mut occ_runs, mut occ_buckets, mut occ_dues) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (written, watermark) in group {
        let t: &Timer = &written.timer;
        ids.push(t.id.get());
        apps.push(t.spec.app.as_str().to_owned());
        names.push(t.spec.name.as_str().to_owned());
        kinds.push(t.spec.schedule.kind_name());
        specs.push(spec_json(&t.spec)?);
        enabled.push(t.enabled);
        buckets.push(t.bucket.get() as i32);
        times.push(t.created_at.as_millis());
        watermarks.push(watermark.as_millis());
        for o in &written.occurrences {
            occ_ids.push(o.key.timer_id.get());
            occ_runs.push(o.key.run_at.as_millis());
            occ_buckets.push(o.bucket.get() as i32);
            occ_dues.push(o.due.map(Timestamp::as_millis));
        }
    }
    let inserted: Vec<i64> = sqlx::query_scalar(
        "WITH t AS ( \
           INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
             created_at, updated_at, materialized_until) \
           SELECT id, app, name, kind, spec::json, enabled, 1, bucket, at, at, wm \
           FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                       $6::boolean[], $7::integer[], $8::bigint[], $9::bigint[]) \
             AS t(id, app, name, kind, spec, enabled, bucket, at, wm) \
           ON CONFLICT DO NOTHING RETURNING id), \
         o AS ( \
           INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at) \
           SELECT n.timer_id, n.run_at, 1, n.bucket, n.due \
           FROM UNNEST($10::bigint[], $11::bigint[], $12::integer[], $13::bigint[]) \
             AS n(timer_id, run_at, bucket, due) \
           WHERE n.timer_id IN (SELECT id FROM t) \
           ON CONFLICT (timer_id, run_at) DO NOTHING) \
         SELECT id FROM t",
    )
    .bind(ids)
    .bind(apps)
    .bind(names)
    .bind(kinds)
    .bind(specs)
    .bind(enabled)
    .bind(buckets)
    .bind(times)
    .bind(watermarks)
    .bind(occ_ids)
    .bind(occ_runs)
    .bind(occ_buckets)
    .bind(occ_dues)
    .fetch_all(db)
    .await?;
    Ok(inserted.into_iter().collect())
}
