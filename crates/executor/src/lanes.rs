//! What an accepted key holds and where it waits for its claim.
//!
//! Every accepted key holds one in-flight permit until its outcome is written. A backlog's
//! keys (as the scheduler tells them apart, `chime_domain::Backlog`, or over
//! [`chime_domain::BACKLOG_AFTER`] late) may hold at most [`BACKLOG_SHARE`] of them: a burst
//! that fills an executor leaves room for the keys falling due meanwhile. Without that room
//! they were refused and offered again after a back-off, late. A quarter, not more: a drain
//! is CPU-bound, so more of it in flight only queues longer, and every key in flight,
//! on time or not, waits in the same queues (beside-burst: with three quarters the
//! every-second timers' p50 was 300-500 ms, with a quarter 73 ms, at the same drain rate).
//!
//! Keys on time wait in a claim queue of their own, served before the backlog's.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::Job;

/// The share of an executor's in-flight permits a backlog may hold (numerator, denominator).
pub const BACKLOG_SHARE: (usize, usize) = (1, 4);

/// The in-flight permits of one executor.
pub(crate) struct Permits {
    all: Arc<Semaphore>,
    backlog: Arc<Semaphore>,
    max: usize,
}

/// One accepted key's place in flight; given back when dropped.
pub(crate) struct Permit {
    _all: OwnedSemaphorePermit,
    _backlog: Option<OwnedSemaphorePermit>,
}

impl Permits {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            all: Arc::new(Semaphore::new(max)),
            backlog: Arc::new(Semaphore::new(backlog_cap(max))),
            max,
        })
    }

    /// A permit, if there is room for a key on time, or for a backlog's key.
    pub(crate) fn try_take(&self, on_time: bool) -> Option<Permit> {
        let backlog = if on_time {
            None
        } else {
            Some(self.backlog.clone().try_acquire_owned().ok()?)
        };
        let all = self.all.clone().try_acquire_owned().ok()?;
        Some(Permit {
            _all: all,
            _backlog: backlog,
        })
    }

    /// Permits free (for keys on time; a backlog's may have fewer).
    pub(crate) fn available(&self) -> usize {
        self.all.available_permits()
    }

    /// Keys accepted and not finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.max - self.available()
    }

    /// Waits up to `grace` for every permit to come back; returns whether they all did.
    pub(crate) async fn all_back(&self, grace: Duration) -> bool {
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        tokio::time::timeout(grace, self.all.acquire_many(all))
            .await
            .is_ok()
    }
}

/// How many of `max` permits a backlog may hold: [`BACKLOG_SHARE`], at least one.
pub(crate) fn backlog_cap(max: usize) -> usize {
    let (n, d) = BACKLOG_SHARE;
    (max * n / d).clamp(1, max.max(1))
}

/// The two claim queues.
#[derive(Clone)]
pub(crate) struct Lanes {
    /// Keys on time: claimed before any of `backlog`.
    pub(crate) on_time: mpsc::UnboundedSender<Job>,
    pub(crate) backlog: mpsc::UnboundedSender<Job>,
}

impl Lanes {
    /// Queues `job` in its lane; gives it back if the claim loop is gone.
    pub(crate) fn send(&self, job: Job, on_time: bool) -> Result<(), Job> {
        let lane = if on_time {
            &self.on_time
        } else {
            &self.backlog
        };
        lane.send(job).map_err(|e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_holds_a_quarter_of_the_permits_and_keys_on_time_the_rest() {
        let permits = Permits::new(8);
        let backlog: Vec<Permit> = std::iter::from_fn(|| permits.try_take(false)).collect();
        assert_eq!(backlog.len(), 2);
        let on_time: Vec<Permit> = std::iter::from_fn(|| permits.try_take(true)).collect();
        assert_eq!(on_time.len(), 6);
        assert_eq!(permits.in_flight(), 8);
        drop(backlog);
        assert_eq!(permits.available(), 2);
    }

    #[test]
    fn keys_on_time_may_take_every_permit() {
        let permits = Permits::new(4);
        let on_time: Vec<Permit> = std::iter::from_fn(|| permits.try_take(true)).collect();
        assert_eq!(on_time.len(), 4);
        assert!(permits.try_take(false).is_none());
    }

    #[test]
    fn one_permit_serves_a_backlog_too() {
        assert_eq!(backlog_cap(1), 1);
        assert_eq!(backlog_cap(2), 1);
        assert_eq!(backlog_cap(1024), 256);
    }
}
