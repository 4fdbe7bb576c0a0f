//! How far ahead a timer's occurrences are written: bounded by time and by count, so an
//! every-second timer holds a minute of rows and a daily one holds its next run.

use std::time::Duration;

use crate::{Schedule, TimerId, Timestamp};

/// The materialization horizon of every timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// Occurrences due before `now + lead` are written ahead of time.
    pub lead: Duration,
    /// At most this many occurrences are written per timer at once, whatever `lead` says.
    pub max_rows: usize,
    /// The most a timer's own horizon shortens the lead by (`of_timer`), capped at a quarter
    /// of the lead; zero gives every timer exactly `lead`.
    pub spread: Duration,
}

impl Horizon {
    /// The defaults of `[migrator]`: one minute, at most 100 rows, spread over 15 s.
    pub const DEFAULT: Self = Self {
        lead: Duration::from_secs(60),
        max_rows: 100,
        spread: Duration::from_secs(15),
    };

    /// `lead` and `max_rows` with the usual spread, a quarter of the lead.
    pub fn new(lead: Duration, max_rows: usize) -> Self {
        Self {
            lead,
            max_rows,
            spread: lead / 4,
        }
    }

    /// Timers whose watermark is before this are extended: half the lead, so a timer always
    /// has at least half the lead written.
    pub fn refill_before(&self, now: Timestamp) -> Timestamp {
        now.saturating_add(self.lead / 2)
    }

    /// Timer `id`'s own horizon: the lead shortened by a fixed amount below `spread`,
    /// different per timer. Timers created together then reach the refill point over the
    /// spread instead of all in one migrator pass, and keep drifting apart.
    pub fn of_timer(&self, id: TimerId) -> Self {
        let spread = self.spread.min(self.lead / 4).as_millis();
        let spread = u64::try_from(spread).unwrap_or(u64::MAX);
        if spread == 0 {
            return *self;
        }
        let cut = Duration::from_millis(mix(id.get() as u64) % spread);
        Self {
            lead: self.lead.saturating_sub(cut),
            ..*self
        }
    }
}

/// SplitMix64's finalizer: consecutive ids land far apart.
pub(crate) fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Default for Horizon {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The watermark of a timer whose schedule has no further fire time.
pub const EXHAUSTED: Timestamp = Timestamp::from_millis(i64::MAX);

/// What to write for one timer: its fire times from some instant on, and the new watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub runs: Vec<Timestamp>,
    /// Every fire time before this has a row: the first fire time not written, or
    /// [`EXHAUSTED`] when none follows.
    pub watermark: Timestamp,
}

impl Schedule {
    /// The fire times at or after `from` to write now: those due before `now + lead`, while
    /// fewer than `max_rows` are written ahead of `now` (counting those already written
    /// between `now` and `from`), and always the next one if none ahead is written yet (a
    /// daily timer holds its next run, a one-shot a year ahead its only one).
    pub fn plan(&self, from: Timestamp, now: Timestamp, horizon: Horizon) -> Plan {
        let until = now.saturating_add(horizon.lead);
        let max = horizon.max_rows.max(1);
        let mut ahead = if from > now {
            self.occurrences_between(now, from).take(max).count()
        } else {
            0
        };
        let mut runs = Vec::new();
        for at in self.occurrences_between(from, EXHAUSTED) {
            let wanted = if at < now {
                // Catching up on the recent past: bounded by the caller's `from`.
                true
            } else {
                ahead < max && (at < until || ahead == 0)
            };
            if !wanted {
                return Plan {
                    runs,
                    watermark: at,
                };
            }
            if at >= now {
                ahead += 1;
            }
            runs.push(at);
        }
        Plan {
            runs,
            watermark: EXHAUSTED,
        }
    }
}
