//! Adding what a request wrote to the hot index, after its transaction committed. Best
//! effort by design: the rows are durable already, and a member the index lacks is fired by
//! the schedulers' database fallback (shard missing) or the sweeper (shard present), a
//! little late but never lost. So a slow or absent Redis must not slow the API down.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chime_domain::{Clock, NewOccurrence};
use chime_storage::{HotEntry, HotIndex};

/// Longest a request waits for the index.
const WRITE_TIMEOUT: Duration = Duration::from_millis(250);
/// After a failed write, requests skip the index this long instead of each waiting for it.
const BACK_OFF: Duration = Duration::from_secs(1);

pub struct IndexWriter {
    index: Option<Arc<dyn HotIndex>>,
    clock: Arc<dyn Clock>,
    /// Unix ms until which writes are skipped.
    skip_until: AtomicI64,
}

impl IndexWriter {
    /// `None`: no hot index configured; the schedulers read the database.
    pub fn new(index: Option<Arc<dyn HotIndex>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            index,
            clock,
            skip_until: AtomicI64::new(0),
        }
    }

    /// Indexes `written`; never fails the request.
    pub async fn add(&self, written: &[NewOccurrence]) {
        let Some(index) = &self.index else { return };
        if written.is_empty() {
            return;
        }
        let now = self.clock.now();
        if now.as_millis() < self.skip_until.load(Ordering::Relaxed) {
            metrics::counter!("chime_gateway_index_writes_skipped_total").increment(1);
            return;
        }
        let entries: Vec<HotEntry> = written
            .iter()
            .map(|o| HotEntry::new(o.key, o.key.run_at, o.bucket))
            .collect();
        let error = match tokio::time::timeout(WRITE_TIMEOUT, index.add(&entries)).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {WRITE_TIMEOUT:?}"),
        };
        self.skip_until
            .store(now.saturating_add(BACK_OFF).as_millis(), Ordering::Relaxed);
        metrics::counter!("chime_gateway_index_write_failures_total").increment(1);
        tracing::warn!(
            %error,
            occurrences = entries.len(),
            "hot index unavailable; the occurrences are stored and will fire through the \
             database fallback or the sweeper"
        );
    }
}
