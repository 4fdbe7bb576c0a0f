//! The timers an executor fires for, kept between claims. Every change to a timer (update,
//! enable, disable, delete) bumps its version, and every claim reports the timer's version
//! at that moment: a timer cached at that version is exactly the stored one. So most claims
//! read no timer at all; reading and parsing each batch's timers (spec JSON, cron, URL)
//! was a statement per claim and a good share of the executor's work per firing. Only
//! timers that fire often are kept ([`KEEP_IF_NEXT_WITHIN`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{Timer, TimerId, Timestamp};

/// Only timers that fire again within this are kept: those are read again soonest, and a
/// population of daily timers (each fired once a day) would only push them out.
pub(crate) const KEEP_IF_NEXT_WITHIN: Duration = Duration::from_secs(30);

/// Whether `timer` fires again within [`KEEP_IF_NEXT_WITHIN`] after `now`.
pub(crate) fn fires_soon(timer: &Timer, now: Timestamp) -> bool {
    let from = now.add_millis(1);
    timer
        .spec
        .schedule
        .occurrences_between(from, now.saturating_add(KEEP_IF_NEXT_WITHIN))
        .next()
        .is_some()
}

pub(crate) struct TimerCache {
    held: Mutex<HashMap<TimerId, Arc<Timer>>>,
    capacity: usize,
}

impl TimerCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// The cached timers among `ids`, and the ids not cached.
    pub(crate) fn lookup(&self, ids: &[TimerId]) -> (HashMap<TimerId, Arc<Timer>>, Vec<TimerId>) {
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            match held.get(id) {
                Some(t) => {
                    found.insert(*id, t.clone());
                }
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// Keeps `timers`, replacing older copies. When full, half the entries go (whichever
    /// the map yields first): memory stays bounded, and timers that fire often come back
    /// on their next claim.
    pub(crate) fn keep<'a>(&self, timers: impl IntoIterator<Item = &'a Arc<Timer>>) {
        if self.capacity == 0 {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for t in timers {
            if held.len() >= self.capacity && !held.contains_key(&t.id) {
                let mut drop = held.len() / 2;
                held.retain(|_, _| {
                    let keep = drop == 0;
                    drop = drop.saturating_sub(1);
                    keep
                });
            }
            held.insert(t.id, t.clone());
        }
    }

    /// Forgets `ids` (their timers changed or are gone).
    pub(crate) fn forget(&self, ids: &[TimerId]) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            held.remove(id);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(id: i64) -> Arc<Timer> {
        let now = chime_domain::Timestamp::from_millis(0);
        let every = chime_domain::ScheduleInput {
            every: Some("1h".into()),
            ..Default::default()
        };
        Arc::new(Timer {
            id: TimerId::new(id).unwrap(),
            spec: chime_storage::contract::spec_with("ops", &format!("t{id}"), &every, now),
            enabled: true,
            version: 1,
            bucket: chime_domain::Bucket::from_stored(0),
            created_at: now,
            updated_at: now,
            deleted_at: None,
            paused: None,
            written_ahead: true,
        })
    }

    #[test]
    fn only_timers_firing_again_soon_are_worth_keeping() {
        let now = chime_domain::Timestamp::from_millis(1_800_000_000_000);
        let mut every_second = (*timer(1)).clone();
        every_second.spec.schedule = chime_domain::ScheduleInput {
            every: Some("1s".into()),
            ..Default::default()
        }
        .resolve(now, None, None)
        .unwrap();
        assert!(fires_soon(&every_second, now));
        // Hourly.
        assert!(!fires_soon(&timer(2), now.add_millis(1_000)));
    }

    #[test]
    fn keeps_at_most_its_capacity_and_forgets_on_request() {
        let cache = TimerCache::new(10);
        let timers: Vec<_> = (1..=25).map(timer).collect();
        cache.keep(&timers);
        assert!(cache.len() <= 10, "{}", cache.len());
        let ids: Vec<TimerId> = (1..=25).map(|i| TimerId::new(i).unwrap()).collect();
        let (found, missing) = cache.lookup(&ids);
        assert_eq!(found.len() + missing.len(), 25);
        assert!(
            found.contains_key(&TimerId::new(25).unwrap()),
            "the latest is kept"
        );
        cache.forget(&[TimerId::new(25).unwrap()]);
        assert!(cache.lookup(&ids[24..]).0.is_empty());
        let none = TimerCache::new(0);
        none.keep(&timers);
        assert_eq!(none.len(), 0);
    }
}
