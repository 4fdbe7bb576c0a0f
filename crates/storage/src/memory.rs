//! In-process [`HotIndex`] and [`Leases`] for `chime dev`: one process, no Redis. Expiry is
//! driven by the injected clock, and expired shards are pruned on write, so memory stays
//! bounded by the shards of the last few minutes.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{Clock, ShardKey, TaskKey, Timestamp};

use crate::{
    HotEntry, HotIndex, LeaseToken, Leases, Membership, RunLeases, StoreError, StoreResult,
};

fn lock<T>(m: &Mutex<T>) -> StoreResult<MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| StoreError::internal("in-memory store poisoned by an earlier panic"))
}

#[derive(Debug)]
struct Shard {
    by_due: BTreeSet<(Timestamp, TaskKey)>,
    due_of: HashMap<TaskKey, Timestamp>,
    expires_at: Timestamp,
    /// Touched (built from the database) since it was created.
    complete: bool,
}

#[derive(Debug)]
pub struct MemoryHotIndex {
    shards: Mutex<HashMap<ShardKey, Shard>>,
    clock: Arc<dyn Clock>,
    /// How long a shard outlives its minute.
    retention: Duration,
    runs: Arc<MemoryRunLeases>,
}

impl MemoryHotIndex {
    pub fn new(clock: Arc<dyn Clock>, retention: Duration) -> Self {
        Self {
            shards: Mutex::new(HashMap::new()),
            runs: Arc::new(MemoryRunLeases {
                held: Mutex::new(HashMap::new()),
                clock: clock.clone(),
            }),
            clock,
            retention,
        }
    }
}

/// Unwritten runs' leases beside the in-memory index, each with its expiry.
#[derive(Debug)]
pub struct MemoryRunLeases {
    held: Mutex<HashMap<TaskKey, Timestamp>>,
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl RunLeases for MemoryRunLeases {
    async fn take_runs(&self, runs: &[TaskKey], ttl: Duration) -> StoreResult<Vec<bool>> {
        let now = self.clock.now();
        let mut held = lock(&self.held)?;
        held.retain(|_, until| *until > now);
        Ok(runs
            .iter()
            .map(|run| {
                let free = !held.contains_key(run);
                if free {
                    held.insert(*run, now.saturating_add(ttl));
                }
                free
            })
            .collect())
    }

    async fn free_runs(&self, runs: &[TaskKey]) -> StoreResult<()> {
        let mut held = lock(&self.held)?;
        for run in runs {
            held.remove(run);
        }
        Ok(())
    }

    async fn runs_held(&self, runs: &[TaskKey]) -> StoreResult<Vec<bool>> {
        let now = self.clock.now();
        let held = lock(&self.held)?;
        Ok(runs
            .iter()
            .map(|run| held.get(run).is_some_and(|until| *until > now))
            .collect())
    }
}

impl MemoryHotIndex {
    /// The shard, created if needed, with its expiry pushed to its minute plus retention.
    fn present<'a>(
        &self,
        shards: &'a mut HashMap<ShardKey, Shard>,
        key: ShardKey,
        now: Timestamp,
    ) -> &'a mut Shard {
        let shard = shards.entry(key).or_insert_with(|| Shard {
            by_due: BTreeSet::new(),
            due_of: HashMap::new(),
            expires_at: now,
            complete: false,
        });
        shard.expires_at = key.minute_end().saturating_add(self.retention);
        shard
    }
}

#[async_trait]
impl HotIndex for MemoryHotIndex {
    async fn add(&self, entries: &[HotEntry]) -> StoreResult<()> {
        let now = self.clock.now();
        let mut shards = lock(&self.shards)?;
        shards.retain(|_, s| s.expires_at > now);
        for e in entries {
            let shard = self.present(&mut shards, e.shard, now);
            if let Some(old) = shard.due_of.insert(e.key, e.due) {
                shard.by_due.remove(&(old, e.key));
            }
            shard.by_due.insert((e.due, e.key));
        }
        Ok(())
    }

    async fn due(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        let now = self.clock.now();
        let shards = lock(&self.shards)?;
        Ok(shards
            .get(&shard)
            .filter(|s| s.expires_at > now)
            .map(|s| {
                s.by_due
                    .iter()
                    .take_while(|(due, _)| *due <= up_to)
                    .take(limit)
                    .map(|(due, key)| (*key, *due))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn touch(&self, shards: &[ShardKey]) -> StoreResult<()> {
        let now = self.clock.now();
        let mut held = lock(&self.shards)?;
        held.retain(|_, s| s.expires_at > now);
        for shard in shards {
            self.present(&mut held, *shard, now).complete = true;
        }
        Ok(())
    }

    async fn remove(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        let mut shards = lock(&self.shards)?;
        if let Some(s) = shards.get_mut(&shard) {
            for key in keys {
                if let Some(due) = s.due_of.remove(key) {
                    s.by_due.remove(&(due, *key));
                }
            }
        }
        Ok(())
    }

    async fn shard_complete(&self, shard: ShardKey) -> StoreResult<bool> {
        let now = self.clock.now();
        Ok(lock(&self.shards)?
            .get(&shard)
            .is_some_and(|s| s.complete && s.expires_at > now))
    }

    fn run_leases(&self) -> Option<Arc<dyn RunLeases>> {
        Some(self.runs.clone())
    }
}

/// Leases and group membership in this process's memory (`chime dev`, tests).
#[derive(Debug)]
pub struct MemoryLeases {
    held: Mutex<HashMap<String, (LeaseToken, Timestamp)>>,
    /// Per group, each member's expiry.
    members: Mutex<HashMap<String, HashMap<String, Timestamp>>>,
    clock: Arc<dyn Clock>,
}

impl MemoryLeases {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
            members: Mutex::new(HashMap::new()),
            clock,
        }
    }
}

#[async_trait]
impl Membership for MemoryLeases {
    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        ttl: Duration,
    ) -> StoreResult<Vec<String>> {
        let now = self.clock.now();
        let mut groups = lock(&self.members)?;
        let members = groups.entry(group.to_owned()).or_default();
        members.retain(|_, until| *until > now);
        members.insert(member.to_owned(), now.saturating_add(ttl));
        let mut live: Vec<String> = members.keys().cloned().collect();
        live.sort();
        Ok(live)
    }

    async fn leave(&self, group: &str, member: &str) -> StoreResult<()> {
        if let Some(members) = lock(&self.members)?.get_mut(group) {
            members.remove(member);
        }
        Ok(())
    }

    async fn members(&self, group: &str) -> StoreResult<Vec<String>> {
        let now = self.clock.now();
        let groups = lock(&self.members)?;
        let mut live: Vec<String> = groups
            .get(group)
            .into_iter()
            .flatten()
            .filter(|(_, until)| **until > now)
            .map(|(m, _)| m.clone())
            .collect();
        live.sort();
        Ok(live)
    }
}

#[async_trait]
impl Leases for MemoryLeases {
    async fn acquire(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut held = lock(&self.held)?;
        held.retain(|_, (_, until)| *until > now);
        if held.contains_key(name) {
            return Ok(false);
        }
        held.insert(name.to_owned(), (token.clone(), now.saturating_add(ttl)));
        Ok(true)
    }

    async fn renew(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut held = lock(&self.held)?;
        match held.get_mut(name) {
            Some((holder, until)) if holder == token && *until > now => {
                *until = now.saturating_add(ttl);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, name: &str, token: &LeaseToken) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut held = lock(&self.held)?;
        match held.get(name) {
            Some((holder, until)) if holder == token && *until > now => {
                held.remove(name);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn take(
        &self,
        name: &str,
        token: &LeaseToken,
        ttl: Duration,
        live: &[String],
    ) -> StoreResult<bool> {
        let now = self.clock.now();
        let mut held = lock(&self.held)?;
        if let Some((holder, until)) = held.get(name)
            && *until > now
            && (holder == token || live.iter().any(|m| m == holder.as_str()))
        {
            return Ok(false);
        }
        held.insert(name.to_owned(), (token.clone(), now.saturating_add(ttl)));
        Ok(true)
    }
}
