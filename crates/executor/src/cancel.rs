//! `overlap: cancel_other`: the occurrence that starts marks the one in flight skipped in the
//! database (`OccurrenceStore::claim_exclusive`), on whichever executor claims it; the
//! executor running that one's callback finds out here and aborts it. Each executor asks
//! about all its in-flight `cancel_other` callbacks in one statement every [`POLL`], and
//! only while it has any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chime_domain::TaskKey;
use chime_storage::OccurrenceStore;
use tokio_util::sync::CancellationToken;

/// How often the state of watched callbacks is read: the longest a cancelled callback runs on.
pub(crate) const POLL: Duration = Duration::from_millis(250);

#[derive(Default)]
pub(crate) struct Cancels {
    /// In-flight callbacks by occurrence: the attempt they are, and how to abort them.
    watched: Mutex<HashMap<TaskKey, (u32, CancellationToken)>>,
}

/// A watched callback; dropping it stops the watch.
pub(crate) struct Watch {
    cancels: Arc<Cancels>,
    key: TaskKey,
    attempt: u32,
    token: CancellationToken,
}

impl Watch {
    /// Resolves once another occurrence cancelled this one.
    pub(crate) async fn cancelled(&self) {
        self.token.cancelled().await;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = self.cancels.lock();
        // A later attempt of the same occurrence may be watched by now: leave it.
        if watched
            .get(&self.key)
            .is_some_and(|(a, _)| *a == self.attempt)
        {
            watched.remove(&self.key);
        }
    }
}

impl Cancels {
    /// Starts the poll that aborts watched callbacks; it ends with the last `Arc`.
    pub(crate) fn start(store: Arc<dyn OccurrenceStore>) -> Arc<Self> {
        let cancels = Arc::new(Self::default());
        tokio::spawn(poll(Arc::downgrade(&cancels), store));
        cancels
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskKey, (u32, CancellationToken)>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches the callback of `key` at `attempt` until the returned guard is dropped.
    pub(crate) fn watch(self: &Arc<Self>, key: TaskKey, attempt: u32) -> Watch {
        let token = CancellationToken::new();
        self.lock().insert(key, (attempt, token.clone()));
        Watch {
            cancels: self.clone(),
            key,
            attempt,
            token,
        }
    }

    /// Aborts the watched callbacks whose occurrence is no longer running at their attempt.
    /// Returns how many.
    async fn check(&self, store: &dyn OccurrenceStore) -> chime_storage::StoreResult<usize> {
        let claims: Vec<(TaskKey, u32)> = self.lock().iter().map(|(k, (a, _))| (*k, *a)).collect();
        if claims.is_empty() {
            return Ok(0);
        }
        let running = store.still_running(&claims).await?;
        let mut aborted = 0;
        let watched = self.lock();
        for (key, attempt) in &claims {
            if running.contains(key) {
                continue;
            }
            if let Some((a, token)) = watched.get(key)
                && a == attempt
            {
                token.cancel();
                aborted += 1;
            }
        }
        Ok(aborted)
    }
}

async fn poll(cancels: Weak<Cancels>, store: Arc<dyn OccurrenceStore>) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(cancels) = cancels.upgrade() else {
            return;
        };
        match cancels.check(store.as_ref()).await {
            Ok(0) => {}
            Ok(n) => {
                metrics::counter!("chime_executor_overlap_cancelled_total").increment(n as u64);
            }
            // The next poll asks again; the callback runs on meanwhile.
            Err(e) => tracing::warn!(error = %e, "cannot read the state of cancellable callbacks"),
        }
    }
}
