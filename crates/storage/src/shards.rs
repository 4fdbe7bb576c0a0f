//! [`Shards`]: the shards of broadcast runs, planned at a run's first attempt and updated
//! after each. The SQL backends share one impl (`sql::shards_impl!`).

use async_trait::async_trait;
use chime_domain::{Shard, ShardStatus, TaskKey, TimerId, Timestamp};

use crate::{StoreError, StoreResult};

#[async_trait]
pub trait Shards: Send + Sync + 'static {
    /// Run `key`'s shards, by index: planned now as `total` pending shards if it has none
    /// (the plan made first stands, whoever makes it).
    async fn plan_shards(&self, key: TaskKey, total: u32) -> StoreResult<Vec<Shard>>;

    /// Run `key`'s shards, by index (none for a run never broadcast).
    async fn shards_of(&self, key: TaskKey) -> StoreResult<Vec<Shard>>;

    /// What came of the shards in `shards` (by index) of run `key`.
    async fn record_shards(&self, key: TaskKey, shards: &[Shard]) -> StoreResult<()>;

    /// The shards of timer `timer`'s runs at `from..=to`, with their run times: a page of
    /// its runs in one read.
    async fn shards_between(
        &self,
        timer: TimerId,
        from: Timestamp,
        to: Timestamp,
    ) -> StoreResult<Vec<(Timestamp, Shard)>>;
}

/// A `run_shards` row: run_at, idx, total, status, attempt, worker, error.
pub(crate) type ShardRow = (i64, i32, i32, String, i32, Option<String>, Option<String>);

pub(crate) fn shard(row: ShardRow) -> StoreResult<(Timestamp, Shard)> {
    let (run_at, idx, total, status, attempt, worker, error) = row;
    let count = |n: i32, what: &str| {
        u32::try_from(n).map_err(|_| StoreError::corrupt(format!("shard {what} {n}")))
    };
    Ok((
        Timestamp::from_millis(run_at),
        Shard {
            index: count(idx, "index")?,
            total: count(total, "total")?,
            status: ShardStatus::parse(&status)
                .ok_or_else(|| StoreError::corrupt(format!("shard status {status}")))?,
            attempt: count(attempt, "attempt")?,
            worker,
            error,
        },
    ))
}

pub(crate) fn signed(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
