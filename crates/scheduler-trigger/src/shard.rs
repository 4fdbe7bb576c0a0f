//! Reading one held shard: from the hot index when the shard is complete there, or from the
//! database when it is not (Redis lost it, or no migrator built it yet: the fallback),
//! remembering what was handed off meanwhile so nothing goes twice.

use std::collections::HashSet;
use std::sync::Arc;

use chime_domain::{ShardKey, TaskKey, Timestamp};
use chime_storage::{HotEntry, HotWrites, OccurrenceStore, StoreResult};

/// A hot-index member: a task key and when it is due.
pub(crate) type Member = (TaskKey, Timestamp);

/// Where a held shard's members are read from.
enum Source {
    HotIndex,
    /// The shard is not complete in the hot index: the database's claimable occurrences,
    /// minus those already handed off.
    Database {
        sent: HashSet<TaskKey>,
        /// Whether finding work there was reported (once per shard: a missing shard with
        /// nothing due, as before the migrator's first step, is not news).
        warned: bool,
    },
}

pub(crate) struct ShardReader {
    shard: ShardKey,
    index: HotWrites,
    occurrences: Arc<dyn OccurrenceStore>,
    /// Members read at most per call.
    limit: usize,
    source: Source,
}

impl ShardReader {
    pub(crate) fn new(
        shard: ShardKey,
        index: HotWrites,
        occurrences: Arc<dyn OccurrenceStore>,
        limit: usize,
    ) -> Self {
        Self {
            shard,
            index,
            occurrences,
            limit,
            source: Source::HotIndex,
        }
    }

    /// Members due up to `up_to`, earliest first, from the hot index or, when Redis lost the
    /// shard, from the database.
    pub(crate) async fn read(&mut self, up_to: Timestamp) -> StoreResult<Vec<Member>> {
        let (shard, limit) = (self.shard, self.limit);
        if let Source::HotIndex = self.source {
            if let Some(due) = self
                .index
                .reads()
                .due_if_complete(shard, up_to, limit)
                .await?
            {
                return Ok(due);
            }
            metrics::counter!("chime_scheduler_shard_fallbacks_total").increment(1);
            tracing::debug!(%shard, "shard not complete in the hot index; reading the database");
            self.source = Source::Database {
                sent: HashSet::new(),
                warned: false,
            };
        }
        if self.index.reads().shard_complete(shard).await? {
            // Built (by the migrator): members already handed off must not go twice.
            if let Source::Database { sent, .. } =
                std::mem::replace(&mut self.source, Source::HotIndex)
            {
                let sent: Vec<TaskKey> = sent.into_iter().collect();
                self.index.handed_off(shard, &sent).await?;
            }
            return self.index.reads().due(shard, up_to, limit).await;
        }
        let Source::Database { sent, warned } = &mut self.source else {
            return Ok(Vec::new());
        };
        let to = up_to.add_millis(1).min(shard.minute_end());
        let rows = self
            .occurrences
            .due_in_bucket(
                shard.bucket,
                shard.minute_start(),
                to,
                (limit + sent.len()) as u32,
            )
            .await?;
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|(k, _)| !sent.contains(k))
            .take(limit)
            .collect();
        if !rows.is_empty() && !*warned {
            *warned = true;
            tracing::warn!(%shard, "shard not built in the hot index (Redis lost it, or no migrator built it); handing off from the database");
        }
        Ok(rows)
    }

    /// Takes members out before their hand-off.
    pub(crate) async fn forget(&mut self, keys: &[TaskKey]) -> StoreResult<()> {
        match &mut self.source {
            Source::HotIndex => self.index.handed_off(self.shard, keys).await,
            Source::Database { sent, .. } => {
                sent.extend(keys.iter().copied());
                Ok(())
            }
        }
    }

    /// Puts members a hand-off refused back where [`Self::forget`] took them from.
    pub(crate) async fn restore(&mut self, members: &[Member]) -> StoreResult<()> {
        match &mut self.source {
            Source::HotIndex => {
                let entries: Vec<HotEntry> = members
                    .iter()
                    .map(|(k, due)| HotEntry::new(*k, *due, self.shard.bucket))
                    .collect();
                self.index.refused(&entries).await
            }
            Source::Database { sent, .. } => {
                for (k, _) in members {
                    sent.remove(k);
                }
                Ok(())
            }
        }
    }
}
