//! One shard's round of hand-offs: its due members split into keys on time and its
//! backlog, offered batch by batch at their instants, and what executors refuse put back.

use chime_domain::{BURST_KEYS, Backlog, ShardKey, TaskKey, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::Scheduler;
use crate::shard::{Member, ShardReader};

/// How one round of hand-offs from a shard ended.
pub(crate) struct Round {
    /// Executors refused keys: they went back into the shard, which is read again at once.
    pub(crate) refused: bool,
    /// Every member read was handed off.
    pub(crate) drained: bool,
}

/// One hand-off's members: the first `on_time` on time, the rest a backlog.
struct Ordered<'a> {
    members: &'a [Member],
    on_time: usize,
    /// When the shard's next key on time, not in this batch, is to be handed off.
    next_on_time: Option<Timestamp>,
}

impl Scheduler {
    /// Hands `due` off batch by batch, each when its first member is `dispatch_ahead` from
    /// due, until the next poll. Members of the shard's backlog ([`Backlog`]: those over
    /// [`chime_domain::BACKLOG_AFTER`] late when it was found; those due later than their
    /// run time; a burst's, [`BURST_KEYS`]) go at once, but behind the members on time:
    /// each batch takes those due within the hand-off window first and fills up with the
    /// backlog, so a burst's backlog delays only itself.
    pub(crate) async fn dispatch(
        &self,
        shard: ShardKey,
        due: &[Member],
        poll_until: Timestamp,
        reader: &mut ShardReader,
        (full_refusals, backlog): (&mut u32, &mut Backlog),
        stop: &CancellationToken,
    ) -> Round {
        let s = self.settings;
        let ahead = i64::try_from(s.dispatch_ahead.as_millis()).unwrap_or(0);
        let every = s.handoff_every.min(s.dispatch_ahead / 2);
        let mut earliest = self.clock.now();
        // `due` is in due order: the backlog is its front, and then the keys due later than
        // their run time (handed back by a full executor, or retries), each in its turn.
        let boundary = backlog.boundary(due.first().map(|(_, d)| *d), earliest);
        let split = due.partition_point(|(_, d)| boundary.is_some_and(|b| *d <= b));
        let (pile, rest) = due.split_at(split);
        let (later, timely): (Vec<Member>, Vec<Member>) =
            rest.iter().partition(|(k, d)| k.run_at < *d);
        let (burst, timely) = bursts(timely);
        let mut later: Vec<Member> = later.into_iter().chain(burst).collect();
        later.sort_by_key(|(_, d)| *d);
        let backlog: Vec<Member> = pile.iter().copied().chain(later).collect();
        let (mut backlog, mut timely) = (&backlog[..], &timely[..]);
        let grid = i64::try_from(every.as_millis()).unwrap_or(0).max(1);
        while let Some(first_due) = [backlog.first(), timely.first()]
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
            let late = backlog
                .iter()
                .take(s.batch - on_time)
                .take_while(|(_, d)| *d <= horizon)
                .count();
            let batch: Vec<Member> = timely[..on_time]
                .iter()
                .chain(&backlog[..late])
                .copied()
                .collect();
            // A full batch leaves keys already in the window: those go at once.
            earliest = if batch.len() == s.batch {
                now
            } else {
                now.saturating_add(every)
            };
            // A refused batch waits before the next offer, but not past the next key on time.
            let next_on_time = timely.get(on_time).map(|(_, d)| d.add_millis(-ahead));
            let ordered = Ordered {
                members: &batch,
                on_time,
                next_on_time,
            };
            if !self
                .hand_off_batch(shard, ordered, now, reader, full_refusals, stop)
                .await
            {
                return Round {
                    refused: true,
                    drained: false,
                };
            }
            timely = &timely[on_time..];
            backlog = &backlog[late..];
        }
        Round {
            refused: false,
            drained: timely.is_empty() && backlog.is_empty(),
        }
    }

    /// Hands one batch to executors. Members overdue beyond the misfire threshold are left
    /// to the sweeper; the rest are taken out of the shard and offered, and what executors
    /// refuse goes back, after a back-off. Returns whether every key was accepted.
    async fn hand_off_batch(
        &self,
        shard: ShardKey,
        batch: Ordered<'_>,
        now: Timestamp,
        reader: &mut ShardReader,
        full_refusals: &mut u32,
        stop: &CancellationToken,
    ) -> bool {
        let s = self.settings;
        // Members overdue beyond the misfire threshold (this shard was not worked for a
        // while) are the sweeper's: it applies the timers' misfire policies.
        let misfired_before = now.saturating_sub(s.misfire_threshold);
        let (late, due): (Vec<Member>, Vec<Member>) = batch
            .members
            .iter()
            .partition(|(_, d)| *d < misfired_before);
        if !late.is_empty() {
            let late: Vec<TaskKey> = late.iter().map(|(k, _)| *k).collect();
            tracing::info!(%shard, misfired = late.len(), "leaving misfired members to the sweeper");
            if let Err(e) = reader.forget(&late).await {
                tracing::warn!(%shard, error = %e, "cannot remove misfired members");
            }
        }
        let keys: Vec<TaskKey> = due.iter().map(|(k, _)| *k).collect();
        // Removed before the hand-off, not after: an executor may fail a callback and put
        // its retry back into this shard before a later removal would run, which would then
        // delete the retry. If this process dies in between, the occurrences are still
        // pending in the database, for the sweeper.
        if let Err(e) = reader.forget(&keys).await {
            tracing::warn!(%shard, error = %e, "cannot remove members before handing them off");
        }
        // The misfired are all backlog: the first `on_time` members are still first.
        let on_time = batch.on_time.min(keys.len());
        let accepted = self.handoff.hand_off_ordered(&keys, on_time).await;
        for (_, d) in &due[..accepted] {
            let late = (now.as_millis() - d.as_millis()).max(0);
            metrics::histogram!("chime_scheduler_handoff_lateness_seconds")
                .record(late as f64 / 1000.0);
        }
        metrics::counter!("chime_scheduler_handed_off_total").increment(accepted as u64);
        if accepted == keys.len() {
            *full_refusals = 0;
            return true;
        }
        // Never dropped: the refused go back into the shard and are offered again.
        if let Err(e) = reader.restore(&due[accepted..]).await {
            tracing::warn!(%shard, error = %e, "cannot put refused members back; the sweeper will find them");
        }
        let refused = keys.len() - accepted;
        metrics::counter!("chime_scheduler_handoff_deferred_total").increment(refused as u64);
        if accepted > 0 {
            *full_refusals = 0;
        }
        let wait = s
            .refused_retry
            .saturating_mul(1 << (*full_refusals).min(16))
            .min(s.poll);
        if accepted == 0 {
            *full_refusals += 1;
        }
        if wait == s.poll {
            tracing::warn!(%shard, refused, "every executor is full; retrying");
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
        false
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
