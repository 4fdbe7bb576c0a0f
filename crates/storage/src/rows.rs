//! Row decoding shared by the SQL backends. Columns are read by name into plain values and
//! then parsed into domain types, so a corrupt row surfaces as an error, never a panic.

use chime_domain::{
    Bucket, ClaimedOccurrence, Occurrence, OccurrenceStatus, TaskKey, Timer, TimerId, TimerSpec,
    Timestamp,
};
use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::{StoreError, StoreResult};

/// A SQL row type whose columns decode to the plain Rust types Chime stores.
pub(crate) trait ChimeRow: Row
where
    for<'r> &'r str: ColumnIndex<Self>,
{
    fn i64(&self, col: &str) -> StoreResult<i64>;
    fn opt_i64(&self, col: &str) -> StoreResult<Option<i64>>;
    fn i32(&self, col: &str) -> StoreResult<i32>;
    fn opt_i32(&self, col: &str) -> StoreResult<Option<i32>>;
    fn text(&self, col: &str) -> StoreResult<String>;
    fn opt_text(&self, col: &str) -> StoreResult<Option<String>>;
    fn boolean(&self, col: &str) -> StoreResult<bool>;
}

impl<R> ChimeRow for R
where
    R: Row,
    for<'r> &'r str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    fn i64(&self, col: &str) -> StoreResult<i64> {
        Ok(self.try_get(col)?)
    }
    fn opt_i64(&self, col: &str) -> StoreResult<Option<i64>> {
        Ok(self.try_get(col)?)
    }
    fn i32(&self, col: &str) -> StoreResult<i32> {
        Ok(self.try_get(col)?)
    }
    fn opt_i32(&self, col: &str) -> StoreResult<Option<i32>> {
        Ok(self.try_get(col)?)
    }
    fn text(&self, col: &str) -> StoreResult<String> {
        Ok(self.try_get(col)?)
    }
    fn opt_text(&self, col: &str) -> StoreResult<Option<String>> {
        Ok(self.try_get(col)?)
    }
    fn boolean(&self, col: &str) -> StoreResult<bool> {
        Ok(self.try_get(col)?)
    }
}

pub(crate) fn timer_id(raw: i64) -> StoreResult<TimerId> {
    TimerId::new(raw).map_err(StoreError::corrupt)
}

fn non_negative(raw: i32, what: &str) -> StoreResult<u32> {
    u32::try_from(raw).map_err(|_| StoreError::corrupt(format!("{what} {raw}")))
}

/// Timers from `rows`, into a vector sized up front: a `collect` into `Result` cannot know
/// the count, and a batch's timers (large structs) grown by doubling were copied again each
/// time into fresh memory (in a profile of a 60,000 burst, 6 % of an executor's CPU was the
/// kernel zeroing the pages of those regrowths).
pub(crate) fn timers<R: ChimeRow>(rows: &[R]) -> StoreResult<Vec<Timer>>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(timer(row)?);
    }
    Ok(out)
}

pub(crate) fn timer<R: ChimeRow>(row: &R) -> StoreResult<Timer>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    let spec: TimerSpec = serde_json::from_str(&row.text("spec")?)
        .map_err(|e| StoreError::corrupt(format!("timer spec: {e}")))?;
    let enabled = row.boolean("enabled")?;
    Ok(Timer {
        id: timer_id(row.i64("id")?)?,
        spec,
        enabled,
        version: row.i64("version")?,
        bucket: Bucket::from_stored(non_negative(row.i32("bucket")?, "bucket")?),
        created_at: Timestamp::from_millis(row.i64("created_at")?),
        updated_at: Timestamp::from_millis(row.i64("updated_at")?),
        deleted_at: row.opt_i64("deleted_at")?.map(Timestamp::from_millis),
        paused: match row.opt_i64("paused_at")? {
            Some(at) if !enabled => Some(chime_domain::PauseNote {
                reason: row.opt_text("paused_reason")?.unwrap_or_default(),
                at: Timestamp::from_millis(at),
                by: row.opt_text("paused_by")?,
            }),
            _ => None,
        },
        written_ahead: row.boolean("written_ahead")?,
    })
}

pub(crate) fn occurrence<R: ChimeRow>(row: &R) -> StoreResult<Occurrence>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    let status: OccurrenceStatus = row.text("status")?.parse().map_err(StoreError::corrupt)?;
    let ts = |col: &str| -> StoreResult<Option<Timestamp>> {
        Ok(row.opt_i64(col)?.map(Timestamp::from_millis))
    };
    Ok(Occurrence {
        key: TaskKey::new(
            timer_id(row.i64("timer_id")?)?,
            Timestamp::from_millis(row.i64("run_at")?),
        ),
        timer_version: row.i64("timer_version")?,
        bucket: Bucket::from_stored(non_negative(row.i32("bucket")?, "bucket")?),
        status,
        attempt: non_negative(row.i32("attempt")?, "attempt")?,
        next_attempt_at: ts("next_attempt_at")?,
        lease_until: ts("lease_until")?,
        fired_at: ts("fired_at")?,
        lateness_ms: row.opt_i64("lateness_ms")?,
        http_status: row
            .opt_i32("http_status")?
            .map(|s| u16::try_from(s).map_err(|_| StoreError::corrupt(format!("http status {s}"))))
            .transpose()?,
        output: row.opt_text("output")?,
        error: row.opt_text("error")?,
        backfill: row
            .opt_text("backfill")?
            .map(|p| p.parse().map_err(StoreError::corrupt))
            .transpose()?,
        parent: parent(row)?,
        shards: Vec::new(),
    })
}

/// The `parent` column: the run whose chain step started this one.
fn parent<R: ChimeRow>(row: &R) -> StoreResult<Option<TaskKey>>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    row.opt_text("parent")?
        .map(|p| p.parse().map_err(StoreError::corrupt))
        .transpose()
}

pub(crate) fn occurrences<R: ChimeRow>(rows: &[R]) -> StoreResult<Vec<Occurrence>>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    rows.iter().map(occurrence).collect()
}

/// A row of `timer_id, run_at, timer_version, bucket, attempt, due` returned by a claim.
pub(crate) fn claimed<R: ChimeRow>(row: &R) -> StoreResult<ClaimedOccurrence>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    Ok(ClaimedOccurrence {
        key: TaskKey::new(
            timer_id(row.i64("timer_id")?)?,
            Timestamp::from_millis(row.i64("run_at")?),
        ),
        timer_version: row.i64("timer_version")?,
        bucket: Bucket::from_stored(non_negative(row.i32("bucket")?, "bucket")?),
        attempt: non_negative(row.i32("attempt")?, "attempt")?,
        due: Timestamp::from_millis(row.i64("due")?),
        backfill: row.opt_text("backfill")?.is_some(),
        parent: parent(row)?,
        timer_now: row.opt_i64("timer_now")?,
        unwritten: None,
        leased: false,
    })
}

/// A row of [`claimed`]'s columns for a first attempt taken under its run lease.
pub(crate) fn leased<R: ChimeRow>(row: &R) -> StoreResult<ClaimedOccurrence>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    Ok(ClaimedOccurrence {
        leased: true,
        ..claimed(row)?
    })
}

/// `(timer_id, run_at, timer_now)` rows of unwritten runs without a row.
pub(crate) fn absent(found: Vec<(i64, i64, Option<i64>)>) -> StoreResult<Vec<crate::Absent>> {
    found
        .into_iter()
        .map(|(id, run_at, timer_now)| {
            Ok(crate::Absent {
                key: TaskKey::new(timer_id(id)?, Timestamp::from_millis(run_at)),
                timer_now,
            })
        })
        .collect()
}

/// The column [`claimed`] reads as the timer's current version, for a claim statement whose
/// occurrence row is `o`.
macro_rules! timer_now_col {
    () => {
        "(SELECT t.version FROM timers t WHERE t.id = o.timer_id AND t.deleted_at IS NULL) \
         AS timer_now"
    };
}
pub(crate) use timer_now_col;

/// A row of `timer_id, run_at`.
pub(crate) fn task_key<R: ChimeRow>(row: &R) -> StoreResult<TaskKey>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    Ok(TaskKey::new(
        timer_id(row.i64("timer_id")?)?,
        Timestamp::from_millis(row.i64("run_at")?),
    ))
}

/// A row of `timer_id, run_at, due`.
pub(crate) fn due_pair<R: ChimeRow>(row: &R) -> StoreResult<(TaskKey, Timestamp)>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    Ok((
        TaskKey::new(
            timer_id(row.i64("timer_id")?)?,
            Timestamp::from_millis(row.i64("run_at")?),
        ),
        Timestamp::from_millis(row.i64("due")?),
    ))
}

/// Maps a failed timer write: a unique violation means the (app, name) is taken.
pub(crate) fn name_taken_or(spec: &TimerSpec) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
    move |e| {
        if crate::error::is_unique_violation(&e) {
            name_taken(spec)
        } else {
            e.into()
        }
    }
}

/// A repeated idempotency key must come with the same request.
pub(crate) fn check_fingerprint(idem: &crate::IdempotencyKey, stored: &str) -> StoreResult<()> {
    if idem.fingerprint == stored {
        Ok(())
    } else {
        Err(StoreError::IdempotencyKeyReused {
            key: idem.key.clone(),
        })
    }
}

/// The row a create writes: version 1, bucket from the id, both timestamps `now`.
pub(crate) fn new_timer_row(
    id: TimerId,
    new: &chime_domain::NewTimer,
    buckets: chime_domain::BucketCount,
    now: Timestamp,
) -> Timer {
    Timer {
        id,
        spec: new.spec.clone(),
        enabled: new.enabled,
        version: 1,
        bucket: Bucket::of(id, buckets),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        paused: None,
        written_ahead: !(new.runs_unwritten && new.spec.may_leave_runs_unwritten(now)),
    }
}

/// Whether a timer changed to `spec` at `now` must have its runs written ahead from then
/// on, whatever it had: a change never makes a written-ahead timer unwritten, whose rows
/// ahead would then be left behind at the old version.
pub(crate) fn needs_rows_ahead(spec: &TimerSpec, now: Timestamp) -> bool {
    !spec.may_leave_runs_unwritten(now)
}

/// Serializes a spec for storage.
pub(crate) fn spec_json(spec: &TimerSpec) -> StoreResult<String> {
    serde_json::to_string(spec).map_err(|e| StoreError::internal(format!("encoding spec: {e}")))
}

/// The error for a duplicate (app, name).
pub(crate) fn name_taken(spec: &TimerSpec) -> StoreError {
    StoreError::NameTaken {
        app: spec.app.as_str().to_owned(),
        name: spec.name.as_str().to_owned(),
    }
}

/// A timer row with its `materialized_until`.
pub(crate) fn behind<R: ChimeRow>(row: &R) -> StoreResult<crate::Behind>
where
    for<'r> &'r str: ColumnIndex<R>,
{
    Ok(crate::Behind {
        timer: timer(row)?,
        watermark: Timestamp::from_millis(row.i64("materialized_until")?),
    })
}

/// `(timer_id, run_at, due, bucket)` rows as hot-index entries.
pub(crate) fn hot_entries(rows: &[(i64, i64, i64, i32)]) -> StoreResult<Vec<crate::HotEntry>> {
    rows.iter()
        .map(|(id, run_at, due, bucket)| {
            Ok(crate::HotEntry::new(
                TaskKey::new(timer_id(*id)?, Timestamp::from_millis(*run_at)),
                Timestamp::from_millis(*due),
                Bucket::from_stored(*bucket as u32),
            ))
        })
        .collect()
}
