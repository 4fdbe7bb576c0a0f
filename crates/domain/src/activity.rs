//! Activity tallies: what the executors did per app and minute (attempts, their results, a
//! lateness histogram). Executors add to them as they record outcomes; the console's overview
//! reads them back, so an hour of activity costs a few rows per minute, not a scan of every
//! occurrence of that hour.

use crate::{AppName, OccurrenceStatus, Timestamp};

/// Upper bounds (ms, inclusive) of the lateness histogram's buckets; a last one holds the rest.
pub const LATENESS_BOUNDS_MS: [i64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];

/// Buckets of the lateness histogram: one per bound, and one past the last.
pub const LATENESS_BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

const MINUTE_MS: i64 = 60_000;

/// One app's activity in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub app: AppName,
    /// The minute's first instant.
    pub minute: Timestamp,
    pub counts: Counts,
}

/// Attempts of a minute and what became of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Callbacks attempted (skipped occurrences are not).
    pub fired: u64,
    pub succeeded: u64,
    /// Attempts that did not succeed: to be retried, failed for good, or dead.
    pub failed: u64,
    /// Attempts whose failure made the occurrence a dead letter.
    pub dead: u64,
    /// Attempts by lateness, in the buckets of [`LATENESS_BOUNDS_MS`].
    pub lateness: [u64; LATENESS_BUCKETS],
}

impl Counts {
    /// Counts one attempt's result; `lateness_ms` when it was measured.
    pub fn add(&mut self, status: OccurrenceStatus, lateness_ms: Option<i64>) {
        match status {
            OccurrenceStatus::Succeeded => self.succeeded += 1,
            OccurrenceStatus::Retrying | OccurrenceStatus::Failed => self.failed += 1,
            OccurrenceStatus::Dead => {
                self.failed += 1;
                self.dead += 1;
            }
            // Not an attempt: nothing was called.
            OccurrenceStatus::Pending | OccurrenceStatus::Running | OccurrenceStatus::Skipped => {
                return;
            }
        }
        self.fired += 1;
        if let Some(late) = lateness_ms {
            let bucket = LATENESS_BOUNDS_MS
                .iter()
                .position(|bound| late <= *bound)
                .unwrap_or(LATENESS_BUCKETS - 1);
            self.lateness[bucket] += 1;
        }
    }

    /// Adds another tally's counts (the same minute from another executor).
    pub fn merge(&mut self, other: &Counts) {
        self.fired += other.fired;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.dead += other.dead;
        for (mine, theirs) in self.lateness.iter_mut().zip(other.lateness) {
            *mine += theirs;
        }
    }

    /// The lateness below which a share `q` (0..=1) of the measured attempts fell, as the upper
    /// bound of the bucket that holds it (so an estimate from above, to a bucket's width);
    /// `None` when nothing was measured. The last bucket reports the largest bound.
    pub fn lateness_quantile_ms(&self, q: f64) -> Option<i64> {
        let total: u64 = self.lateness.iter().sum();
        if total == 0 {
            return None;
        }
        // The rank of the attempt asked for, 1-based.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.lateness.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(LATENESS_BOUNDS_MS[i.min(LATENESS_BOUNDS_MS.len() - 1)]);
            }
        }
        LATENESS_BOUNDS_MS.last().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.fired == 0
    }
}

/// The first instant of the minute `at` falls in.
pub fn minute_of(at: Timestamp) -> Timestamp {
    Timestamp::from_millis(at.as_millis().div_euclid(MINUTE_MS) * MINUTE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_fall_in_their_buckets_and_skips_are_not_attempts() {
        let mut c = Counts::default();
        c.add(OccurrenceStatus::Succeeded, Some(0));
        c.add(OccurrenceStatus::Succeeded, Some(3));
        c.add(OccurrenceStatus::Retrying, Some(70_000));
        c.add(OccurrenceStatus::Dead, None);
        c.add(OccurrenceStatus::Skipped, Some(1));
        assert_eq!((c.fired, c.succeeded, c.failed, c.dead), (4, 2, 2, 1));
        assert_eq!(c.lateness[0], 1);
        assert_eq!(c.lateness[2], 1);
        assert_eq!(c.lateness[LATENESS_BUCKETS - 1], 1);
    }

    #[test]
    fn quantiles_are_bucket_bounds() {
        let mut c = Counts::default();
        assert_eq!(c.lateness_quantile_ms(0.5), None);
        for _ in 0..98 {
            c.add(OccurrenceStatus::Succeeded, Some(4));
        }
        c.add(OccurrenceStatus::Succeeded, Some(150));
        c.add(OccurrenceStatus::Succeeded, Some(150));
        assert_eq!(c.lateness_quantile_ms(0.5), Some(5));
        assert_eq!(c.lateness_quantile_ms(0.98), Some(5));
        assert_eq!(c.lateness_quantile_ms(0.99), Some(200));
        let mut merged = Counts::default();
        merged.merge(&c);
        merged.merge(&c);
        assert_eq!(merged.fired, 200);
        assert_eq!(merged.lateness_quantile_ms(0.99), Some(200));
    }

    #[test]
    fn minutes_start_on_the_minute() {
        assert_eq!(
            minute_of(Timestamp::from_millis(125_999)),
            Timestamp::from_millis(120_000)
        );
    }
}
