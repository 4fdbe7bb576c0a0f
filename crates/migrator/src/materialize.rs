//! Materialization: turning timers into occurrence rows and hot-index members for a window
//! ahead of now. Idempotent: running it again inserts nothing and re-adds the same members.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    Bucket, Clock, NewOccurrence, PageSize, ShardKey, TaskKey, Timer, TimerId, Timestamp,
};
use chime_storage::{
    HotEntry, HotIndex, OccurrenceStore, PageRequest, StoreResult, TimerFilter, TimerStore,
};

/// What one materialization did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Materialized {
    pub timers: u64,
    /// Occurrences generated in the window.
    pub occurrences: u64,
    /// Of those, rows inserted or adopted by a newer version (0 on a repeat).
    pub written: u64,
    /// Members added to the hot index (future ones only).
    pub indexed: u64,
}

impl std::ops::AddAssign for Materialized {
    fn add_assign(&mut self, o: Self) {
        self.timers += o.timers;
        self.occurrences += o.occurrences;
        self.written += o.written;
        self.indexed += o.indexed;
    }
}

/// How far back an on-demand materialization reaches for fire times missed since the
/// timer's change; within the schedulers' previous-minute pass.
pub const CATCH_UP: Duration = Duration::from_secs(30);

pub struct Materializer {
    timers: Arc<dyn TimerStore>,
    occurrences: Arc<dyn OccurrenceStore>,
    index: Arc<dyn HotIndex>,
    clock: Arc<dyn Clock>,
    /// Timers read per page: memory stays bounded however many timers there are.
    page_size: u32,
    /// Occurrences written per statement / pipeline.
    batch: usize,
}

impl Materializer {
    pub fn new(
        timers: Arc<dyn TimerStore>,
        occurrences: Arc<dyn OccurrenceStore>,
        index: Arc<dyn HotIndex>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            timers,
            occurrences,
            index,
            clock,
            page_size: 500,
            batch: 10_000,
        }
    }

    /// Materializes every enabled timer of `bucket` up to `now + horizon`, and marks every
    /// shard of the bucket in that window present, so a scheduler can tell a shard with
    /// nothing due from one Redis lost. Rows start up to [`CATCH_UP`] back (never before the
    /// timer's last change): a step that ran late (its replica died mid-bucket) leaves no
    /// gap; those already due are left to the sweeper rather than indexed.
    pub async fn bucket(&self, bucket: Bucket, horizon: Duration) -> StoreResult<Materialized> {
        let filter = TimerFilter {
            app: None,
            enabled: Some(true),
            bucket: Some(bucket),
        };
        let mut page = PageRequest {
            size: PageSize::new(Some(self.page_size))?,
            token: None,
        };
        let mut total = Materialized::default();
        let mut pending = Vec::new();
        loop {
            let listed = self.timers.list_timers(&filter, &page).await?;
            let (now, to) = self.window(horizon);
            for timer in &listed.items {
                total.timers += 1;
                pending.extend(occurrences_of(timer, catch_up_from(timer, now), to));
                if pending.len() >= self.batch {
                    total += self.write(std::mem::take(&mut pending), now).await?;
                }
            }
            match listed.next_page_token {
                Some(t) => page.token = Some(t.as_str().to_owned()),
                None => break,
            }
        }
        let (from, to) = self.window(horizon);
        total += self.write(pending, from).await?;
        let mut shards = Vec::new();
        let mut shard = ShardKey::new(from, bucket);
        while shard.minute_start() < to {
            shards.push(shard);
            shard = ShardKey::new(shard.minute_end(), bucket);
        }
        self.index.touch(&shards).await?;
        Ok(total)
    }

    /// Materializes one timer (the gateway's `MigrateTimer`, right after a create, update
    /// or enable) from the moment of that change, at most [`CATCH_UP`] ago, to
    /// `now + horizon`: a fire time that fell between the change and this call is not lost,
    /// and is indexed in a shard the schedulers still work. A disabled or deleted timer
    /// materializes nothing.
    ///
    /// `triggered`: the due time of an occurrence a trigger inserted outside the schedule,
    /// to index as well.
    pub async fn timer(
        &self,
        id: TimerId,
        horizon: Duration,
        triggered: Option<Timestamp>,
    ) -> StoreResult<Materialized> {
        let timer = self.timers.get_timer(id).await?;
        let mut done = self.these(std::slice::from_ref(&timer), horizon).await?;
        if let Some(at) = triggered.filter(|_| timer.enabled) {
            self.index
                .add(&[HotEntry::new(TaskKey::new(id, at), at, timer.bucket)])
                .await?;
            done.indexed += 1;
        }
        Ok(done)
    }

    /// [`Materializer::timer`] for several timers (a batch create), in one read and one
    /// write. Unknown, deleted and disabled timers materialize nothing.
    pub async fn timers(&self, ids: &[TimerId], horizon: Duration) -> StoreResult<Materialized> {
        let timers = self.timers.get_timers(ids).await?;
        self.these(&timers, horizon).await
    }

    /// The enabled ones of `timers`, each from its last change (at most [`CATCH_UP`] ago).
    async fn these(&self, timers: &[Timer], horizon: Duration) -> StoreResult<Materialized> {
        let (now, to) = self.window(horizon);
        let mut rows = Vec::new();
        let mut from_all = now;
        let mut count = 0;
        for timer in timers.iter().filter(|t| t.enabled) {
            let from = catch_up_from(timer, now);
            from_all = from_all.min(from);
            rows.extend(occurrences_of(timer, from, to));
            count += 1;
        }
        // Each timer's rows start at its own `from`, so indexing from the earliest of them
        // indexes all, as for a single timer.
        let mut done = self.write(rows, from_all).await?;
        done.timers = count;
        Ok(done)
    }

    fn window(&self, horizon: Duration) -> (Timestamp, Timestamp) {
        let now = self.clock.now();
        (now, now.saturating_add(horizon))
    }

    /// Rows first, then the hot index: a member never points at a row that does not exist.
    /// Only members due at or after `index_from` are indexed: the periodic step indexes the
    /// future only, since what is already due was handed off by an earlier pass (re-adding
    /// it would hand it off again, to be refused by the claim).
    async fn write(
        &self,
        batch: Vec<NewOccurrence>,
        index_from: Timestamp,
    ) -> StoreResult<Materialized> {
        let mut done = Materialized::default();
        for chunk in batch.chunks(self.batch) {
            done.occurrences += chunk.len() as u64;
            done.written += self.occurrences.insert_occurrences(chunk).await?;
            let entries: Vec<HotEntry> = chunk
                .iter()
                .filter(|o| o.key.run_at >= index_from)
                .map(|o| HotEntry::new(o.key, o.key.run_at, o.bucket))
                .collect();
            done.indexed += entries.len() as u64;
            self.index.add(&entries).await?;
        }
        Ok(done)
    }
}

/// Where a timer's rows start: [`CATCH_UP`] back, but not before its last change.
fn catch_up_from(timer: &Timer, now: Timestamp) -> Timestamp {
    timer.updated_at.max(now.saturating_sub(CATCH_UP)).min(now)
}

fn occurrences_of(
    timer: &Timer,
    from: Timestamp,
    to: Timestamp,
) -> impl Iterator<Item = NewOccurrence> + '_ {
    timer
        .spec
        .schedule
        .occurrences_between(from, to)
        .map(move |run_at| NewOccurrence {
            key: TaskKey::new(timer.id, run_at),
            timer_version: timer.version,
            bucket: timer.bucket,
        })
}
