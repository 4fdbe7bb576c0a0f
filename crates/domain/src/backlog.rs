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

#[cfg(test)]
mod tests {
    use super::*;

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
