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
//! The keys due at any one instant may hold that share too, on time or not: a burst due at
//! one instant is on time only while its first keys are offered, and those took every
//! permit, so the keys falling due just after it waited for them (beside-burst: the
//! every-second firings due in the burst's first 250 ms were 0.6 s late at the median).
//! An instant is a millisecond, as bursts come (a cron's minute, one-shots set for the same
//! moment); one-shots spread over a few milliseconds are not held back by it.
//!
//! Keys on time wait in a claim queue of their own, served before the backlog's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::Timestamp;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::Job;

/// The share of an executor's in-flight permits a backlog may hold (numerator, denominator),
/// and so may the keys due at any one instant.
pub const BACKLOG_SHARE: (usize, usize) = (1, 4);

/// The in-flight permits of one executor.
pub(crate) struct Permits {
    all: Arc<Semaphore>,
    backlog: Arc<Semaphore>,
    instants: Arc<Instants>,
    max: usize,
}

/// One accepted key's place in flight; given back when dropped.
pub(crate) struct Permit {
    _all: OwnedSemaphorePermit,
    _backlog: Option<OwnedSemaphorePermit>,
    _instant: InstantHold,
}

/// How many permits the keys due at each instant hold.
struct Instants {
    cap: usize,
    held: Mutex<HashMap<i64, usize>>,
}

/// One key's count at its instant; given back when dropped.
struct InstantHold {
    instants: Arc<Instants>,
    at: i64,
}

impl Instants {
    fn take(self: &Arc<Self>, at: Timestamp) -> Option<InstantHold> {
        let at = at.as_millis();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(at).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(InstantHold {
            instants: self.clone(),
            at,
        })
    }
}

impl Drop for InstantHold {
    fn drop(&mut self) {
        let mut held = self.instants.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                // Only instants with keys in flight are kept: the map is bounded by the permits.
                held.remove(&self.at);
            }
        }
    }
}

impl Permits {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        let cap = backlog_cap(max);
        Arc::new(Self {
            all: Arc::new(Semaphore::new(max)),
            backlog: Arc::new(Semaphore::new(cap)),
            instants: Arc::new(Instants {
                cap,
                held: Mutex::new(HashMap::new()),
            }),
            max,
        })
    }

    /// A permit for a key due at `at`, if there is room for a key on time, or for a
    /// backlog's key, and its instant holds less than its share.
    pub(crate) fn try_take(&self, on_time: bool, at: Timestamp) -> Option<Permit> {
        let instant = self.instants.take(at)?;
        let backlog = if on_time {
            None
        } else {
            Some(self.backlog.clone().try_acquire_owned().ok()?)
        };
        let all = self.all.clone().try_acquire_owned().ok()?;
        Some(Permit {
            _all: all,
            _backlog: backlog,
            _instant: instant,
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

/// How many of `max` permits a backlog, or one instant, may hold: [`BACKLOG_SHARE`], at
/// least one.
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

    /// Permits for keys each due at an instant of its own, from `at` on.
    fn take_all(permits: &Permits, on_time: bool, at: &mut i64) -> Vec<Permit> {
        std::iter::from_fn(|| {
            *at += 1;
            permits.try_take(on_time, Timestamp::from_millis(*at))
        })
        .collect()
    }

    #[test]
    fn a_backlog_holds_a_quarter_of_the_permits_and_keys_on_time_the_rest() {
        let permits = Permits::new(8);
        let mut at = 0;
        let backlog = take_all(&permits, false, &mut at);
        assert_eq!(backlog.len(), 2);
        let on_time = take_all(&permits, true, &mut at);
        assert_eq!(on_time.len(), 6);
        assert_eq!(permits.in_flight(), 8);
        drop(backlog);
        assert_eq!(permits.available(), 2);
    }

    #[test]
    fn keys_on_time_may_take_every_permit() {
        let permits = Permits::new(4);
        let mut at = 0;
        let on_time = take_all(&permits, true, &mut at);
        assert_eq!(on_time.len(), 4);
        assert!(
            permits
                .try_take(false, Timestamp::from_millis(at + 1))
                .is_none()
        );
    }

    #[test]
    fn the_keys_of_one_instant_hold_a_quarter_of_the_permits_on_time_or_not() {
        let permits = Permits::new(8);
        let burst = Timestamp::from_millis(1_000);
        let first: Vec<Permit> = std::iter::from_fn(|| permits.try_take(true, burst)).collect();
        assert_eq!(first.len(), 2, "on time");
        assert!(permits.try_take(false, burst).is_none(), "nor as a backlog");
        // Keys due at other instants find the rest.
        let mut at = 1_000;
        let others = take_all(&permits, true, &mut at);
        assert_eq!(others.len(), 6);
        drop(first);
        assert!(
            permits.try_take(false, burst).is_some(),
            "given back when done"
        );
        drop(others);
        assert!(
            permits.instants.held.lock().unwrap().is_empty(),
            "instants without keys in flight are forgotten"
        );
    }

    #[test]
    fn one_permit_serves_a_backlog_too() {
        assert_eq!(backlog_cap(1), 1);
        assert_eq!(backlog_cap(2), 1);
        assert_eq!(backlog_cap(1024), 256);
    }
}
