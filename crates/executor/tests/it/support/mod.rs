//! A timer and a claimed occurrence of it, for the delivery-target tests.

pub mod counting;
pub mod pg;
pub mod timers;

use chime_domain::{CallbackInput, ClaimedOccurrence, Clock, SystemClock, TaskKey, Timer};

/// An hourly timer of app `ops` delivering to `callback`.
pub fn timer(callback: CallbackInput) -> Timer {
    let now = SystemClock.now();
    let mut spec = chime_storage::contract::spec_every("ops", "target", "1h", now);
    spec.callback = callback.parse().unwrap();
    chime_storage::contract::unstored_timer(7, spec, now)
}

/// Its occurrence due now, claimed for a first attempt.
pub fn claimed(t: &Timer) -> ClaimedOccurrence {
    let now = SystemClock.now();
    ClaimedOccurrence {
        key: TaskKey::new(t.id, now),
        timer_version: 1,
        bucket: t.bucket,
        attempt: 1,
        due: now,
        backfill: false,
        parent: None,
        timer_now: Some(1),
        unwritten: None,
        leased: false,
    }
}
