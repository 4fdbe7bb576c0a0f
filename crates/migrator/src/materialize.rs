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

    /// Materializes `[now, now + horizon)` for every enabled timer of `bucket`, and marks
    /// every shard of the bucket in that window present, so a scheduler can tell a shard
    /// with nothing due from one Redis lost.
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
            let (from, to) = self.window(horizon);
            for timer in &listed.items {
                total.timers += 1;
                pending.extend(occurrences_of(timer, from, to));
                if pending.len() >= self.batch {
                    total += self.write(std::mem::take(&mut pending)).await?;
                }
            }
            match listed.next_page_token {
                Some(t) => page.token = Some(t.as_str().to_owned()),
                None => break,
            }
        }
        total += self.write(pending).await?;
        let (from, to) = self.window(horizon);
        let mut shards = Vec::new();
        let mut shard = ShardKey::new(from, bucket);
        while shard.minute_start() < to {
            shards.push(shard);
            shard = ShardKey::new(shard.minute_end(), bucket);
        }
        self.index.touch(&shards).await?;
        Ok(total)
    }

    /// Materializes `[now, now + horizon)` for one timer (the gateway's `MigrateTimer`).
    /// A disabled or deleted timer materializes nothing.
    pub async fn timer(&self, id: TimerId, horizon: Duration) -> StoreResult<Materialized> {
        let timer = self.timers.get_timer(id).await?;
        if !timer.enabled {
            return Ok(Materialized::default());
        }
        let (from, to) = self.window(horizon);
        let mut done = self
            .write(occurrences_of(&timer, from, to).collect())
            .await?;
        done.timers = 1;
        Ok(done)
    }

    fn window(&self, horizon: Duration) -> (Timestamp, Timestamp) {
        let now = self.clock.now();
        (now, now.saturating_add(horizon))
    }

    /// Rows first, then the hot index: a member never points at a row that does not exist.
    async fn write(&self, batch: Vec<NewOccurrence>) -> StoreResult<Materialized> {
        let mut done = Materialized::default();
        let now = self.clock.now();
        for chunk in batch.chunks(self.batch) {
            done.occurrences += chunk.len() as u64;
            done.written += self.occurrences.insert_occurrences(chunk).await?;
            // Only future members: anything already due belongs to the scheduler's previous
            // pass or the sweeper, and re-adding a dispatched member would dispatch it again.
            let entries: Vec<HotEntry> = chunk
                .iter()
                .filter(|o| o.key.run_at > now)
                .map(|o| HotEntry::new(o.key, o.key.run_at, o.bucket))
                .collect();
            done.indexed += entries.len() as u64;
            self.index.add(&entries).await?;
        }
        Ok(done)
    }
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
