//! What an accepted key holds and where it waits for its claim.
//!
//! Every accepted key holds one in-flight permit until its outcome is written. A backlog's
//! keys (as the scheduler tells them apart, `chime_domain::Backlog`, or over
//! [`chime_domain::BACKLOG_AFTER`] late) may hold at most [`BACKLOG_SHARE`] of them: a burst
//! that fills an executor leaves room for the keys falling due meanwhile. Without that room
//! they were refused and offered again after a back-off, late. A quarter, not more: a drain
//! is CPU-bound, so more of it in flight only queues longer, and every key in flight,
//! on time or not, waits in the same queues (the beside-burst benchmark shows it).
//!
//! The keys due at any one instant may hold that share too, on time or not: a burst due at
//! one instant is on time only while its first keys are offered, and those took every
//! permit, so the keys falling due just after it waited for them.
//! An instant is a millisecond, as bursts come (a cron's minute, one-shots set for the same
//! moment); one-shots spread over a few milliseconds are not held back by it.
//!
//! A backlog's keys claimed before their instant (a burst's, handed off ahead of due) hold
//! less: [`AHEAD_SHARE`]. They all start their callbacks at the instant, and every key due
//! in the next few dozen milliseconds waited behind that herd. The rest of the burst follows as room frees, spread
//! over its drain.
//!
//! These shares are for a backlog beside keys on time. A backlog alone (no key on time came
//! for [`QUIET`]: a burst of one-shots, a cron's minute with nothing else due) may hold
//! [`ALONE_SHARE`] at once, at its instant or before it: held to a quarter, a lone burst
//! drained far slower, its keys refused and offered again over and over while the
//! cores had room. The rest stays free for the first keys on time, and from the moment one
//! comes the backlog is held to its shares again as its keys finish.
//!
//! Keys on time wait in a claim queue of their own, claimed by a loop of their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::Timestamp;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::Job;

/// The share of an executor's in-flight permits a backlog may hold (numerator, denominator),
/// and so may the keys due at any one instant.
pub const BACKLOG_SHARE: (usize, usize) = (1, 4);

/// The share of an executor's in-flight permits a backlog's keys due at one instant may
/// hold before that instant.
pub const AHEAD_SHARE: (usize, usize) = (1, 16);

/// The share a backlog may hold, and the keys of one instant, while no key on time came
/// for [`QUIET`].
pub const ALONE_SHARE: (usize, usize) = (3, 4);

/// How long after the last key on time a backlog is alone.
pub const QUIET: Duration = Duration::from_secs(1);

/// The in-flight permits of one executor.
pub(crate) struct Permits {
    all: Arc<Semaphore>,
    /// As many as a backlog alone may hold; beside keys on time it may use only
    /// `backlog_beside` of them.
    backlog: Arc<Semaphore>,
    backlog_alone: usize,
    backlog_beside: usize,
    instants: Arc<Instants>,
    /// Unix ms when the last key on time asked for a permit.
    last_on_time: AtomicI64,
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
    /// The cap of a backlog's keys before their instant.
    ahead: usize,
    /// Both caps while a backlog is alone.
    alone: usize,
    held: Mutex<HashMap<i64, usize>>,
}

/// One key's count at its instant; given back when dropped.
struct InstantHold {
    instants: Arc<Instants>,
    at: i64,
}

impl Instants {
    /// A count at `at`, for a key of a backlog due later than `now` when `ahead`.
    fn take(self: &Arc<Self>, at: Timestamp, ahead: bool, alone: bool) -> Option<InstantHold> {
        let cap = match (alone, ahead) {
            (true, _) => self.alone,
            (false, true) => self.ahead,
            (false, false) => self.cap,
        };
        let at = at.as_millis();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(at).or_insert(0);
        if *n >= cap {
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
        let alone = share(max, ALONE_SHARE).max(cap);
        Arc::new(Self {
            all: Arc::new(Semaphore::new(max)),
            backlog: Arc::new(Semaphore::new(alone)),
            backlog_alone: alone,
            backlog_beside: cap,
            instants: Arc::new(Instants {
                cap,
                ahead: share(max, AHEAD_SHARE),
                alone,
                held: Mutex::new(HashMap::new()),
            }),
            last_on_time: AtomicI64::new(i64::MIN),
            max,
        })
    }

    /// A permit for a key due at `at`, if there is room for a key on time, or for a
    /// backlog's key, and its instant holds less than its share (at `now`).
    pub(crate) fn try_take(&self, on_time: bool, at: Timestamp, now: Timestamp) -> Option<Permit> {
        if on_time {
            self.last_on_time
                .fetch_max(now.as_millis(), Ordering::Relaxed);
        }
        let quiet = i64::try_from(QUIET.as_millis()).unwrap_or(i64::MAX);
        let alone = now
            .as_millis()
            .saturating_sub(self.last_on_time.load(Ordering::Relaxed))
            >= quiet;
        let instant = self.instants.take(at, !on_time && at > now, alone)?;
        let backlog = if on_time {
            None
        } else {
            let held = self.backlog_alone - self.backlog.available_permits();
            if !alone && held >= self.backlog_beside {
                return None;
            }
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
    share(max, BACKLOG_SHARE)
}

/// `(n, d)` of `max` permits, at least one.
fn share(max: usize, (n, d): (usize, usize)) -> usize {
    (max * n / d).clamp(1, max.max(1))
}

/// The two claim queues.
#[derive(Clone)]
pub(crate) struct Lanes {
    /// Keys on time: claimed beside `backlog`, never behind it.
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

    /// A moment after every instant these tests take permits for.
    fn later() -> Timestamp {
        Timestamp::from_millis(1_000_000)
    }

    /// Permits for keys each due at an instant of its own, from `at` on.
    fn take_all(permits: &Permits, on_time: bool, at: &mut i64) -> Vec<Permit> {
        std::iter::from_fn(|| {
            *at += 1;
            permits.try_take(on_time, Timestamp::from_millis(*at), later())
        })
        .collect()
    }

    /// Permits that saw a key on time just now: a backlog is beside keys on time.
    fn beside(max: usize) -> Arc<Permits> {
        let permits = Permits::new(max);
        let p = permits.try_take(true, Timestamp::from_millis(0), later());
        drop(p);
        permits
    }

    #[test]
    fn a_backlog_holds_a_quarter_of_the_permits_and_keys_on_time_the_rest() {
        let permits = beside(8);
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
                .try_take(false, Timestamp::from_millis(at + 1), later())
                .is_none()
        );
    }

    #[test]
    fn the_keys_of_one_instant_hold_a_quarter_of_the_permits_on_time_or_not() {
        let permits = beside(8);
        let burst = Timestamp::from_millis(1_000);
        let first: Vec<Permit> =
            std::iter::from_fn(|| permits.try_take(true, burst, later())).collect();
        assert_eq!(first.len(), 2, "on time");
        assert!(
            permits.try_take(false, burst, later()).is_none(),
            "nor as a backlog"
        );
        // Keys due at other instants find the rest.
        let mut at = 1_000;
        let others = take_all(&permits, true, &mut at);
        assert_eq!(others.len(), 6);
        drop(first);
        assert!(
            permits.try_take(false, burst, later()).is_some(),
            "given back when done"
        );
        drop(others);
        assert!(
            permits.instants.held.lock().unwrap().is_empty(),
            "instants without keys in flight are forgotten"
        );
    }

    #[test]
    fn a_backlog_holds_a_sixteenth_of_the_permits_at_one_instant_before_it() {
        let permits = Permits::new(32);
        let (burst, before) = (Timestamp::from_millis(1_000), Timestamp::from_millis(900));
        drop(permits.try_take(true, Timestamp::from_millis(10), before));
        let ahead: Vec<Permit> =
            std::iter::from_fn(|| permits.try_take(false, burst, before)).collect();
        assert_eq!(ahead.len(), 2, "a sixteenth before the instant");
        let on_time = permits.try_take(true, burst, before);
        assert!(on_time.is_some(), "keys on time keep their share");
        let from_it: Vec<Permit> =
            std::iter::from_fn(|| permits.try_take(false, burst, burst)).collect();
        assert_eq!(from_it.len(), 5, "a quarter in all from the instant on");
    }

    #[test]
    fn a_backlog_alone_holds_three_quarters_until_a_key_on_time_comes() {
        let permits = Permits::new(16);
        let burst = Timestamp::from_millis(2_000);
        let before = Timestamp::from_millis(1_900);
        let ahead: Vec<Permit> =
            std::iter::from_fn(|| permits.try_take(false, burst, before)).collect();
        assert_eq!(ahead.len(), 12, "three quarters, before its instant too");
        // The rest is there for keys on time…
        let on_time = permits.try_take(true, Timestamp::from_millis(1_950), before);
        assert!(on_time.is_some());
        // …and from the first of them the backlog is held to its shares again: it holds
        // more than a quarter already, so it takes nothing more.
        assert!(permits.try_take(false, burst, burst).is_none());
        drop(ahead);
        let beside: Vec<Permit> =
            std::iter::from_fn(|| permits.try_take(false, burst, burst)).collect();
        assert_eq!(beside.len(), 4, "a quarter beside keys on time");
        // Alone again once no key on time came for a while.
        let quiet = burst.saturating_add(QUIET);
        let more = permits.try_take(false, Timestamp::from_millis(5_000), quiet);
        assert!(more.is_some());
    }

    #[test]
    fn one_permit_serves_a_backlog_too() {
        assert_eq!(backlog_cap(1), 1);
        assert_eq!(backlog_cap(2), 1);
        assert_eq!(backlog_cap(1024), 256);
    }
}
