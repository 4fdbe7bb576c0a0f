//! Reading one held shard: from the hot index when the shard is complete there, or from the
//! database when it is not (Redis lost it, or no migrator built it yet: the fallback),
//! remembering what was handed off meanwhile so nothing goes twice.

use std::collections::HashSet;
use std::sync::Arc;

use chime_domain::{ShardKey, TaskKey, Timestamp};
use chime_storage::{Behind, HotEntry, HotWrites, OccurrenceStore, StoreResult, TimerStore};

/// A hot-index member: a task key and when it is due.
pub(crate) type Member = (TaskKey, Timestamp);

/// Where a held shard's members are read from.
enum Source {
    HotIndex,
    /// The shard is not complete in the hot index: the database's claimable occurrences,
    /// minus those already handed off.
    Database {
        sent: HashSet<TaskKey>,
        /// Rows due before this are left to the migrator's rebuild of the shard and to the
        /// sweeper: where leases live apart from the database (Redis), a `pending` row due
        /// before the shard was lost may be a first attempt in flight under a run lease the
        /// loss took, and offered now it would go twice.
        rows_from: Timestamp,
        /// Whether finding work there was reported (once per shard: a missing shard with
        /// nothing due, as before the migrator's first step, is not news).
        warned: bool,
        /// The bucket's timers whose runs are unwritten (they have no rows to read), and
        /// when they were read.
        unwritten: Option<(Vec<Behind>, Timestamp)>,
    },
}

/// How long a fallback keeps the bucket's unwritten timers before reading them again.
const UNWRITTEN_READ_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// How far behind now the fallback takes an unwritten run as maybe fired already, and
/// looks for its row first.
const SETTLED: std::time::Duration = std::time::Duration::from_millis(200);

pub(crate) struct ShardReader {
    shard: ShardKey,
    index: HotWrites,
    occurrences: Arc<dyn OccurrenceStore>,
    timers: Arc<dyn TimerStore>,
    clock: Arc<dyn chime_domain::Clock>,
    /// Members read at most per call.
    limit: usize,
    /// How far ahead of due members were handed off before the shard was lost.
    dispatch_ahead: std::time::Duration,
    source: Source,
}

impl ShardReader {
    pub(crate) fn new(
        shard: ShardKey,
        index: HotWrites,
        occurrences: Arc<dyn OccurrenceStore>,
        timers: Arc<dyn TimerStore>,
        clock: Arc<dyn chime_domain::Clock>,
        limit: usize,
        dispatch_ahead: std::time::Duration,
    ) -> Self {
        Self {
            shard,
            index,
            occurrences,
            timers,
            clock,
            limit,
            dispatch_ahead,
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
            let leased_apart = self
                .index
                .reads()
                .run_leases()
                .is_some_and(|l| l.apart_from_store());
            self.source = Source::Database {
                sent: HashSet::new(),
                rows_from: if leased_apart {
                    self.clock.now().saturating_add(self.dispatch_ahead)
                } else {
                    shard.minute_start()
                },
                warned: false,
                unwritten: None,
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
        let Source::Database {
            sent,
            rows_from,
            warned,
            unwritten,
        } = &mut self.source
        else {
            return Ok(Vec::new());
        };
        let to = up_to.add_millis(1).min(shard.minute_end());
        let mut rows = self
            .occurrences
            .due_in_bucket(
                shard.bucket,
                shard.minute_start().max(*rows_from),
                to,
                (limit + sent.len()) as u32,
            )
            .await?;
        rows.extend(
            unwritten_due(
                self.timers.as_ref(),
                self.occurrences.as_ref(),
                self.clock.now(),
                unwritten,
                sent,
                shard,
                to,
            )
            .await?,
        );
        rows.sort_by_key(|(k, due)| (*due, *k));
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

/// The unwritten runs of `shard` due before `to` and not `sent` yet, computed from the
/// bucket's unwritten timers (read again every [`UNWRITTEN_READ_EVERY`]): those due
/// [`SETTLED`] ago or more only if they have no row yet (fired before the hot index lost
/// the shard, they need not go again).
async fn unwritten_due(
    timers: &dyn TimerStore,
    occurrences: &dyn OccurrenceStore,
    now: Timestamp,
    cache: &mut Option<(Vec<Behind>, Timestamp)>,
    sent: &HashSet<TaskKey>,
    shard: ShardKey,
    to: Timestamp,
) -> StoreResult<Vec<Member>> {
    if cache
        .as_ref()
        .is_none_or(|(_, at)| now.saturating_sub(UNWRITTEN_READ_EVERY) >= *at)
    {
        *cache = Some((
            chime_storage::unwritten::timers_of(timers, shard.bucket).await?,
            now,
        ));
    }
    let Some((bucket_timers, _)) = cache.as_ref() else {
        return Ok(Vec::new());
    };
    let runs: Vec<Member> =
        chime_storage::unwritten::runs_between(bucket_timers, shard.minute_start(), to, true)
            .into_iter()
            .map(|e| (e.key, e.due))
            .filter(|(k, _)| !sent.contains(k))
            .collect();
    let settled = now.saturating_sub(SETTLED);
    let past: Vec<TaskKey> = runs
        .iter()
        .filter(|(_, due)| *due < settled)
        .map(|(k, _)| *k)
        .collect();
    if past.is_empty() {
        return Ok(runs);
    }
    let absent: HashSet<TaskKey> = occurrences
        .absent(&past)
        .await?
        .into_iter()
        .map(|a| a.key)
        .collect();
    Ok(runs
        .into_iter()
        .filter(|(k, due)| *due >= settled || absent.contains(k))
        .collect())
}
