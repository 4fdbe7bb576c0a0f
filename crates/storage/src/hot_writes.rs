//! Every write to the hot index, one method per kind, so who writes what is in one place.
//!
//! The index is a cache of the database's pending occurrences, keyed by due time: a write
//! that is lost costs lateness (the schedulers' database fallback or the sweeper fires the
//! row), never a run. Services hold a [`HotWrites`] and read through [`HotWrites::reads`].
//!
//! | kind | writer | what |
//! |---|---|---|
//! | `written` | gateway | a request's occurrences after its commit: creates, updates, triggers, backfills |
//! | `unscheduled` | gateway | a stopped timer's pending runs, dropped from the database |
//! | `built` | migrator | a shard's claimable occurrences read from the database, then every shard of the lead marked complete |
//! | `extended` | migrator | the occurrences a pass wrote ahead |
//! | `rebucketed` | migrator | timers moved to new buckets, their claimable occurrences indexed there |
//! | `handed_off` | scheduler | members taken out just before their hand-off to an executor |
//! | `refused` | scheduler | members an executor refused, put back (bend 1) |
//! | `deferred` | executor | keys its host's cap held back, due again shortly (bend 2) |
//! | `retrying` | executor | a failed attempt's next attempt (bend 3) |
//! | `chained` | executor | the runs chain steps started when a run ended |
//!
//! The bends are where the firing path writes back into the index it reads from. Each is
//! there because the alternative is worse: without `refused` a refused hand-off waits for the
//! sweeper; without `deferred` an executor would hold every capped key in memory; without
//! `retrying` each retry waits for the sweeper's next page. Each is best effort for the same
//! reason as the rest: the row is durable first.

use std::sync::Arc;

use chime_domain::{ShardKey, TaskKey};

use crate::{HotEntry, HotIndex, StoreResult};

/// The writes to a [`HotIndex`], named by why they happen. A failed write is logged with
/// its kind by the caller, which knows what recovers the row.
#[derive(Clone)]
pub struct HotWrites {
    index: Arc<dyn HotIndex>,
}

impl HotWrites {
    pub fn new(index: Arc<dyn HotIndex>) -> Self {
        Self { index }
    }

    /// The index, to read from. Writes go through the methods below.
    pub fn reads(&self) -> &dyn HotIndex {
        self.index.as_ref()
    }

    /// Gateway: what a request committed (creates, updates, triggers, backfills).
    pub async fn written(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("written", entries).await
    }

    /// Gateway: a stopped timer's runs, removed from the database first.
    pub async fn unscheduled(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        self.remove("unscheduled", shard, keys).await
    }

    /// Migrator: a shard's claimable members, read from the database to build it.
    pub async fn built(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("built", entries).await
    }

    /// Migrator: shards marked built (complete), members or not, so a scheduler can tell a
    /// shard with nothing due from one Redis lost.
    pub async fn complete(&self, shards: &[ShardKey]) -> StoreResult<()> {
        if shards.is_empty() {
            return Ok(());
        }
        self.index.touch(shards).await
    }

    /// Migrator: timers moved to new buckets (a bucket count change), indexed there.
    pub async fn rebucketed(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("rebucketed", entries).await
    }

    /// Migrator: occurrences a pass wrote ahead.
    pub async fn extended(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("extended", entries).await
    }

    /// Scheduler: members out of the index before their hand-off.
    pub async fn handed_off(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        self.remove("handed_off", shard, keys).await
    }

    /// Scheduler, bend 1: members a hand-off refused, back where they were.
    pub async fn refused(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("refused", entries).await
    }

    /// Executor, bend 2: keys its host's cap held back, with their new due time.
    pub async fn deferred(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("deferred", entries).await
    }

    /// Executor, bend 3: retries, due at their next attempt.
    pub async fn retrying(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("retrying", entries).await
    }

    /// Executor: the runs chain steps started, due at once.
    pub async fn chained(&self, entries: &[HotEntry]) -> StoreResult<()> {
        self.add("chained", entries).await
    }

    async fn add(&self, kind: &'static str, entries: &[HotEntry]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        tracing::trace!(kind, members = entries.len(), "hot index add");
        self.index.add(entries).await
    }

    async fn remove(
        &self,
        kind: &'static str,
        shard: ShardKey,
        keys: &[TaskKey],
    ) -> StoreResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        tracing::trace!(kind, %shard, members = keys.len(), "hot index remove");
        self.index.remove(shard, keys).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chime_domain::{Bucket, ManualClock, TimerId, Timestamp};

    use super::*;
    use crate::memory::MemoryHotIndex;

    fn entry(id: i64, due: i64) -> HotEntry {
        let key = TaskKey::new(TimerId::new(id).unwrap(), Timestamp::from_millis(60_000));
        HotEntry::new(key, Timestamp::from_millis(due), Bucket::from_stored(0))
    }

    #[tokio::test]
    async fn each_kind_reaches_the_index() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(60_000)));
        let index = MemoryHotIndex::new(clock, Duration::from_secs(60));
        let writes = HotWrites::new(Arc::new(index));
        let (a, b) = (entry(1, 60_100), entry(2, 60_200));
        let shard = a.shard;
        let due = |up_to: i64| writes.reads().due(shard, Timestamp::from_millis(up_to), 10);
        let keys = |members: Vec<(TaskKey, Timestamp)>| -> Vec<TaskKey> {
            members.into_iter().map(|(k, _)| k).collect()
        };

        writes.written(&[a]).await.unwrap();
        writes.extended(&[b]).await.unwrap();
        writes.built(&[]).await.unwrap();
        writes.rebucketed(&[]).await.unwrap();
        assert!(!writes.reads().shard_complete(shard).await.unwrap());
        writes.complete(&[shard]).await.unwrap();
        assert!(writes.reads().shard_complete(shard).await.unwrap());
        assert_eq!(keys(due(60_500).await.unwrap()), vec![a.key, b.key]);

        writes.handed_off(shard, &[a.key]).await.unwrap();
        assert_eq!(keys(due(60_500).await.unwrap()), vec![b.key]);
        writes.refused(&[a]).await.unwrap();
        writes.unscheduled(shard, &[b.key]).await.unwrap();
        assert_eq!(keys(due(60_500).await.unwrap()), vec![a.key]);

        // Deferred and retrying members come back due later.
        writes.handed_off(shard, &[a.key]).await.unwrap();
        writes.deferred(&[entry(1, 61_000)]).await.unwrap();
        writes.retrying(&[entry(3, 62_000)]).await.unwrap();
        assert!(due(60_500).await.unwrap().is_empty());
        let later = due(62_000).await.unwrap();
        assert_eq!(
            later,
            vec![
                (a.key, Timestamp::from_millis(61_000)),
                (entry(3, 0).key, Timestamp::from_millis(62_000))
            ]
        );
    }
}
