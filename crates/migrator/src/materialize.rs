//! Rolling materialization: every enabled timer keeps its occurrences written a lead window
//! ahead. Timer writes store the first ones (the gateway, in the timer's own transaction);
//! the migrator extends each timer from its watermark once that comes within half the lead,
//! and rebuilds hot-index shards Redis lost. Idempotent: running it again writes nothing new.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    Bucket, BucketCount, Clock, Horizon, NewOccurrence, ShardKey, TaskKey, Timer, TimerId,
    Timestamp,
};
use chime_storage::{
    HotEntry, HotIndex, HotWrites, OccurrenceStore, StoreResult, TimerStore, Watermark,
};

/// What one materialization did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Materialized {
    pub timers: u64,
    /// Occurrences planned.
    pub occurrences: u64,
    /// Of those, rows inserted or adopted by a newer version (0 on a repeat).
    pub written: u64,
    /// Members added to the hot index.
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

/// What one pass over a bucket did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketPass {
    pub materialized: Materialized,
    /// Hot-index shards found missing and built from the database: minutes entering the
    /// lead window, and shards Redis lost.
    pub built_shards: u64,
    /// How far the oldest watermark was behind the refill point (`now + lead / 2`) when the
    /// pass began; zero when no timer was due for extension.
    pub lag: Duration,
}

/// How far back materialization reaches for fire times it missed (the migrator was down, or
/// a change was not followed by its rows): within the schedulers' previous-minute pass.
/// Older ones are not written: the misfire policy would skip most of them anyway.
pub const CATCH_UP: Duration = Duration::from_secs(30);

/// Most rows one rebuilt shard reads back from the database.
const REPAIR_LIMIT: u32 = 100_000;

pub struct Materializer {
    timers: Arc<dyn TimerStore>,
    occurrences: Arc<dyn OccurrenceStore>,
    index: HotWrites,
    clock: Arc<dyn Clock>,
    horizon: Horizon,
    /// Timers read per page: memory stays bounded however many timers are behind.
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
        horizon: Horizon,
    ) -> Self {
        Self {
            timers,
            occurrences,
            index: HotWrites::new(index),
            clock,
            horizon,
            page_size: 500,
            batch: 10_000,
        }
    }

    /// The clock its passes, and the migrator's pauses between them, run on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn horizon(&self) -> Horizon {
        self.horizon
    }

    /// One pass over `bucket`: extends every enabled timer whose watermark is before
    /// `now + lead / 2`, page by page in watermark order, then rebuilds the bucket's missing
    /// shards of the lead window from the database.
    #[tracing::instrument(name = "materialize", skip(self), fields(bucket = bucket.get()))]
    pub async fn bucket(&self, bucket: Bucket) -> StoreResult<BucketPass> {
        let now = self.clock.now();
        let before = self.horizon.refill_before(now);
        let mut pass = BucketPass::default();
        let mut after = None;
        loop {
            let page = self
                .timers
                .timers_behind(bucket, before, after, self.page_size)
                .await?;
            if after.is_none()
                && let Some(oldest) = page.first()
            {
                pass.lag = millis(before.as_millis() - oldest.watermark.as_millis());
            }
            let Some(last) = page.last() else { break };
            after = Some((last.watermark, last.timer.id));
            let full = page.len() == self.page_size as usize;
            let items: Vec<(&Timer, Timestamp)> =
                page.iter().map(|b| (&b.timer, b.watermark)).collect();
            pass.materialized += self.extend(&items, now).await?;
            if !full {
                break;
            }
        }
        pass.built_shards = self.build_missing_shards(bucket, now).await?;
        Ok(pass)
    }

    /// After `CHIME_BUCKETS` shrank: moves the timers whose bucket is out of range for
    /// `count` to their new bucket, with their claimable occurrences, and indexes those in
    /// the new buckets' shards of the window (no scheduler of the new count works the old
    /// ones; one of the old count still may, and a key handed off from both is claimed once).
    /// Returns how many buckets received timers.
    pub async fn rebucket(&self, count: BucketCount) -> StoreResult<usize> {
        let mut touched = std::collections::BTreeSet::new();
        loop {
            let moved = self.timers.rebucket(count, self.page_size).await?;
            if moved.is_empty() {
                break;
            }
            touched.extend(moved);
        }
        let now = self.clock.now();
        let (from, to) = (
            now.saturating_sub(CATCH_UP),
            now.saturating_add(self.horizon.lead),
        );
        for bucket in &touched {
            let due = self
                .occurrences
                .due_in_bucket(*bucket, from, to, REPAIR_LIMIT)
                .await?;
            let mut entries: Vec<HotEntry> = due
                .iter()
                .map(|(key, due)| HotEntry::new(*key, *due, *bucket))
                .collect();
            // Unwritten runs have no rows to move: computed from their timers, now in it.
            let unwritten =
                chime_storage::unwritten::timers_of(self.timers.as_ref(), *bucket).await?;
            entries.extend(chime_storage::unwritten::runs_between(
                &unwritten, from, to, true,
            ));
            self.index.rebucketed(&entries).await?;
        }
        Ok(touched.len())
    }

    /// Materializes one timer now (tests and tools) from its last change, at most
    /// [`CATCH_UP`] ago, re-indexing what exists and moving its watermark forward. A disabled
    /// or deleted timer materializes nothing.
    ///
    /// `triggered`: the due time of an occurrence a trigger inserted outside the schedule,
    /// to index as well.
    pub async fn timer(
        &self,
        id: TimerId,
        triggered: Option<Timestamp>,
    ) -> StoreResult<Materialized> {
        let timer = self.timers.get_timer(id).await?;
        let mut done = self.these(std::slice::from_ref(&timer)).await?;
        if let Some(at) = triggered.filter(|_| timer.enabled) {
            self.index
                .written(&[HotEntry::new(TaskKey::new(id, at), at, timer.bucket)])
                .await?;
            done.indexed += 1;
        }
        Ok(done)
    }

    async fn these(&self, timers: &[Timer]) -> StoreResult<Materialized> {
        let now = self.clock.now();
        let items: Vec<(&Timer, Timestamp)> = timers
            .iter()
            .filter(|t| t.enabled)
            .map(|t| (t, catch_up_from(t, now)))
            .collect();
        self.extend(&items, now).await
    }

    /// Plans each timer from its watermark (not before [`CATCH_UP`] ago, nor before its last
    /// change), writes the rows and indexes them, then moves the watermarks: a crash between
    /// the two leaves rows the next pass re-writes harmlessly, never a watermark past rows
    /// that do not exist.
    async fn extend(
        &self,
        items: &[(&Timer, Timestamp)],
        now: Timestamp,
    ) -> StoreResult<Materialized> {
        let mut done = Materialized::default();
        let mut rows = Vec::new();
        // Planned and indexed, not written: unwritten timers' runs get their rows when
        // they end ([`chime_domain::UnwrittenRun`]).
        let mut unwritten = Vec::new();
        let mut marks = Vec::new();
        for (timer, watermark) in items {
            done.timers += 1;
            let from = (*watermark).max(catch_up_from(timer, now));
            let plan = timer
                .spec
                .schedule
                .plan(from, now, self.horizon.of_timer(timer.id));
            let planned = plan.runs.iter().map(|run_at| NewOccurrence {
                key: TaskKey::new(timer.id, *run_at),
                timer_version: timer.version,
                bucket: timer.bucket,
                due: timer.due_of(*run_at),
            });
            if timer.written_ahead {
                rows.extend(planned);
            } else {
                unwritten.extend(planned);
            }
            if plan.watermark > *watermark {
                marks.push(Watermark {
                    id: timer.id,
                    version: timer.version,
                    until: plan.watermark,
                });
            }
        }
        for chunk in rows.chunks(self.batch) {
            done.occurrences += chunk.len() as u64;
            done.written += self.occurrences.insert_occurrences(chunk).await?;
            let entries: Vec<HotEntry> = chunk
                .iter()
                .map(|o| HotEntry::new(o.key, o.due_at(), o.bucket))
                .collect();
            done.indexed += entries.len() as u64;
            self.index.extended(&entries).await?;
        }
        for chunk in unwritten.chunks(self.batch) {
            done.occurrences += chunk.len() as u64;
            let entries: Vec<HotEntry> = chunk
                .iter()
                .map(|o| HotEntry::new(o.key, o.due_at(), o.bucket))
                .collect();
            done.indexed += entries.len() as u64;
            self.index.extended(&entries).await?;
        }
        self.timers.advance_watermarks(&marks).await?;
        Ok(done)
    }

    /// Rebuilds the shards of `bucket` in the lead window that the hot index does not have
    /// (Redis lost them, or was down when their rows were written) from the database's
    /// claimable rows, and marks every shard of the window present, so a scheduler can tell
    /// a shard with nothing due from one that was lost. Returns how many were built.
    async fn build_missing_shards(&self, bucket: Bucket, now: Timestamp) -> StoreResult<u64> {
        let until = now.saturating_add(self.horizon.lead);
        let mut shard = ShardKey::new(now, bucket);
        let mut shards = Vec::new();
        let mut built = 0;
        // Read once per pass that builds anything: the bucket's unwritten timers, whose
        // runs have no rows to build from.
        let mut unwritten = None;
        while shard.minute_start() < until {
            if !self.index.reads().shard_complete(shard).await? {
                let due = self
                    .occurrences
                    .due_in_bucket(
                        bucket,
                        shard.minute_start(),
                        shard.minute_end(),
                        REPAIR_LIMIT,
                    )
                    .await?;
                let mut entries: Vec<HotEntry> = due
                    .iter()
                    .map(|(key, due)| HotEntry::new(*key, *due, bucket))
                    .collect();
                if unwritten.is_none() {
                    unwritten = Some(
                        chime_storage::unwritten::timers_of(self.timers.as_ref(), bucket).await?,
                    );
                }
                // What the timers' extensions indexed, from now on: what is due already
                // is the schedulers' fallback's and the sweeper's to find.
                entries.extend(chime_storage::unwritten::runs_between(
                    unwritten.as_deref().unwrap_or_default(),
                    shard.minute_start().max(now),
                    shard.minute_end(),
                    true,
                ));
                self.index.built(&entries).await?;
                built += 1;
            }
            shards.push(shard);
            shard = ShardKey::new(shard.minute_end(), bucket);
        }
        self.index.complete(&shards).await?;
        Ok(built)
    }
}

/// Where a timer's catch-up starts: [`CATCH_UP`] back, but not before its last change.
fn catch_up_from(timer: &Timer, now: Timestamp) -> Timestamp {
    timer.updated_at.max(now.saturating_sub(CATCH_UP)).min(now)
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
