//! Redis backend for [`HotIndex`] and [`Leases`] (fred).
//!
//! Keys: `{prefix}:shard:{yyyymmddHHMM}:{bucket}` (ZSET of task keys scored by due ms) and
//! `{prefix}:lease:{name}` (string holding the holder's token), `{prefix}:run:{timer_id}:{run_at}`
//! (an unwritten run's lease, see [`RunLeases`]). A shard built from the
//! database also holds a marker member scored far in the future: it says the shard is
//! complete, and stays when every member was dispatched. A shard without it (never built, or
//! lost by Redis and re-created by a writer) sends readers to the database.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{ShardKey, TaskKey, Timestamp, ValidationError};
use fred::clients::Pool;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface, SortedSetsInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, Expiration, SetOptions};

use crate::{
    HotEntry, HotIndex, LeaseToken, Leases, Membership, RunLeases, StoreError, StoreResult,
};

/// Member that marks a shard complete. Not a valid task key, never due.
const MARKER: &str = "~";
/// ≈ year 128,000 in ms: above any due time, exact in an f64.
const MARKER_SCORE: f64 = 4.0e15;
/// Members per ZADD, so one huge shard does not become one huge command.
const ZADD_CHUNK: usize = 2_000;

/// `1` then the due members (member, score, member, score…) of a complete shard; `0` when the
/// marker is missing. One key: safe on Redis Cluster.
const DUE_IF_COMPLETE: &str = "if not redis.call('ZSCORE', KEYS[1], '~') then return {'0'} end \
    local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2]) \
    table.insert(due, 1, '1') return due";
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                       return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                         return redis.call('DEL', KEYS[1]) else return 0 end";
/// Sets the lease unless its holder is the taker (ARGV[1]) or one of the live members
/// (ARGV[3..]).
const TAKE: &str = "local h = redis.call('GET', KEYS[1]) \
    if h then \
      for i = 3, #ARGV do if ARGV[i] == h then return 0 end end \
      if h == ARGV[1] then return 0 end \
    end \
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1";
/// Expiries are Redis's own clock (TIME), so replicas with skewed clocks agree on who lapsed.
/// One key: safe on Redis Cluster.
const HEARTBEAT: &str = "local t = redis.call('TIME') \
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) \
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10) \
    return redis.call('ZRANGE', KEYS[1], 0, -1)";
/// The live members by the server's clock, leaving the set as it is.
const MEMBERS: &str = "local t = redis.call('TIME') \
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
    return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')";

#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Key prefix (`CHIME_REDIS_PREFIX`), so deployments and tests can share one Redis.
    pub prefix: String,
    pub pool_size: usize,
    /// How long a shard outlives its minute.
    pub shard_retention: Duration,
    pub connect_timeout: Duration,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            prefix: "chime".into(),
            pool_size: 4,
            shard_retention: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// The Redis key of a shard's ZSET: `{prefix}:shard:{yyyymmddHHMM}:{bucket}`. The key layout
/// is this backend's business; the domain only names the shard.
fn shard_key(prefix: &str, shard: ShardKey) -> String {
    format!("{prefix}:shard:{shard}")
}

/// A connected Redis pool shared by the hot index and the leases.
#[derive(Clone)]
pub struct RedisBackend {
    pool: Pool,
    settings: RedisSettings,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("settings", &self.settings)
            .finish()
    }
}

impl RedisBackend {
    /// Connects, and keeps reconnecting in the background if Redis goes away.
    pub async fn connect(url: &str, settings: RedisSettings) -> StoreResult<Self> {
        let config = Config::from_url(url)
            .map_err(|e| StoreError::Invalid(ValidationError::new("redis.url", e)))?;
        let timeout = settings.connect_timeout;
        let pool = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
            })
            .with_performance_config(|p| p.default_command_timeout = timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
            .build_pool(settings.pool_size.max(1))?;
        // Only the first connection is awaited; reconnects run inside fred's own task.
        let _task = pool.init().await?;
        Ok(Self { pool, settings })
    }

    pub fn prefix(&self) -> &str {
        &self.settings.prefix
    }

    pub fn hot_index(&self) -> RedisHotIndex {
        RedisHotIndex(self.clone())
    }

    pub fn leases(&self) -> RedisLeases {
        RedisLeases(self.clone())
    }

    /// Deletes every key under this backend's prefix. For tests and `chime` tooling that
    /// owns a prefix outright; never needed in normal operation.
    pub async fn delete_prefix(&self) -> StoreResult<u64> {
        use futures::TryStreamExt;
        let client = self.pool.next();
        let keys: Vec<fred::types::Key> = client
            .scan_buffered(format!("{}:*", self.settings.prefix), Some(1_000), None)
            .try_collect()
            .await?;
        let mut deleted = 0;
        for chunk in keys.chunks(1_000) {
            deleted += client.del::<u64, _>(chunk.to_vec()).await?;
        }
        Ok(deleted)
    }

    pub async fn quit(&self) {
        let _ = self.pool.quit().await;
    }

    fn lease_key(&self, name: &str) -> String {
        format!("{}:lease:{name}", self.settings.prefix)
    }

    fn members_key(&self, group: &str) -> String {
        format!("{}:members:{group}", self.settings.prefix)
    }
}

pub struct RedisHotIndex(RedisBackend);

impl RedisHotIndex {
    /// Adds members shard by shard in one pipeline; every shard named gets its expiry and,
    /// when `complete`, its marker.
    async fn write(
        &self,
        by_shard: BTreeMap<ShardKey, Vec<(f64, String)>>,
        complete: bool,
    ) -> StoreResult<()> {
        if by_shard.is_empty() {
            return Ok(());
        }
        let retention =
            i64::try_from(self.0.settings.shard_retention.as_millis()).unwrap_or(i64::MAX);
        let pipeline = self.0.pool.next().pipeline();
        for (shard, mut members) in by_shard {
            let key = shard_key(&self.0.settings.prefix, shard);
            if complete {
                // The marker rides in the first ZADD: one command per shard.
                members.insert(0, (MARKER_SCORE, MARKER.to_owned()));
            }
            for chunk in members.chunks(ZADD_CHUNK) {
                let _: () = pipeline
                    .zadd(&key, None, None, false, false, chunk.to_vec())
                    .await?;
            }
            let expire_at = shard.minute_end().as_millis().saturating_add(retention);
            let _: () = pipeline.pexpire_at(&key, expire_at, None).await?;
        }
        let _: Vec<fred::types::Value> = pipeline.all().await?;
        Ok(())
    }
}

#[async_trait]
impl HotIndex for RedisHotIndex {
    async fn add(&self, entries: &[HotEntry]) -> StoreResult<()> {
        let mut by_shard: BTreeMap<ShardKey, Vec<(f64, String)>> = BTreeMap::new();
        for e in entries {
            by_shard
                .entry(e.shard)
                .or_default()
                .push((e.due.as_millis() as f64, e.key.to_string()));
        }
        self.write(by_shard, false).await
    }

    async fn touch(&self, shards: &[ShardKey]) -> StoreResult<()> {
        self.write(shards.iter().map(|s| (*s, Vec::new())).collect(), true)
            .await
    }

    async fn due_if_complete(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Option<Vec<(TaskKey, Timestamp)>>> {
        let key = shard_key(&self.0.settings.prefix, shard);
        let flat: Vec<String> = self
            .0
            .pool
            .next()
            .eval(
                DUE_IF_COMPLETE,
                vec![key.clone()],
                vec![up_to.as_millis().to_string(), limit.to_string()],
            )
            .await?;
        let Some((complete, flat)) = flat.split_first() else {
            return Err(StoreError::corrupt(format!("empty reply reading {key}")));
        };
        if complete != "1" {
            return Ok(None);
        }
        flat.chunks_exact(2)
            .filter(|pair| pair[0] != MARKER)
            .map(|pair| {
                let member = pair[0]
                    .parse::<TaskKey>()
                    .map_err(|e| StoreError::corrupt(format!("hot-index member in {key}: {e}")))?;
                let score: f64 = pair[1]
                    .parse()
                    .map_err(|e| StoreError::corrupt(format!("hot-index score in {key}: {e}")))?;
                Ok((member, Timestamp::from_millis(score as i64)))
            })
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
    }
    async fn due(
        &self,
        shard: ShardKey,
        up_to: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        let key = shard_key(&self.0.settings.prefix, shard);
        let members: Vec<(String, f64)> = self
            .0
            .pool
            .next()
            .zrangebyscore(
                &key,
                f64::NEG_INFINITY,
                up_to.as_millis() as f64,
                true,
                Some((0, i64::try_from(limit).unwrap_or(i64::MAX))),
            )
            .await?;
        members
            .into_iter()
            .filter(|(m, _)| m != MARKER)
            .map(|(member, score)| {
                let key = member
                    .parse::<TaskKey>()
                    .map_err(|e| StoreError::corrupt(format!("hot-index member in {key}: {e}")))?;
                Ok((key, Timestamp::from_millis(score as i64)))
            })
            .collect()
    }

    async fn remove(&self, shard: ShardKey, keys: &[TaskKey]) -> StoreResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let members: Vec<String> = keys.iter().map(TaskKey::to_string).collect();
        let _: i64 = self
            .0
            .pool
            .next()
            .zrem(shard_key(&self.0.settings.prefix, shard), members)
            .await?;
        Ok(())
    }

    async fn shard_complete(&self, shard: ShardKey) -> StoreResult<bool> {
        let score: Option<f64> = self
            .0
            .pool
            .next()
            .zscore(shard_key(&self.0.settings.prefix, shard), MARKER)
            .await?;
        Ok(score.is_some())
    }

    fn run_leases(&self) -> Option<std::sync::Arc<dyn RunLeases>> {
        Some(std::sync::Arc::new(self.0.leases()))
    }
}

/// The key of a run's lease: `{prefix}:run:{timer_id}:{run_at}`. One key per run, so each
/// lease expires by itself, and Redis Cluster spreads them.
fn run_key(prefix: &str, run: &TaskKey) -> String {
    format!("{prefix}:run:{run}")
}

fn run_keys(prefix: &str, runs: &[TaskKey]) -> Vec<String> {
    runs.iter().map(|r| run_key(prefix, r)).collect()
}

/// Takes each key's run lease for ARGV[1] ms where nobody holds it: 1 where taken, 0 where
/// held. Many keys in one command, so only where they all live on one node.
const TAKE_RUNS: &str = "local t = {} for i, k in ipairs(KEYS) do \
    t[i] = redis.call('SET', k, '1', 'PX', ARGV[1], 'NX') and 1 or 0 end return t";

#[async_trait]
impl RunLeases for RedisLeases {
    async fn take_runs(&self, runs: &[TaskKey], ttl: Duration) -> StoreResult<Vec<bool>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.0.pool.next();
        // One command for the batch where one node holds every key: a command per run cost
        // the executors a sixth of their CPU at a steady 5,000 firings/s (fred's per-command
        // work, both ways). Redis Cluster spreads the keys, so there each is its own SET.
        if !client.is_clustered() {
            let keys = run_keys(&self.0.settings.prefix, runs);
            let taken: Vec<i64> = client
                .eval(TAKE_RUNS, keys, vec![ttl_ms(ttl).to_string()])
                .await?;
            return Ok(taken.into_iter().map(|t| t == 1).collect());
        }
        let pipeline = client.pipeline();
        for run in runs {
            let _: () = pipeline
                .set(
                    run_key(&self.0.settings.prefix, run),
                    "1",
                    Some(Expiration::PX(ttl_ms(ttl))),
                    Some(SetOptions::NX),
                    false,
                )
                .await?;
        }
        let replies: Vec<fred::types::Value> = pipeline.all().await?;
        Ok(replies.iter().map(|r| !r.is_null()).collect())
    }

    async fn free_runs(&self, runs: &[TaskKey]) -> StoreResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        let client = self.0.pool.next();
        // As in `take_runs`: one DEL of them all where one node holds them.
        if !client.is_clustered() {
            let keys = run_keys(&self.0.settings.prefix, runs);
            let _: i64 = client.del(keys).await?;
            return Ok(());
        }
        let pipeline = client.pipeline();
        for run in runs {
            let _: () = pipeline.del(run_key(&self.0.settings.prefix, run)).await?;
        }
        let _: Vec<fred::types::Value> = pipeline.all().await?;
        Ok(())
    }

    async fn runs_held(&self, runs: &[TaskKey]) -> StoreResult<Vec<bool>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let pipeline = self.0.pool.next().pipeline();
        for run in runs {
            let _: () = pipeline
                .exists(run_key(&self.0.settings.prefix, run))
                .await?;
        }
        let replies: Vec<i64> = pipeline.all().await?;
        Ok(replies.into_iter().map(|n| n > 0).collect())
    }
}

pub struct RedisLeases(RedisBackend);

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[async_trait]
impl Leases for RedisLeases {
    async fn acquire(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let set: Option<String> = self
            .0
            .pool
            .next()
            .set(
                self.0.lease_key(name),
                token.as_str(),
                Some(Expiration::PX(ttl_ms(ttl))),
                Some(SetOptions::NX),
                false,
            )
            .await?;
        Ok(set.is_some())
    }

    async fn renew(&self, name: &str, token: &LeaseToken, ttl: Duration) -> StoreResult<bool> {
        let renewed: i64 = self
            .0
            .pool
            .next()
            .eval(
                RENEW,
                vec![self.0.lease_key(name)],
                vec![token.as_str().to_owned(), ttl_ms(ttl).to_string()],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&self, name: &str, token: &LeaseToken) -> StoreResult<bool> {
        let released: i64 = self
            .0
            .pool
            .next()
            .eval(
                RELEASE,
                vec![self.0.lease_key(name)],
                vec![token.as_str().to_owned()],
            )
            .await?;
        Ok(released == 1)
    }

    async fn take(
        &self,
        name: &str,
        token: &LeaseToken,
        ttl: Duration,
        live: &[String],
    ) -> StoreResult<bool> {
        let mut args = vec![token.as_str().to_owned(), ttl_ms(ttl).to_string()];
        args.extend(live.iter().cloned());
        let taken: i64 = self
            .0
            .pool
            .next()
            .eval(TAKE, vec![self.0.lease_key(name)], args)
            .await?;
        Ok(taken == 1)
    }
}

#[async_trait]
impl Membership for RedisLeases {
    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        ttl: Duration,
    ) -> StoreResult<Vec<String>> {
        let mut live: Vec<String> = self
            .0
            .pool
            .next()
            .eval(
                HEARTBEAT,
                vec![self.0.members_key(group)],
                vec![member.to_owned(), ttl_ms(ttl).to_string()],
            )
            .await?;
        live.sort();
        Ok(live)
    }

    async fn leave(&self, group: &str, member: &str) -> StoreResult<()> {
        let _: i64 = self
            .0
            .pool
            .next()
            .zrem(self.0.members_key(group), member.to_owned())
            .await?;
        Ok(())
    }

    async fn members(&self, group: &str) -> StoreResult<Vec<String>> {
        let mut live: Vec<String> = self
            .0
            .pool
            .next()
            .eval(
                MEMBERS,
                vec![self.0.members_key(group)],
                Vec::<String>::new(),
            )
            .await?;
        live.sort();
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use chime_domain::{Bucket, ShardKey, Timestamp};

    #[test]
    fn shard_keys_follow_the_documented_layout() {
        let at = Timestamp::parse_rfc3339("2026-11-22T10:07:31Z").unwrap_or_else(|e| panic!("{e}"));
        let shard = ShardKey::new(at, Bucket::from_stored(3));
        assert_eq!(
            super::shard_key("chime", shard),
            "chime:shard:202611221007:3"
        );
    }
}
