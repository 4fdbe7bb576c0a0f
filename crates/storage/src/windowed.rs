//! Keeps the hot index to what is due soon. Writers (creates, the migrator's extensions,
//! retries) write occurrences up to a day or more ahead; indexing them all made Redis hold
//! every timer's next run (10 million daily timers: 1.2 GB). Entries whose shard starts later
//! than the window are left out: the migrator builds each shard from the database as its
//! minute comes within the lead, and a shard nobody built is read from the database.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{Clock, ShardKey, TaskKey, Timestamp};

use crate::{HotEntry, HotIndex, StoreResult};

/// How far past the migrator's lead writers still index: a shard the migrator has built must
/// not miss an entry a writer with a slower clock left out as too far ahead. Also covers a
/// write racing the pass that builds its shard.
pub const WINDOW_MARGIN: Duration = Duration::from_secs(60);

/// A [`HotIndex`] that drops added entries due in shards starting `ahead` or more from now.
pub struct Windowed {
    inner: Arc<dyn HotIndex>,
    clock: Arc<dyn Clock>,
    ahead: Duration,
}

impl Windowed {
    /// Indexes what falls within `lead` (the migrator's) plus [`WINDOW_MARGIN`].
    pub fn new(inner: Arc<dyn HotIndex>, clock: Arc<dyn Clock>, lead: Duration) -> Self {
        Self {
            inner,
            clock,
            ahead: lead.saturating_add(WINDOW_MARGIN),
        }
    }
}

#[async_trait]
impl HotIndex for Windowed {
    async fn add(&self, entries: &[HotEntry]) -> StoreResult<()> {
        let until = self.clock.now().saturating_add(self.ahead);
        if entries.iter().all(|e| e.shard.minute_start() < until) {
            return self.inner.add(entries).await;
        }
        let near: Vec<HotEntry> = entries
            .iter()
            .filter(|e| e.shard.minute_start() < until)
            .copied()
            .collect();
        self.inner.add(&near).await
    }

    async fn due(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        self.inner.due(shard, up_to, limit).await
    }

    async fn due_if_complete(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Option<Vec<(TaskKey, Timestamp)>>> {
        self.inner.due_if_complete(shard, up_to, limit).await
    }

    async fn touch(&self, shards: &[ShardKey]) -> StoreResult<()> {
        self.inner.touch(shards).await
    }

    async fn remove(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        self.inner.remove(shard, keys).await
    }

    async fn shard_complete(&self, shard: ShardKey) -> StoreResult<bool> {
        self.inner.shard_complete(shard).await
    }

    fn run_leases(&self) -> Option<Arc<dyn crate::RunLeases>> {
        self.inner.run_leases()
    }
}
