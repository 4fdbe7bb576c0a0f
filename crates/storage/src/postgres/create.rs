//! One group-commit statement on PostgreSQL (the queue is `crate::create_queue`).

use std::collections::HashSet;

use async_trait::async_trait;
use chime_domain::{Timer, Timestamp};
use sqlx::postgres::PgPool;

use crate::create_queue::InsertTimers;
use crate::rows::spec_json;
use crate::{StoreResult, Written};

/// The pool, inserting groups for the create queue.
pub(super) struct PgCreates(pub PgPool);

#[async_trait]
impl InsertTimers for PgCreates {
    async fn insert_timers(&self, group: &[(&Written, Timestamp)]) -> StoreResult<HashSet<i64>> {
        insert_timers(&self.0, group).await
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
    let mut ahead = Vec::with_capacity(n);
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
        ahead.push(t.written_ahead);
        // An unwritten timer's runs are only indexed; each row comes when its run ends.
        for o in written.occurrences.iter().filter(|_| t.written_ahead) {
            occ_ids.push(o.key.timer_id.get());
            occ_runs.push(o.key.run_at.as_millis());
            occ_buckets.push(o.bucket.get() as i32);
            occ_dues.push(o.due.map(Timestamp::as_millis));
        }
    }
    let inserted: Vec<i64> = sqlx::query_scalar(
        "WITH t AS ( \
           INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
             created_at, updated_at, materialized_until, written_ahead) \
           SELECT id, app, name, kind, spec::json, enabled, 1, bucket, at, at, wm, ahead \
           FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                       $6::boolean[], $7::integer[], $8::bigint[], $9::bigint[], \
                       $14::boolean[]) \
             AS t(id, app, name, kind, spec, enabled, bucket, at, wm, ahead) \
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
    .bind(ahead)
    .fetch_all(db)
    .await?;
    Ok(inserted.into_iter().collect())
}
