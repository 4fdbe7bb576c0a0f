//! The hot path's traits: the hot index of what is due soon, the leases and membership
//! replicas split work by, and the run leases unwritten runs are taken under. Backends:
//! Redis (`redis.rs`), memory (`memory.rs`), PostgreSQL-only mode (`postgres/hot_index.rs`,
//! `leases.rs`, `run_leases.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{Bucket, ShardKey, TaskKey, Timestamp};

use crate::StoreResult;

/// One member of the hot index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotEntry {
    pub shard: ShardKey,
    pub key: TaskKey,
    pub due: Timestamp,
}

impl HotEntry {
    pub fn new(key: TaskKey, due: Timestamp, bucket: Bucket) -> Self {
        Self {
            shard: ShardKey::new(due, bucket),
            key,
            due,
        }
    }
}

/// The hot index: per (minute, bucket) shard, task keys scored by due time.
///
/// A shard is *complete* once it was built from the database (the migrator reads a shard's
/// claimable occurrences as its minute comes within the lead, adds them, then
/// [`HotIndex::touch`]es it) and until it expires; only then does it hold every occurrence
/// due in it. Writers add what they write themselves (creates, retries), which does not make
/// a shard complete: a shard Redis lost and a writer re-created, or one nobody has built
/// yet (every migrator down), is read from the database instead.
#[async_trait]
pub trait HotIndex: Send + Sync + 'static {
    /// Adds members (re-adding one updates its score).
    async fn add(&self, entries: &[HotEntry]) -> StoreResult<()>;

    /// Members of `shard` due at or before `up_to`, earliest first, at most `limit`.
    async fn due(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>>;

    /// [`HotIndex::due`] if the shard is complete, else `None` (read the database). Backends
    /// answer both in one round trip where they can.
    async fn due_if_complete(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Option<Vec<(TaskKey, Timestamp)>>> {
        if !self.shard_complete(shard).await? {
            return Ok(None);
        }
        self.due(shard, up_to, limit).await.map(Some)
    }

    /// Marks shards complete, keeping their members: the migrator touches every shard of
    /// its window after building the ones that were not, so an empty shard is not mistaken
    /// for one Redis lost.
    async fn touch(&self, shards: &[ShardKey]) -> StoreResult<()>;

    async fn remove(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()>;

    /// Whether the shard was built (touched) and not lost since; it stays complete after
    /// its members are removed, until it expires. `false` means: read the database instead.
    async fn shard_complete(&self, shard: ShardKey) -> StoreResult<bool>;

    /// The run leases kept beside this index, if its backend keeps them.
    fn run_leases(&self) -> Option<Arc<dyn RunLeases>> {
        None
    }
}

/// Leases under which executors take unwritten runs ([`chime_domain::UnwrittenRun`]): at most
/// one holder per run at a time, so at most one callback, until the run's row is written.
/// A lease is taken before the run's row is looked for and freed only once the row is
/// written, so a second taker either finds it held or finds the row.
#[async_trait]
pub trait RunLeases: Send + Sync + 'static {
    /// Takes each run's lease for `ttl` unless another holds it; which were taken, in order.
    async fn take_runs(&self, runs: &[TaskKey], ttl: Duration) -> StoreResult<Vec<bool>>;

    /// Frees the leases of runs whose rows are written, or that turned out to have rows.
    async fn free_runs(&self, runs: &[TaskKey]) -> StoreResult<()>;

    /// Which of `runs` are held now, in order.
    async fn runs_held(&self, runs: &[TaskKey]) -> StoreResult<Vec<bool>>;

    /// Whether a lease costs the occurrence store nothing (Redis, memory): only then do
    /// executors also take written runs' first attempts under leases, rather than claim
    /// their rows ([`crate::OccurrenceStore::first_attempts`]).
    fn apart_from_store(&self) -> bool {
        true
    }
}

/// An opaque holder token. Only the holder's token can renew or release a lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Named, expiring, exclusive leases. A holder's token doubles as its member id in
/// [`Membership`], so a lease left by a member that died can be taken at once.
#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// Takes the lease if it is free or expired. `true` if `token` now holds it.
    async fn acquire(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool>;

    /// Extends the lease if `token` still holds it.
    async fn renew(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool>;

    /// Frees the lease if `token` still holds it.
    async fn release(&self, name: &str, token: &LeaseToken) -> StoreResult<bool>;

    /// Takes the lease if it is free, expired, or held by a token that is not among `live`
    /// (a member whose heartbeat lapsed): failover without waiting out the lease. `true` if
    /// `token` now holds it; `false` if it already did or a live member does.
    async fn take(
        &self,
        name: &str,
        token: &LeaseToken,
        ttl: Duration,
        live: &[String],
    ) -> StoreResult<bool>;
}

/// The live members of a group of replicas (schedulers, migrators), each kept alive by its
/// heartbeats: what the replicas split their buckets by ([`chime_domain::Ownership`]).
#[async_trait]
pub trait Membership: Send + Sync + 'static {
    /// Marks `member` of `group` live for `ttl` and returns the group's live members, sorted.
    async fn heartbeat(&self, group: &str, member: &str, ttl: Duration)
    -> StoreResult<Vec<String>>;

    /// Removes `member` at once, so peers take over its buckets without waiting for a lapse.
    async fn leave(&self, group: &str, member: &str) -> StoreResult<()>;

    /// The group's live members, sorted, read without joining: for a service that follows
    /// a group it is not part of (schedulers finding the executors).
    async fn members(&self, group: &str) -> StoreResult<Vec<String>>;
}
