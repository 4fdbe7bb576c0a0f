//! Keys on time and keys of a backlog. When more falls due than the pipeline can fire at once
//! (a burst, a minute's boundary of a large population), what is already late waits for what
//! is still on time: the schedulers offer keys on time first and executors claim them first,
//! so a backlog delays only itself, and every-second timers keep their second beside it.

use std::time::Duration;

use crate::Timestamp;

/// How far past due a key counts as part of a backlog: more than a hand-off's lead and a
/// claim's round trip, so keys handed off as usual never do.
pub const BACKLOG_AFTER: Duration = Duration::from_millis(250);

/// Whether a key due at `due` is part of a backlog at `now`.
pub fn in_backlog(due: Timestamp, now: Timestamp) -> bool {
    due < now.saturating_sub(BACKLOG_AFTER)
}

/// More keys than this due at one instant in one shard make that instant a burst: its keys
/// are a backlog from the start, handed off behind the keys due at other instants. On time,
/// a burst's keys went first in due order, and when executors took only part of them, the
/// keys due just after it were refused with the rest until the burst itself was a backlog,
/// and were late with it. Timers spread over the second share an instant by the handful at
/// most; a cron's minute or one-shots set for one moment share it by the thousand.
pub const BURST_KEYS: usize = 32;

/// How long a shard's backlog, once found, keeps its boundary (see [`Backlog`]).
pub const BACKLOG_HELD_FOR: Duration = Duration::from_secs(10);

/// One shard's backlog as its scheduler sees it: the keys already late when it was found.
///
/// A fixed threshold alone made a key refused while the executors were full of a burst's
/// first keys part of that burst's backlog once it was late, due after every key of the
/// burst: it waited for the whole burst to drain. So the
/// boundary is fixed when a backlog is found and kept until nothing due by it is left; keys
/// due after it stay ahead of it, late or not. Found at a look after one where nothing was
/// late, the backlog is what became late since: up to the earliest key's instant (a burst's),
/// or what was due [`BACKLOG_AFTER`] before that look, if later. Found at a shard's first
/// look, it is everything over [`BACKLOG_AFTER`] late. After [`BACKLOG_HELD_FOR`] it is found
/// again, so keys that fell behind under a longer overload join it in due order rather than
/// wait past it.
#[derive(Debug, Default, Clone)]
pub struct Backlog {
    /// The boundary (keys due up to it are the backlog) and when it was set.
    held: Option<(Timestamp, Timestamp)>,
    /// The previous look.
    looked: Option<Timestamp>,
}

impl Backlog {
    /// The boundary at `now` of a shard whose earliest key is due at `earliest`: keys due at
    /// or before it are the backlog. `None`: no backlog.
    pub fn boundary(&mut self, earliest: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
        if let Some((until, since)) = self.held {
            let drained = earliest.is_none_or(|e| e > until);
            let aged = now.saturating_sub(BACKLOG_HELD_FOR) > since;
            if drained || aged {
                self.held = None;
            }
        }
        if self.held.is_none()
            && let Some(e) = earliest
            && in_backlog(e, now)
        {
            let until = match self.looked {
                Some(before) => e.max(before.saturating_sub(BACKLOG_AFTER)),
                None => now.saturating_sub(BACKLOG_AFTER),
            };
            self.held = Some((until, now));
        }
        self.looked = Some(now);
        self.held.map(|(until, _)| until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn keys_due_after_a_burst_found_late_stay_ahead_of_it_while_it_drains() {
        let mut b = Backlog::default();
        assert_eq!(b.boundary(Some(at(10_000)), at(10_100)), None, "on time");
        // Found late 400 ms after the burst was due (the shard was backing off): the burst's
        // instant is the backlog, not the keys due 10,050-10,150, as late by now.
        assert_eq!(b.boundary(Some(at(10_000)), at(10_400)), Some(at(10_000)));
        // A second later a key due at 10,050 is 1.3 s late, but still ahead of it.
        assert_eq!(b.boundary(Some(at(10_000)), at(11_400)), Some(at(10_000)));
        // Drained: what became late since the last look forms the next backlog.
        assert_eq!(b.boundary(Some(at(10_050)), at(11_500)), Some(at(11_150)));
        assert_eq!(b.boundary(Some(at(12_000)), at(12_000)), None);
        assert_eq!(b.boundary(None, at(12_000)), None);
    }

    #[test]
    fn at_a_first_look_everything_late_is_the_backlog() {
        let mut b = Backlog::default();
        assert_eq!(b.boundary(Some(at(0)), at(1_000)), Some(at(750)));
    }

    #[test]
    fn a_backlog_held_too_long_takes_in_what_fell_late_since() {
        let mut b = Backlog::default();
        assert_eq!(b.boundary(Some(at(0)), at(1_000)), Some(at(750)));
        let later = 1_000 + BACKLOG_HELD_FOR.as_millis() as i64;
        assert_eq!(b.boundary(Some(at(0)), at(later)), Some(at(750)));
        assert_eq!(
            b.boundary(Some(at(0)), at(later + 1)),
            Some(at(later - 250))
        );
    }

    #[test]
    fn a_key_is_backlog_once_over_a_quarter_second_late() {
        let now = Timestamp::from_millis(10_000);
        assert!(!in_backlog(Timestamp::from_millis(10_500), now), "ahead");
        assert!(!in_backlog(now, now), "due now");
        assert!(
            !in_backlog(Timestamp::from_millis(9_750), now),
            "250 ms late"
        );
        assert!(
            in_backlog(Timestamp::from_millis(9_749), now),
            "251 ms late"
        );
    }
}
