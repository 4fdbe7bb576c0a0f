//! Chime's storage: small traits, each with the backends that implement it.
//!
//! | trait             | backends            |
//! |-------------------|---------------------|
//! | [`TimerStore`]      | postgres, sqlite    |
//! | [`OccurrenceStore`] | postgres, sqlite    |
//! | [`Retention`]       | postgres, sqlite    |
//! | [`Credentials`]     | postgres, sqlite    |
//! | [`Calendars`]       | postgres, sqlite    |
//! | [`Notifications`]   | postgres, sqlite    |
//! | [`HotIndex`]        | redis, memory       |
//! | [`Leases`]          | redis, memory       |
//!
//! Every batch operation is one round trip (arrays, `json_each`, pipelines). Every backend
//! passes the same contract suite in `contract` (feature `testkit`, with the fixtures).

/// Occurrence columns, identical in both SQL schemas.
macro_rules! occurrence_cols {
    () => {
        "timer_id, run_at, timer_version, bucket, status, attempt, next_attempt_at, lease_until, \
         fired_at, lateness_ms, http_status, output, error, backfill, parent"
    };
}

mod activity;
mod batch;
mod calendars;
mod chains;
#[cfg(feature = "testkit")]
pub mod contract;
mod create_queue;
mod credentials;
mod error;
mod filters;
mod hot_path;
mod hot_writes;
pub mod memory;
mod migrate;
pub mod mysql;
mod notifications;
mod open;
pub mod postgres;
pub mod redis;
mod rows;
mod shards;
mod sql;
pub mod sqlite;
mod stores;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod unwritten;
mod windowed;

use async_trait::async_trait;
use chime_domain::{
    AppName, Bucket, BucketCount, Claim, ClaimedOccurrence, EarlySkip, Horizon, NewOccurrence,
    NewTimer, Occurrence, Outcome, OverlapPolicy, Page, PageSize, PauseNote, StoppedTimer, TaskKey,
    Timer, TimerId, TimerSpec, Timestamp,
};

pub use activity::Activity;
pub(crate) use batch::{OutcomeColumns, dedup_new_occurrences, oldest_first, skipped_row};
pub use calendars::Calendars;
pub use chains::Chains;
pub use credentials::Credentials;
pub use error::{Cause, StoreError};
pub use filters::{DeadFilter, PageRequest, Redrive, RunFilter, TimerFilter};
pub use hot_path::{HotEntry, HotIndex, LeaseToken, Leases, Membership, RunLeases};
pub use hot_writes::HotWrites;
pub use migrate::{SchemaStatus, mysql_migrator, postgres_migrator, sqlite_migrator};
pub use notifications::Notifications;
pub use open::Database;
pub use shards::Shards;
pub use stores::{HotPath, HotStores, NoHotPath, StoreSettings, Stores};
pub use windowed::{WINDOW_MARGIN, Windowed};

pub type StoreResult<T> = Result<T, StoreError>;

/// An unwritten run without a row ([`OccurrenceStore::absent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Absent {
    pub key: TaskKey,
    /// Its timer's version now; `None` when the timer is deleted.
    pub timer_now: Option<i64>,
}

/// What [`OccurrenceStore::claim_exclusive`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusive {
    Claimed(ClaimedOccurrence),
    /// Marked skipped: the occurrence at `beside` is in flight or retrying.
    Skipped {
        beside: Timestamp,
    },
    /// Left pending (`buffer_one`): the occurrence at `beside` is in flight or retrying, and
    /// this one is the one that waits for it. Offer it again later.
    Waiting {
        beside: Timestamp,
    },
    /// Taken by another claimer, finished already, or gone.
    NotClaimable,
}

/// An idempotency key of a create request, scoped to the timer's app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    /// Identifies the request's content: same key and fingerprint is a repeat.
    pub fingerprint: String,
}

/// One timer to create, optionally idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTimer {
    pub timer: NewTimer,
    pub idempotency: Option<IdempotencyKey>,
}

/// A timer as one write left it, with the occurrences written in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub timer: Timer,
    /// Its first occurrences: empty when it is disabled, or when an idempotent create
    /// returned a timer created earlier.
    pub occurrences: Vec<NewOccurrence>,
}

/// An enabled timer whose watermark is behind: every fire time before `watermark` has an
/// occurrence row, none after it is known to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub timer: Timer,
    pub watermark: Timestamp,
}

/// A new watermark, applied only while the timer is still at `version` (a change since it
/// was read wrote its own) and only forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    pub id: TimerId,
    pub version: i64,
    pub until: Timestamp,
}

/// The occurrences a write of `timer` at `now` stores with it, and its watermark: the plan
/// from `now` on (nothing for a disabled timer).
pub(crate) fn first_occurrences(
    timer: &Timer,
    now: Timestamp,
    horizon: Horizon,
) -> (Vec<NewOccurrence>, Timestamp) {
    if !timer.enabled {
        return (Vec::new(), now);
    }
    let plan = timer
        .spec
        .schedule
        .plan(now, now, horizon.of_timer(timer.id));
    let rows = plan
        .runs
        .into_iter()
        .map(|run_at| NewOccurrence {
            key: TaskKey::new(timer.id, run_at),
            timer_version: timer.version,
            bucket: timer.bucket,
            due: timer.due_of(run_at),
        })
        .collect();
    (rows, plan.watermark)
}

/// The durable record of timers.
///
/// Every write that can make a timer fire (create, update, enable) stores the timer and its
/// first occurrences, those within `horizon`, in one transaction, and sets the timer's
/// watermark: the timer fires on those rows with no other service involved.
#[async_trait]
pub trait TimerStore: Send + Sync + 'static {
    /// Creates a timer at version 1. `NameTaken` if its app already has a live timer of
    /// that name.
    async fn create_timer(&self, new: NewTimer, horizon: Horizon) -> StoreResult<Written>;

    /// Creates timers all or none, in order. A request whose idempotency key was seen before
    /// returns the timer created then (same fingerprint, no occurrences) or fails with
    /// `IdempotencyKeyReused` (different fingerprint).
    async fn create_timers(
        &self,
        batch: Vec<CreateTimer>,
        horizon: Horizon,
    ) -> StoreResult<Vec<Written>>;

    /// A live (not deleted) timer.
    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer>;

    /// The live ones among `ids` (deleted and unknown ids are left out), in id order.
    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>>;

    /// How many live timers `app` has (the gateway's timer quota).
    async fn count_timers(&self, app: &AppName) -> StoreResult<u64>;

    /// Live timers in id order.
    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>>;

    /// Replaces the spec and bumps the version. With `expected_version`, fails with
    /// `VersionConflict` unless the stored version matches.
    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
        horizon: Horizon,
    ) -> StoreResult<Written>;

    /// Enables or disables; bumps the version only when the state changes. Occurrences are
    /// written only when this enables the timer.
    async fn set_timer_enabled(
        &self,
        id: TimerId,
        enabled: bool,
        horizon: Horizon,
    ) -> StoreResult<Written>;

    /// Disables with a note (replacing an earlier note); bumps the version only when the
    /// timer was enabled. Enabling clears the note.
    async fn pause_timer(&self, id: TimerId, note: &PauseNote) -> StoreResult<Timer>;

    /// Soft-deletes: the row stays for history, the name becomes free, the version is bumped.
    async fn delete_timer(&self, id: TimerId) -> StoreResult<()>;

    /// Deletes those of `ids` that asked for it (`on_complete: delete`), have no fire time
    /// left at `now` and no occurrence still to run or running. Returns the deleted ones.
    async fn remove_finished(&self, ids: &[TimerId], now: Timestamp) -> StoreResult<Vec<TimerId>>;

    /// Enabled live timers of `bucket` whose watermark is before `before`, by watermark then
    /// id, after the `after` cursor (the last `(watermark, id)` of the previous page).
    async fn timers_behind(
        &self,
        bucket: Bucket,
        before: Timestamp,
        after: Option<(Timestamp, TimerId)>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>>;

    /// Enabled live timers of `bucket` whose runs are unwritten
    /// ([`chime_domain::UnwrittenRun`]), with their watermarks, by id after `after`, at
    /// most `limit`: what the sweeper checks against the rows written, and what a rebuilt
    /// shard computes those runs from.
    async fn unwritten_timers(
        &self,
        bucket: Bucket,
        after: Option<TimerId>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>>;

    /// Moves watermarks forward. Returns how many moved.
    async fn advance_watermarks(&self, marks: &[Watermark]) -> StoreResult<u64>;

    /// After the bucket count shrank: moves up to `limit` live timers whose stored bucket is
    /// out of range for `count` to their bucket under `count`, with their claimable
    /// occurrences, in one transaction. Returns the buckets that received timers (empty when
    /// none is left out of range).
    async fn rebucket(&self, count: BucketCount, limit: u32) -> StoreResult<Vec<Bucket>>;
}

/// New buckets for `ids` under `count`, as parallel columns, and the distinct buckets.
pub(crate) fn new_buckets(ids: &[i64], count: BucketCount) -> StoreResult<(Vec<i32>, Vec<Bucket>)> {
    let mut columns = Vec::with_capacity(ids.len());
    let mut touched = std::collections::BTreeSet::new();
    for id in ids {
        let b = Bucket::of(rows::timer_id(*id)?, count);
        columns.push(b.get() as i32);
        touched.insert(b);
    }
    Ok((columns, touched.into_iter().collect()))
}

/// The durable record of occurrences and their attempts.
#[async_trait]
pub trait OccurrenceStore: Send + Sync + 'static {
    /// Inserts the occurrences that do not exist yet. A `pending` row of an older timer
    /// version adopts the newer version (so an update that keeps a fire time still fires it).
    /// Returns how many rows were inserted or adopted.
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64>;

    /// Claims each claimable occurrence (pending, retrying, or running with an expired claim
    /// lease) for one attempt. Among racing claimers each occurrence is won by exactly one.
    /// Backfilled occurrences under `skip` or `buffer_one` are left to
    /// [`Self::claim_exclusive`].
    async fn claim(&self, keys: &[TaskKey], claim: Claim) -> StoreResult<Vec<ClaimedOccurrence>>;

    /// Those of `keys` whose rows wait for their first attempt (`pending`, and not a
    /// backfill left to [`Self::claim_exclusive`]), as [`Self::claim`] would return them but
    /// with `leased` set, and left as they are: an executor holding the runs' leases
    /// ([`RunLeases`]) fires them, and their outcomes move the rows on from `pending`
    /// ([`Outcome::leased`]). One row write per firing fewer than a claim.
    async fn first_attempts(&self, keys: &[TaskKey]) -> StoreResult<Vec<ClaimedOccurrence>>;

    /// Those of `keys` that [`Self::claim`] leaves to [`Self::claim_exclusive`]: backfilled
    /// occurrences under `skip`, `buffer_one` or `cancel_other`, claimable at `now`. One
    /// statement for all the keys a batch claim did not take; most of those were taken or
    /// finished already (a key handed off twice), and need no statement of their own.
    async fn held_for_exclusive(
        &self,
        keys: &[TaskKey],
        now: Timestamp,
    ) -> StoreResult<Vec<TaskKey>>;

    /// Claims `key` only while no other occurrence of its timer is in flight (a live claim)
    /// or waiting to retry. Otherwise `overlap: skip` marks it `skipped`; `buffer_one`
    /// leaves it pending to be offered again ([`Exclusive::Waiting`]) unless an earlier
    /// occurrence of the timer, due already, waits too, and then marks it `skipped`.
    /// `cancel_other` claims it and marks the earlier ones in flight or retrying `skipped`
    /// (their executors abort them, see [`Self::still_running`]); it is skipped itself
    /// when a later occurrence is in flight or retrying.
    /// Claimers of one timer take turns, on every executor replica. A backfilled occurrence
    /// is claimed under its backfill's policy instead of `overlap`.
    async fn claim_exclusive(
        &self,
        key: TaskKey,
        claim: Claim,
        overlap: OverlapPolicy,
    ) -> StoreResult<Exclusive>;

    /// Those of `claims` (occurrence and attempt) still running at that attempt: the rest
    /// ended, or were cancelled or taken over since.
    async fn still_running(&self, claims: &[(TaskKey, u32)]) -> StoreResult<Vec<TaskKey>>;

    /// Adds a backfill's occurrences, each marked with the overlap policy it is claimed
    /// under; fire times that have a row already are left alone. Returns the keys added.
    async fn backfill(
        &self,
        batch: &[NewOccurrence],
        overlap: OverlapPolicy,
    ) -> StoreResult<Vec<TaskKey>>;

    /// Records attempt results; an outcome whose attempt is no longer the running one is
    /// ignored. Returns how many were recorded. An unwritten run's outcome (`unwritten` set)
    /// inserts its row; a row there already stays, unless it is a skip (attempt 0), which
    /// the real attempt replaces.
    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64>;

    /// Those of `keys`, unwritten runs ([`chime_domain::UnwrittenRun`]), that have no row,
    /// each with its timer's version now.
    async fn absent(&self, keys: &[TaskKey]) -> StoreResult<Vec<Absent>>;

    async fn get_occurrence(&self, key: TaskKey) -> StoreResult<Option<Occurrence>>;

    /// A timer's occurrences, newest first.
    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>>;

    /// Occurrences that should have been handed out by `due_before` but were not (pending or
    /// retrying), plus running ones whose claim lease ended before `now`; oldest first.
    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>>;

    /// Marks claimable (pending or retrying) occurrences `skipped` with a reason, e.g. by the
    /// misfire policy. Returns how many changed.
    async fn skip_occurrences(&self, keys: &[TaskKey], reason: &str) -> StoreResult<u64>;

    /// Marks `skipped` those of `runs` still `pending` for their first attempt, without a
    /// claim, each with its reason: one write per run overtaken by its timer's next one
    /// (only at its natural due time and the timer's version) or of a stopped timer (any
    /// version up to the timer's), where claiming and then recording the skip were two.
    /// Rows another claimer holds are passed over. An overtaken unwritten run (`unwritten`
    /// set) gets its row written skipped, unless it has one; a stopped timer's is not
    /// written at all (and not returned). Returns the keys marked.
    async fn skip_before_claim(&self, runs: &[EarlySkip]) -> StoreResult<Vec<TaskKey>>;

    /// Removes the pending occurrences due after `after` of timers just stopped (disabled
    /// or deleted), each only up to its version: none of them may fire, and enabling one
    /// again writes them anew, at a later version that stays. Returns them as hot-index
    /// entries, for the index to drop them too. Retrying and running ones, and pending ones
    /// due already, are left to the executors and the sweeper, which skip them by the
    /// timer's version.
    async fn drop_pending(
        &self,
        timers: &[StoppedTimer],
        after: Timestamp,
    ) -> StoreResult<Vec<HotEntry>>;

    /// Dead occurrences, by timer id then run time.
    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>>;

    /// Re-queues dead occurrences with a fresh attempt budget: `pending`, attempt 0, due at
    /// `now`. Returns how many.
    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64>;

    /// Claimable occurrences of one bucket due in `[from, to)`, by due time: the fallback
    /// when a hot-index shard is missing.
    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>>;
}

/// What retention no longer keeps: everything older than these instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeBefore {
    /// Finished occurrences (succeeded, failed, skipped) due before this.
    pub history: Timestamp,
    /// Dead occurrences due before this.
    pub dead: Timestamp,
    /// Idempotency keys of creates before this.
    pub idempotency_keys: Timestamp,
    /// Timers deleted before this, with every occurrence they have left.
    pub deleted_timers: Timestamp,
}

/// Statuses of finished occurrences kept for `retention.history` (dead ones are kept longer).
pub(crate) const FINISHED_STATUSES: &[&str] = &["succeeded", "failed", "skipped"];

/// Rows one purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub occurrences: u64,
    pub idempotency_keys: u64,
    pub timers: u64,
}

impl std::ops::AddAssign for Purged {
    fn add_assign(&mut self, o: Self) {
        self.occurrences += o.occurrences;
        self.idempotency_keys += o.idempotency_keys;
        self.timers += o.timers;
    }
}

/// What one [`Retention::rotate`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotated {
    /// Time ranges (PostgreSQL: day partitions) made ready for rows.
    pub created: u64,
    /// Time ranges removed whole.
    pub dropped: u64,
    /// Occurrences removed with them (their unfinished rows and kept dead letters moved on).
    pub occurrences: u64,
}

/// Removing what retention no longer keeps, without holding writers up: whole time ranges
/// where the backend has them, otherwise a bounded batch of rows at a time.
#[async_trait]
pub trait Retention: Send + Sync + 'static {
    /// For a backend that stores occurrences by time range (PostgreSQL: one partition per
    /// UTC day of `run_at`): makes the ranges from `now` to `until` ready, and removes each
    /// range that ended before `before.history` at once, after moving out its pending,
    /// retrying and running rows and the dead ones `before.dead` still keeps. Backends
    /// without ranges do nothing here; [`Retention::purge`] removes their rows.
    async fn rotate(
        &self,
        now: Timestamp,
        until: Timestamp,
        before: &PurgeBefore,
    ) -> StoreResult<Rotated> {
        let _ = (now, until, before);
        Ok(Rotated::default())
    }

    /// Deletes at most `limit` rows of each kind (finished occurrences, dead ones,
    /// idempotency keys, deleted timers) that `before` no longer keeps. Pending, retrying and
    /// running occurrences of live timers are never touched. Where [`Retention::rotate`]
    /// removes whole ranges, this removes only the rows no range holds.
    async fn purge(&self, before: &PurgeBefore, limit: u32) -> StoreResult<Purged>;

    /// For a backend whose cached plans trust table statistics (PostgreSQL): analyzes each
    /// time range whose statistics have fallen far behind its size, so no cached plan treats
    /// a filling day as empty. Returns how many ranges it analyzed. Cheap enough to call
    /// every second; backends that plan each statement afresh do nothing.
    async fn refresh_statistics(&self) -> StoreResult<u64> {
        Ok(0)
    }
}

/// Page tokens with an optional secondary key; shared by the SQL backends.
fn decode_page_token(page: &PageRequest, scope: &str) -> StoreResult<Option<(i64, i64)>> {
    page.token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| chime_domain::PageToken::parse(t, scope).map(|t| t.after))
        .transpose()
        .map_err(StoreError::Invalid)
}

/// Trims the look-ahead row a listing fetched to learn whether another page follows.
fn into_page<T>(
    mut items: Vec<T>,
    size: PageSize,
    scope: &str,
    cursor: impl Fn(&T) -> (i64, i64),
) -> Page<T> {
    let size = size.get() as usize;
    let next_page_token = if items.len() > size {
        items.truncate(size);
        items
            .last()
            .map(|last| chime_domain::PageToken::new(cursor(last), scope))
    } else {
        None
    };
    Page {
        items,
        next_page_token,
    }
}
