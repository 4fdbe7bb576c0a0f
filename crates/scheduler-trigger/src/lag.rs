//! How far behind this replica is: the oldest due key of its shards that it has not handed
//! off yet, as `chime_scheduler_lag_seconds`. Zero while every key goes out on time; it
//! grows while executors refuse keys (more is due than the fleet fires) and falls back as
//! the backlog drains.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chime_domain::{ShardKey, Timestamp};

#[derive(Default)]
pub(crate) struct Lag {
    /// Per held shard: the due time of its oldest member at the last read.
    oldest: Mutex<HashMap<ShardKey, Timestamp>>,
}

impl Lag {
    /// What a read of `shard` found first: its oldest member still in the hot index, or
    /// none.
    pub(crate) fn note(&self, shard: ShardKey, oldest: Option<Timestamp>) {
        let mut map = self.oldest.lock().unwrap_or_else(|p| p.into_inner());
        match oldest {
            Some(at) => map.insert(shard, at),
            None => map.remove(&shard),
        };
    }

    /// A shard this replica no longer works.
    pub(crate) fn forget(&self, shard: ShardKey) {
        self.note(shard, None);
    }

    /// How late the oldest due key not handed off is at `now`.
    pub(crate) fn at(&self, now: Timestamp) -> Duration {
        let map = self.oldest.lock().unwrap_or_else(|p| p.into_inner());
        let late = map
            .values()
            .map(|at| now.as_millis() - at.as_millis())
            .max()
            .unwrap_or(0);
        Duration::from_millis(u64::try_from(late).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::BucketCount;

    fn shard(bucket: usize) -> ShardKey {
        let b = BucketCount::DEFAULT.all().nth(bucket).unwrap();
        ShardKey::new(Timestamp::from_millis(60_000), b)
    }

    #[test]
    fn the_oldest_key_of_any_shard_sets_the_lag() {
        let lag = Lag::default();
        let now = Timestamp::from_millis(100_000);
        assert_eq!(lag.at(now), Duration::ZERO);
        lag.note(shard(0), Some(Timestamp::from_millis(97_000)));
        lag.note(shard(1), Some(Timestamp::from_millis(99_500)));
        assert_eq!(lag.at(now), Duration::from_secs(3));
        // Keys due ahead are no lag.
        lag.note(shard(0), Some(Timestamp::from_millis(100_050)));
        assert_eq!(lag.at(now), Duration::from_millis(500));
        lag.forget(shard(1));
        assert_eq!(lag.at(now), Duration::ZERO);
    }
}
