//! [`Activity`]: per app and minute tallies of what the executors did. Each executor process
//! (a `writer`) rewrites its own rows while a minute is open, so a retried write never counts
//! twice; readers sum over writers. The SQL backends share one impl
//! (`sql::activity_impl!`); the lateness histogram is stored as a JSON array.

use async_trait::async_trait;
use chime_domain::{AppName, Counts, LATENESS_BUCKETS, Tally, Timestamp};

use crate::{StoreError, StoreResult};

#[async_trait]
pub trait Activity: Send + Sync + 'static {
    /// Stores `writer`'s tallies, replacing what it stored before for the same app and minute.
    async fn write_activity(&self, writer: &str, tallies: &[Tally]) -> StoreResult<()>;

    /// Every writer's tallies from `since` on, summed per app and minute, in minute order;
    /// only `app`'s when given.
    async fn read_activity(
        &self,
        app: Option<&AppName>,
        since: Timestamp,
    ) -> StoreResult<Vec<Tally>>;
}

/// A stored row: (app, minute, fired, succeeded, failed, dead, lateness).
pub(crate) type ActivityRow = (String, i64, i64, i64, i64, i64, String);

pub(crate) fn lateness_json(c: &Counts) -> String {
    serde_json::Value::from(c.lateness.to_vec()).to_string()
}

pub(crate) fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Sums rows of the same app and minute (one per writer); rows come in minute, app order.
pub(crate) fn tallies(rows: Vec<ActivityRow>) -> StoreResult<Vec<Tally>> {
    let mut out: Vec<Tally> = Vec::new();
    for (app, minute, fired, succeeded, failed, dead, lateness) in rows {
        let buckets: Vec<u64> = serde_json::from_str(&lateness).map_err(StoreError::corrupt)?;
        let mut counts = Counts {
            fired: fired.max(0) as u64,
            succeeded: succeeded.max(0) as u64,
            failed: failed.max(0) as u64,
            dead: dead.max(0) as u64,
            lateness: [0; LATENESS_BUCKETS],
        };
        for (slot, n) in counts.lateness.iter_mut().zip(buckets) {
            *slot = n;
        }
        let minute = Timestamp::from_millis(minute);
        match out.last_mut() {
            Some(last) if last.minute == minute && last.app.as_str() == app => {
                last.counts.merge(&counts);
            }
            _ => out.push(Tally {
                app: AppName::parse(app).map_err(StoreError::corrupt)?,
                minute,
                counts,
            }),
        }
    }
    Ok(out)
}
