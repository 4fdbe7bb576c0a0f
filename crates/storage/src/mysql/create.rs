//! One group-commit insert on MySQL (the queue is `crate::create_queue`): the timers of the
//! group, then the occurrences of those that went in, in one transaction.

use std::collections::HashSet;

use async_trait::async_trait;
use chime_domain::Timestamp;
use serde_json::json;
use sqlx::MySqlConnection;
use sqlx::mysql::MySqlPool;

use super::json_rows;
use super::occurrences::insert_fresh;
use crate::create_queue::InsertTimers;
use crate::rows::spec_json;
use crate::{StoreResult, Written};

/// The pool, inserting groups for the create queue.
pub(super) struct MySqlCreates(pub MySqlPool);

#[async_trait]
impl InsertTimers for MySqlCreates {
    async fn insert_timers(&self, group: &[(&Written, Timestamp)]) -> StoreResult<HashSet<i64>> {
        let mut tx = self.0.begin().await?;
        let inserted = insert_timers(&mut tx, group).await?;
        tx.commit().await?;
        Ok(inserted)
    }
}

/// New timers with their watermarks, then the occurrences of those inserted. A timer whose
/// (app, name) is taken, by a live timer or an earlier row of the group, is left out (the
/// no-op update); returns the ids inserted.
pub(super) async fn insert_timers(
    conn: &mut MySqlConnection,
    group: &[(&Written, Timestamp)],
) -> StoreResult<HashSet<i64>> {
    let mut timers = Vec::with_capacity(group.len());
    for (w, watermark) in group {
        let t = &w.timer;
        timers.push(json!([
            t.id.get(),
            t.spec.app.as_str(),
            t.spec.name.as_str(),
            t.spec.schedule.kind_name(),
            spec_json(&t.spec)?,
            i32::from(t.enabled),
            t.bucket.get(),
            t.created_at.as_millis(),
            watermark.as_millis(),
            i32::from(t.written_ahead)
        ]));
    }
    let ids = json_rows(group.iter().map(|(w, _)| json!(w.timer.id.get())));
    sqlx::query(
        "INSERT INTO timers (id, app, name, schedule_kind, spec, enabled, version, bucket, \
           created_at, updated_at, materialized_until, written_ahead) \
         SELECT id, app, name, kind, spec, enabled, 1, bucket, at, at, wm, ahead \
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', app VARCHAR(64) PATH '$[1]', \
           name VARCHAR(512) PATH '$[2]', kind VARCHAR(16) PATH '$[3]', \
           spec LONGTEXT PATH '$[4]', enabled BOOLEAN PATH '$[5]', bucket INT PATH '$[6]', \
           at BIGINT PATH '$[7]', wm BIGINT PATH '$[8]', ahead BOOLEAN PATH '$[9]')) n \
         ON DUPLICATE KEY UPDATE id = timers.id",
    )
    .bind(json_rows(timers))
    .execute(&mut *conn)
    .await?;
    let inserted: HashSet<i64> = sqlx::query_scalar(
        "SELECT t.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) k \
         STRAIGHT_JOIN timers t ON t.id = k.id",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let occurrences: Vec<_> = group
        .iter()
        // An unwritten timer's runs are only indexed; each row comes when its run ends.
        .filter(|(w, _)| w.timer.written_ahead && inserted.contains(&w.timer.id.get()))
        .flat_map(|(w, _)| w.occurrences.iter().copied())
        .collect();
    insert_fresh(&mut *conn, &occurrences, None).await?;
    Ok(inserted)
}
