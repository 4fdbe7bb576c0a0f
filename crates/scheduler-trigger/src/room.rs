//! How much of a backlog a scheduler offers at once: no more than its share of the room
//! executors report for one.
//!
//! A backlog (a burst's keys, those handed back, retries) was offered whole, and executors
//! took what their backlog share had room for and refused the rest, which went back into
//! Redis to be read, offered and refused again: a 20,000 burst had executors refuse 30,000
//! to 50,000 offers, and schedulers put 13,000 to 21,000 keys back, each costing Redis and
//! both processes CPU that the drain needed. Asking first costs one small call per replica
//! at most every [`FRESH`], whatever the number of shards, and keeps the keys that would
//! be refused in Redis, untouched.
//!
//! Schedulers share the executors: each takes its share of the room reported (the room
//! divided by the live schedulers), so together they offer what is free, not a multiple of
//! it. Room freed meanwhile waits for the next ask, at most [`FRESH`] later.

use std::time::Duration;

use chime_domain::Timestamp;

use crate::handoff::Handoff;

/// How long the room executors reported is used before asking again.
pub(crate) const FRESH: Duration = Duration::from_millis(10);

/// This replica's share of the executors' room for a backlog, as last reported.
#[derive(Default)]
pub(crate) struct BacklogRoom {
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Keys still to offer from the last report; `None`: executors do not say (an older
    /// version), so a backlog is offered whole.
    left: Option<usize>,
    /// When the last report goes stale; `None` before the first.
    until: Option<Timestamp>,
}

impl BacklogRoom {
    /// Takes up to `want` keys' room from this replica's share, asking `executors` again
    /// once the last report is stale (at `now`). `schedulers`: how many replicas share the
    /// executors.
    pub(crate) async fn take(
        &self,
        want: usize,
        executors: &dyn Handoff,
        now: Timestamp,
        schedulers: impl FnOnce() -> usize,
    ) -> usize {
        if want == 0 {
            return 0;
        }
        // Held while asking: shards finding the report stale at once wait for one ask.
        let mut state = self.state.lock().await;
        if state.until.is_none_or(|until| now >= until) {
            let share = schedulers().max(1);
            state.left = executors
                .backlog_room()
                .await
                .map(|room| room.div_ceil(share));
            state.until = Some(now.saturating_add(FRESH));
        }
        match &mut state.left {
            None => want,
            Some(left) => {
                let n = want.min(*left);
                *left -= n;
                n
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use chime_domain::TaskKey;
    use std::sync::Mutex;

    /// Reports the room it is set to, and counts the asks.
    struct Reporting {
        room: Mutex<Option<usize>>,
        asks: Mutex<usize>,
    }

    #[async_trait]
    impl Handoff for Reporting {
        async fn hand_off(&self, keys: &[TaskKey]) -> usize {
            keys.len()
        }

        async fn backlog_room(&self) -> Option<usize> {
            *self.asks.lock().unwrap() += 1;
            *self.room.lock().unwrap()
        }
    }

    fn reporting(room: Option<usize>) -> Reporting {
        Reporting {
            room: Mutex::new(room),
            asks: Mutex::new(0),
        }
    }

    #[tokio::test]
    async fn offers_take_this_replicas_share_of_the_room_until_it_is_stale() {
        let executors = reporting(Some(101));
        let room = BacklogRoom::default();
        let t0 = Timestamp::from_millis(1_000);
        // Two schedulers: 51 of 101 here.
        assert_eq!(room.take(40, &executors, t0, || 2).await, 40);
        assert_eq!(room.take(40, &executors, t0.add_millis(5), || 2).await, 11);
        assert_eq!(room.take(40, &executors, t0.add_millis(9), || 2).await, 0);
        assert_eq!(*executors.asks.lock().unwrap(), 1, "one ask while fresh");
        *executors.room.lock().unwrap() = Some(30);
        let fresh = t0.saturating_add(FRESH);
        assert_eq!(room.take(40, &executors, fresh, || 1).await, 30);
        assert_eq!(*executors.asks.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn executors_that_do_not_say_take_the_whole_offer() {
        let executors = reporting(None);
        let room = BacklogRoom::default();
        let t0 = Timestamp::from_millis(1_000);
        assert_eq!(room.take(500, &executors, t0, || 2).await, 500);
        assert_eq!(room.take(0, &executors, t0, || 2).await, 0);
    }
}
