//! The sweeper: the safety net behind the hot path. One replica at a time (leased) looks in
//! the database for occurrences that should have been handed off and were not (pending or
//! retrying, overdue by more than `sweep_after`) and for claims whose lease ran out (the
//! executor died), and hands them to executors again, applying each timer's misfire policy
//! to what is overdue beyond `misfire_threshold`.

use std::collections::HashMap;
use std::sync::Arc;

use chime_domain::{
    DeliveryMode, MisfirePolicy, Occurrence, OccurrenceStatus, OnComplete, Outcome, TaskKey, Timer,
    TimerId,
};
use chime_storage::StoreResult;
use tokio_util::sync::CancellationToken;

use crate::Scheduler;

const LEASE: &str = "sweeper";
/// Overdue occurrences looked at per page.
const SWEEP_LIMIT: u32 = 2_000;
/// Pages one sweep works through at most while each is full and taken whole: after an
/// overload or an outage, tens of thousands of rows may be overdue, and a page a second left
/// one-shots behind them waiting for a minute.
const MAX_PAGES: usize = 10;

/// How long a sweep offers again what full executors refuse, and what ends it early.
type Patience<'a> = Option<(&'a CancellationToken, chime_domain::Timestamp)>;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Handed to executors again.
    pub handed_off: usize,
    /// Marked `skipped` by the misfire policy.
    pub skipped: u64,
    /// `at_most_once` occurrences whose executor died mid-delivery: `failed`, not retried.
    pub abandoned: u64,
}

/// One page of a sweep.
struct Page {
    swept: Swept,
    /// The page was full and executors took all it offered: another may follow.
    more: bool,
    /// Rows passed over as in flight; they come first again on the next page.
    in_flight: usize,
}

/// Where each overdue occurrence goes.
#[derive(Default)]
struct Plan {
    hand_off: Vec<TaskKey>,
    skip: Vec<TaskKey>,
    /// Runs of timers that are gone, disabled or changed since they were written, by why:
    /// skipped here rather than handed to an executor to skip.
    stopped: HashMap<&'static str, Vec<TaskKey>>,
    abandon: Vec<Outcome>,
}

impl Scheduler {
    /// Sweeps every `sweep_interval` while holding the sweeper lease, until `stop`.
    pub(crate) async fn sweep_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut held = false;
        let mut check = crate::unwritten::Check::default();
        let mut tick = chime_domain::Ticker::new(self.clock.clone(), self.settings.sweep_interval);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let ttl = self.settings.lease_ttl;
            let leased = if held {
                self.leases.renew(LEASE, &self.token, ttl).await
            } else {
                // From a replica gone from the group at once, not after its lease lapses.
                self.take_lease(LEASE, &self.ownership_now()).await
            };
            held = matches!(leased, Ok(true));
            if !held {
                check.reset();
                continue;
            }
            self.sweep_pages(&stop).await;
            match self.check_unwritten(&mut check).await {
                Ok(c) => {
                    metrics::counter!("chime_sweeper_unwritten_checked_total")
                        .increment(c.probed as u64);
                    metrics::counter!("chime_sweeper_handed_off_total")
                        .increment(c.handed_off as u64);
                    metrics::counter!("chime_sweeper_skipped_total").increment(c.skipped as u64);
                    if c.handed_off + c.skipped > 0 {
                        tracing::info!(
                            handed_off = c.handed_off,
                            skipped = c.skipped,
                            "sweeper recovered unwritten runs"
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "checking unwritten runs failed"),
            }
        }
        if held {
            let _ = self.leases.release(LEASE, &self.token).await;
        }
    }

    /// One sweep: pages of the oldest overdue rows while each is full and taken whole, at
    /// most [`MAX_PAGES`]. What full executors refuse is offered again, and rows in flight
    /// are read past, until the next sweep is due.
    async fn sweep_pages(&self, stop: &CancellationToken) {
        let until = self
            .clock
            .now()
            .saturating_add(self.settings.sweep_interval);
        let mut wait = self.settings.refused_retry;
        for _ in 0..MAX_PAGES {
            let page = match self.sweep_page(Some((stop, until))).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "sweep failed");
                    return;
                }
            };
            let s = page.swept;
            if s != Swept::default() {
                tracing::info!(
                    handed_off = s.handed_off,
                    skipped = s.skipped,
                    abandoned = s.abandoned,
                    "sweeper recovered overdue occurrences"
                );
            }
            if !page.more || stop.is_cancelled() {
                return;
            }
            if page.in_flight == 0 {
                continue;
            }
            // The rows in flight come first again on the next page: read it once executors
            // had a moment to claim them, longer each time nothing else was there.
            let at = self.clock.now().saturating_add(wait);
            if at > until || !self.pause_until(at, stop).await {
                return;
            }
            wait = if s.handed_off == 0 {
                (wait * 2).min(self.settings.poll)
            } else {
                self.settings.refused_retry
            };
        }
    }

    /// One page of a sweep: the oldest overdue occurrences.
    pub async fn sweep(&self) -> StoreResult<Swept> {
        Ok(self.sweep_page(None).await?.swept)
    }

    /// Hands `keys` off batch by batch; returns how many executors took. What full
    /// executors refuse is offered again as they free room, until the sweep's time is up
    /// (`patience`: until when, and what stops it early; with none, not at all); the rest
    /// stay overdue in the database, for the next sweep. Offered once a sweep, the tail of
    /// a burst too large to drain within the misfire threshold (left to the sweeper by the
    /// shards) went at what executors had room for once a second: a 200,000 burst drained
    /// at a third of the speed the cores allowed, one of them idle.
    async fn hand_off_page(&self, keys: &[TaskKey], patience: Patience<'_>) -> usize {
        let s = self.settings;
        let mut wait = s.refused_retry;
        let mut taken = 0;
        while taken < keys.len() {
            let batch = &keys[taken..(taken + s.batch).min(keys.len())];
            let accepted = self.handoff.hand_off(batch).await;
            taken += accepted;
            if accepted == batch.len() {
                wait = s.refused_retry;
                continue;
            }
            let Some((stop, until)) = patience else { break };
            let at = self.clock.now().saturating_add(wait);
            if at > until || !self.pause_until(at, stop).await {
                break;
            }
            // Doubled while nothing is taken, as a shard backs off from full executors.
            if accepted == 0 {
                wait = (wait * 2).min(s.poll);
            }
        }
        taken
    }

    /// One page. `patience`: see [`Scheduler::hand_off_page`].
    async fn sweep_page(&self, patience: Patience<'_>) -> StoreResult<Page> {
        let now = self.clock.now();
        let overdue = self
            .occurrences
            .find_overdue(
                now.saturating_sub(self.settings.sweep_after),
                now,
                SWEEP_LIMIT,
            )
            .await?;
        let full = overdue.len() == SWEEP_LIMIT as usize;
        let (overdue, held) = self.in_flight_apart(overdue).await;
        if overdue.is_empty() {
            return Ok(Page {
                swept: Swept::default(),
                more: full,
                in_flight: held,
            });
        }
        let timers = self
            .timers_by_id(overdue.iter().map(|o| o.key.timer_id))
            .await?;
        let plan = self.plan(&overdue, &timers, now);
        let mut swept = Swept {
            skipped: self
                .occurrences
                .skip_occurrences(&plan.skip, "misfired: overdue beyond the misfire threshold")
                .await?,
            abandoned: self.occurrences.record_outcomes(&plan.abandon).await?,
            ..Swept::default()
        };
        for (reason, keys) in &plan.stopped {
            swept.skipped += self.occurrences.skip_occurrences(keys, reason).await?;
        }
        // A skipped or abandoned last occurrence ends a timer that deletes itself when done.
        let mut finished: Vec<TimerId> = plan
            .skip
            .iter()
            .chain(plan.abandon.iter().map(|o| &o.key))
            .filter_map(|k| timers.get(&k.timer_id).map(|t| (t, k.run_at)))
            .filter(|(t, run_at)| {
                t.spec.on_complete == OnComplete::Delete && t.is_last_run(*run_at)
            })
            .map(|(t, _)| t.id)
            .collect();
        finished.dedup();
        if !finished.is_empty() {
            self.timers.remove_finished(&finished, now).await?;
        }
        swept.handed_off = self.hand_off_page(&plan.hand_off, patience).await;
        metrics::counter!("chime_sweeper_handed_off_total").increment(swept.handed_off as u64);
        metrics::counter!("chime_sweeper_skipped_total").increment(swept.skipped);
        metrics::counter!("chime_sweeper_abandoned_total").increment(swept.abandoned);
        Ok(Page {
            swept,
            more: full && swept.handed_off == plan.hand_off.len(),
            in_flight: held,
        })
    }

    /// `overdue` without the first attempts an executor fires under their run leases
    /// (their rows stay `pending` while in flight), and how many were passed over. When the
    /// leases cannot be read every row is kept: a duplicate callback rather than a lost one.
    async fn in_flight_apart(&self, overdue: Vec<Occurrence>) -> (Vec<Occurrence>, usize) {
        let Some(leases) = self
            .index
            .reads()
            .run_leases()
            .filter(|l| l.apart_from_store())
        else {
            return (overdue, 0);
        };
        let pending: Vec<TaskKey> = overdue
            .iter()
            .filter(|o| o.status == OccurrenceStatus::Pending)
            .map(|o| o.key)
            .collect();
        if pending.is_empty() {
            return (overdue, 0);
        }
        let held: std::collections::HashSet<TaskKey> = match leases.runs_held(&pending).await {
            Ok(flags) => pending
                .into_iter()
                .zip(flags)
                .filter(|(_, h)| *h)
                .map(|(k, _)| k)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read run leases; offering every overdue row");
                return (overdue, 0);
            }
        };
        let n = held.len();
        let kept = overdue
            .into_iter()
            .filter(|o| o.status != OccurrenceStatus::Pending || !held.contains(&o.key))
            .collect();
        (kept, n)
    }

    /// The timers named (each once), as they are now.
    pub(crate) async fn timers_by_id(
        &self,
        ids: impl Iterator<Item = TimerId>,
    ) -> StoreResult<HashMap<TimerId, Timer>> {
        let mut ids: Vec<TimerId> = ids.collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(self
            .timers
            .get_timers(&ids)
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect())
    }

    fn plan(
        &self,
        overdue: &[Occurrence],
        timers: &HashMap<TimerId, Timer>,
        now: chime_domain::Timestamp,
    ) -> Plan {
        let threshold =
            i64::try_from(self.settings.misfire_threshold.as_millis()).unwrap_or(i64::MAX);
        let mut plan = Plan::default();
        let mut misfired: HashMap<TimerId, Vec<&Occurrence>> = HashMap::new();
        for o in overdue {
            let timer = timers.get(&o.key.timer_id);
            if o.status == OccurrenceStatus::Running {
                // Its claim lease ran out: the executor died or lost the database.
                if timer.is_some_and(|t| t.spec.delivery == DeliveryMode::AtMostOnce) {
                    plan.abandon.push(Outcome::ended(
                        o.key,
                        o.attempt,
                        OccurrenceStatus::Failed,
                        None,
                        Some(
                            "the executor was lost during an at_most_once delivery; not retried"
                                .into(),
                        ),
                    ));
                } else {
                    plan.hand_off.push(o.key);
                }
                continue;
            }
            let late = now.as_millis() - o.due_at().as_millis();
            match timer {
                // Runs of a timer gone, disabled or changed since are skipped here, with the
                // reason an executor would give: handed off, each would cost a claim and an
                // outcome (a disabled timer's lead of runs, after an overload).
                None => plan.stopped.entry("timer deleted").or_default().push(o.key),
                Some(t) if !t.enabled || t.deleted_at.is_some() => plan
                    .stopped
                    .entry("timer disabled")
                    .or_default()
                    .push(o.key),
                Some(t) if t.version != o.timer_version => plan
                    .stopped
                    .entry("timer changed since this occurrence was written")
                    .or_default()
                    .push(o.key),
                // A backfill asked for its runs: no misfire policy drops them (the catch-up
                // window still may).
                Some(t) if late > threshold && o.backfill.is_none() => {
                    misfired.entry(t.id).or_default().push(o);
                }
                Some(_) => plan.hand_off.push(o.key),
            }
        }
        for (id, mut occurrences) in misfired {
            let Some(timer) = timers.get(&id) else {
                continue;
            };
            occurrences.sort_by_key(|o| o.key.run_at);
            let keys = occurrences.iter().map(|o| o.key);
            match (timer.spec.misfire, timer.spec.schedule.is_one_shot()) {
                (MisfirePolicy::Skip, _) => plan.skip.extend(keys),
                (MisfirePolicy::FireAll, _) | (MisfirePolicy::FireOnce, true) => {
                    plan.hand_off.extend(keys)
                }
                (MisfirePolicy::FireOnce, false) => {
                    let mut keys: Vec<TaskKey> = keys.collect();
                    if let Some(latest) = keys.pop() {
                        plan.hand_off.push(latest);
                    }
                    plan.skip.extend(keys);
                }
            }
        }
        plan
    }
}
