//! One shard's round of hand-offs: its due members split into keys on time and its
//! backlog, offered batch by batch at their instants, and what executors refuse put back.

use std::collections::VecDeque;

use chime_domain::{BURST_KEYS, Backlog, ShardKey, TaskKey, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::Scheduler;
use crate::shard::{Member, ShardReader};

/// How one round of hand-offs from a shard ended.
pub(crate) struct Round {
    /// Executors refused keys and the round ended before they were taken: they went back
    /// into the shard, which is read again at once.
    pub(crate) refused: bool,
    /// Every member read was handed off.
    pub(crate) drained: bool,
}

/// What a shard's worker keeps from one round of hand-offs to the next.
pub(crate) struct Offers {
    /// Hand-offs in a row that every executor refused outright: each doubles the wait
    /// before the next offer, up to a poll, so executors saturated for long are not
    /// flooded with offers (nor Redis with the refused going back and forth).
    full_refusals: u32,
    /// The shard's backlog, fixed when found.
    backlog: Backlog,
    /// Backlog keys per hand-off, at most: twice what executors took of the last offer's
    /// when they refused some (at least [`MIN_WINDOW`]), doubled when they took it all.
    /// An executor takes a backlog only into its share of room, which a drain keeps
    /// taken: offering a whole batch each time had executors refuse many times a burst's
    /// keys, each removed from Redis, sent, and put back.
    window: usize,
}

/// The fewest backlog keys a hand-off offers. A drain keeps executors' backlog room taken,
/// so most such offers probe a full executor, and each key refused is taken out of Redis,
/// sent to every replica and put back, so small probes refuse fewer keys in a burst than
/// large ones. A shard whose window is taken whole doubles it.
const MIN_WINDOW: usize = 4;

impl Offers {
    pub(crate) fn new(batch: usize) -> Self {
        Self {
            full_refusals: 0,
            backlog: Backlog::default(),
            window: batch.max(1),
        }
    }

    /// Sizes the next offer's backlog after executors took `taken` of `offered` backlog
    /// keys.
    fn backlog_taken(&mut self, taken: usize, offered: usize, batch: usize) {
        self.window = if taken < offered {
            (taken * 2).clamp(MIN_WINDOW, batch.max(MIN_WINDOW))
        } else if offered == self.window {
            (self.window * 2).min(batch.max(1))
        } else {
            self.window
        };
    }
}

/// One hand-off's members: the first `on_time` on time, the rest a backlog.
struct Ordered<'a> {
    members: &'a [Member],
    on_time: usize,
    /// When the shard's next key on time, not in this batch, is to be handed off.
    next_on_time: Option<Timestamp>,
}

/// The members of one hand-off executors did not take, put back into the shard.
#[derive(Default)]
struct Refused {
    on_time: Vec<Member>,
    backlog: Vec<Member>,
}

impl Scheduler {
    /// Hands `due` off batch by batch, each when its first member is `dispatch_ahead` from
    /// due, until the next poll. Members of the shard's backlog ([`Backlog`]: those over
    /// [`chime_domain::BACKLOG_AFTER`] late when it was found; those due later than their
    /// run time; a burst's, [`BURST_KEYS`]) go at once, but behind the members on time:
    /// each batch takes those due within the hand-off window first and fills up with the
    /// backlog, so a burst's backlog delays only itself. What executors refuse is offered
    /// again from memory after a back-off, until the next poll: reading the shard again
    /// after each refusal read a whole burst's members from Redis every few milliseconds.
    pub(crate) async fn dispatch(
        &self,
        shard: ShardKey,
        due: &[Member],
        poll_until: Timestamp,
        reader: &mut ShardReader,
        offers: &mut Offers,
        stop: &CancellationToken,
    ) -> Round {
        let s = self.settings;
        let ahead = i64::try_from(s.dispatch_ahead.as_millis()).unwrap_or(0);
        let every = s.handoff_every.min(s.dispatch_ahead / 2);
        let mut earliest = self.clock.now();
        // `due` is in due order: the backlog is its front, and then the keys due later than
        // their run time (handed back by a full executor, or retries), each in its turn.
        let boundary = offers
            .backlog
            .boundary(due.first().map(|(_, d)| *d), earliest);
        let split = due.partition_point(|(_, d)| boundary.is_some_and(|b| *d <= b));
        let (pile, rest) = due.split_at(split);
        let (later, timely): (Vec<Member>, Vec<Member>) =
            rest.iter().partition(|(k, d)| k.run_at < *d);
        let (burst, timely) = bursts(timely);
        let mut later: Vec<Member> = later.into_iter().chain(burst).collect();
        later.sort_by_key(|(_, d)| *d);
        let mut backlog: VecDeque<Member> = pile.iter().copied().chain(later).collect();
        let mut timely: VecDeque<Member> = timely.into();
        let grid = i64::try_from(every.as_millis()).unwrap_or(0).max(1);
        let mut refused = false;
        while let Some(first_due) = [backlog.front(), timely.front()]
            .into_iter()
            .flatten()
            .map(|(_, d)| *d)
            .min()
        {
            let mut send_at = first_due.add_millis(-ahead).max(earliest);
            if send_at > self.clock.now() {
                // On a grid every shard shares, so this replica's shards hand off on the
                // same tick and their keys travel in one call (`handoff::Merged`).
                let ms = send_at.as_millis();
                send_at = Timestamp::from_millis(ms + (grid - ms.rem_euclid(grid)) % grid);
            }
            if send_at > poll_until || !self.pause_until(send_at, stop).await {
                break;
            }
            let now = self.clock.now();
            let horizon = now.add_millis(ahead);
            let on_time = timely
                .iter()
                .take(s.batch)
                .take_while(|(_, d)| *d <= horizon)
                .count();
            let room = (s.batch - on_time).min(offers.window);
            let late = backlog
                .iter()
                .take(room)
                .take_while(|(_, d)| *d <= horizon)
                .count();
            let batch: Vec<Member> = timely
                .drain(..on_time)
                .chain(backlog.drain(..late))
                .collect();
            // A full batch, or a full window of backlog, leaves keys already in the window:
            // those go at once.
            earliest = if batch.len() == s.batch || (late > 0 && late == room) {
                now
            } else {
                now.saturating_add(every)
            };
            // A refused batch waits before the next offer, but not past the next key on time.
            let next_on_time = timely.front().map(|(_, d)| d.add_millis(-ahead));
            let ordered = Ordered {
                members: &batch,
                on_time,
                next_on_time,
            };
            let back = self
                .hand_off_batch(shard, ordered, now, reader, offers, stop)
                .await;
            offers.backlog_taken(late - back.backlog.len(), late, s.batch);
            refused = !back.on_time.is_empty() || !back.backlog.is_empty();
            if refused {
                // Offered again first, in due order, once the back-off is over.
                for m in back.on_time.into_iter().rev() {
                    timely.push_front(m);
                }
                for m in back.backlog.into_iter().rev() {
                    backlog.push_front(m);
                }
                earliest = self.clock.now();
            }
        }
        Round {
            refused,
            drained: timely.is_empty() && backlog.is_empty(),
        }
    }

    /// Hands one batch to executors. Members overdue beyond the misfire threshold are left
    /// to the sweeper; the rest are taken out of the shard and offered, and what executors
    /// refuse goes back, after a back-off. Returns the members refused.
    async fn hand_off_batch(
        &self,
        shard: ShardKey,
        batch: Ordered<'_>,
        now: Timestamp,
        reader: &mut ShardReader,
        offers: &mut Offers,
        stop: &CancellationToken,
    ) -> Refused {
        let s = self.settings;
        // Members overdue beyond the misfire threshold (this shard was not worked for a
        // while) are the sweeper's: it applies the timers' misfire policies.
        let misfired_before = now.saturating_sub(s.misfire_threshold);
        let (late, due): (Vec<_>, Vec<_>) = batch
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, i < batch.on_time))
            .partition(|((_, d), _)| *d < misfired_before);
        if !late.is_empty() {
            let late: Vec<TaskKey> = late.iter().map(|((k, _), _)| *k).collect();
            tracing::info!(%shard, misfired = late.len(), "leaving misfired members to the sweeper");
            if let Err(e) = reader.forget(&late).await {
                tracing::warn!(%shard, error = %e, "cannot remove misfired members");
            }
        }
        let keys: Vec<TaskKey> = due.iter().map(|((k, _), _)| *k).collect();
        // Removed before the hand-off, not after: an executor may fail a callback and put
        // its retry back into this shard before a later removal would run, which would then
        // delete the retry. If this process dies in between, the occurrences are still
        // pending in the database, for the sweeper.
        if let Err(e) = reader.forget(&keys).await {
            tracing::warn!(%shard, error = %e, "cannot remove members before handing them off");
        }
        let on_time = due.iter().take_while(|(_, timely)| *timely).count();
        let accepted = self.handoff.hand_off_ordered(&keys, on_time).await;
        for ((_, d), _) in &due[..accepted] {
            let late = (now.as_millis() - d.as_millis()).max(0);
            metrics::histogram!("chime_scheduler_handoff_lateness_seconds")
                .record(late as f64 / 1000.0);
        }
        metrics::counter!("chime_scheduler_handed_off_total").increment(accepted as u64);
        if accepted == keys.len() {
            offers.full_refusals = 0;
            return Refused::default();
        }
        // Never dropped: the refused go back into the shard and are offered again.
        let (on_time, backlog): (Vec<_>, Vec<_>) =
            due[accepted..].iter().partition(|(_, timely)| *timely);
        let back = Refused {
            on_time: on_time.into_iter().map(|(m, _)| m).collect(),
            backlog: backlog.into_iter().map(|(m, _)| m).collect(),
        };
        let members: Vec<Member> = due[accepted..].iter().map(|(m, _)| *m).collect();
        if let Err(e) = reader.restore(&members).await {
            tracing::warn!(%shard, error = %e, "cannot put refused members back; the sweeper will find them");
        }
        let refused = keys.len() - accepted;
        metrics::counter!("chime_scheduler_handoff_deferred_total").increment(refused as u64);
        if accepted > 0 {
            offers.full_refusals = 0;
        }
        let wait = s
            .refused_retry
            .saturating_mul(1 << offers.full_refusals.min(16))
            .min(s.poll);
        if accepted == 0 {
            offers.full_refusals += 1;
        }
        if wait == s.poll {
            // Full and unreachable look alike from here: `handoff_refused_total` has the reason.
            tracing::warn!(%shard, refused, "no executor took the keys (every one full, or none reachable); retrying");
        } else {
            tracing::debug!(%shard, refused, "executors refused keys; retrying");
        }
        let now = self.clock.now();
        let mut until = now.saturating_add(wait);
        // Woken early for a key on time still to come, not for one already in the window
        // (more than a batch on time): offering again at once would flood full executors.
        if let Some(next) = batch.next_on_time.filter(|next| *next > now) {
            until = until.min(next);
        }
        self.pause_until(until, stop).await;
        back
    }
}

/// Splits members in due order into those due at a burst's instant (more than
/// [`BURST_KEYS`] due at it) and the rest, each in due order.
fn bursts(members: Vec<Member>) -> (Vec<Member>, Vec<Member>) {
    let (mut burst, mut rest) = (Vec::new(), Vec::with_capacity(members.len()));
    for instant in members.chunk_by(|(_, a), (_, b)| a == b) {
        if instant.len() > BURST_KEYS {
            burst.extend_from_slice(instant);
        } else {
            rest.extend_from_slice(instant);
        }
    }
    (burst, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::TimerId;

    fn members(at: i64, n: i64, first_id: i64) -> Vec<Member> {
        (first_id..first_id + n)
            .map(|i| {
                let due = Timestamp::from_millis(at);
                (TaskKey::new(TimerId::new(i).unwrap(), due), due)
            })
            .collect()
    }

    #[test]
    fn an_instant_with_more_than_a_few_dozen_keys_is_a_burst() {
        let n = BURST_KEYS as i64;
        let due = [
            members(10, 3, 1),
            members(20, n + 1, 100),
            members(21, n, 1_000),
            members(30, 1, 2_000),
        ]
        .concat();
        let (burst, rest) = bursts(due);
        assert_eq!(burst, members(20, n + 1, 100));
        assert_eq!(
            rest,
            [
                members(10, 3, 1),
                members(21, n, 1_000),
                members(30, 1, 2_000)
            ]
            .concat()
        );
    }
}
