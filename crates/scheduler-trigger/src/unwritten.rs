//! The sweeper's check of unwritten runs ([`chime_domain::UnwrittenRun`]). Such a run has no
//! row until it ends, so the row the sweeper would find overdue is not there: instead it
//! walks each unwritten timer's fire times as they pass `sweep_after` ago and looks for
//! their rows. A run without a row whose lease nobody holds was lost on its way (a
//! scheduler or executor died with it, Redis lost it, the migrator never indexed it): it is
//! skipped if its timer's next run is due already (and written so), handed to an
//! executor otherwise. One probe per fire time, no write; a run whose lease is held (a slow
//! callback) is looked at again each sweep until its row is there.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chime_domain::misfire::early_skip;
use chime_domain::{EarlySkip, EarlySkipKind, Schedule, TaskKey, TimerId, Timestamp};
use chime_storage::StoreResult;

use crate::Scheduler;

/// How often the list of unwritten timers is read again: a timer created or changed since
/// is checked from then on.
const REFRESH: Duration = Duration::from_secs(10);
/// How far back a check starts when the sweeper (re)starts: as far as the migrator catches
/// up on runs it never wrote.
const CATCH_UP: Duration = Duration::from_secs(30);
/// Fire times of one timer checked per sweep at most, so a check that starts behind (a
/// takeover) catches up over a few sweeps instead of in one.
const RUNS_PER_TIMER: usize = 10;
/// Fire times checked per sweep at most, and runs kept to look at again.
const MAX_RUNS: usize = 50_000;
/// Keys per probe for rows.
const PROBE: usize = 5_000;

/// What the check knows between sweeps; reset when the sweeper lease changes hands.
#[derive(Default)]
pub(crate) struct Check {
    /// Each unwritten timer, as much of it as its fire times need (its target and payload
    /// stay in the database: memory is per timer, not per byte of body).
    timers: HashMap<TimerId, Walked>,
    read_at: Option<Timestamp>,
    /// Runs without a row that were held, or offered and refused: looked at again.
    again: BTreeSet<TaskKey>,
}

/// One unwritten timer as the check walks it.
struct Walked {
    schedule: Schedule,
    updated_at: Timestamp,
    /// Its fire times are checked up to here.
    through: Timestamp,
}

/// What one check did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    pub probed: usize,
    pub handed_off: usize,
    pub skipped: usize,
}

impl Check {
    /// Forgets everything: the lease went to another replica, which checks from its start.
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }
}

impl Scheduler {
    /// One check (see the module comment), at every sweep while the sweeper lease is held.
    pub(crate) async fn check_unwritten(&self, check: &mut Check) -> StoreResult<Checked> {
        let Some(leases) = self.index.reads().run_leases() else {
            return Ok(Checked::default());
        };
        let now = self.clock.now();
        if check
            .read_at
            .is_none_or(|at| now.saturating_sub(REFRESH) >= at)
        {
            self.read_unwritten_timers(check, now).await?;
        }
        let up_to = now.saturating_sub(self.settings.sweep_after);
        let mut runs: Vec<TaskKey> = check.again.iter().copied().collect();
        // Each timer's cursor moves only once its runs were looked at: a check that fails
        // (the database or Redis away) leaves them to the next one.
        let mut moved: Vec<(TimerId, Timestamp)> = Vec::new();
        for (id, timer) in &check.timers {
            if runs.len() >= MAX_RUNS {
                break;
            }
            let through = timer.through;
            let from = through.max(timer.updated_at);
            let due: Vec<Timestamp> = timer
                .schedule
                .occurrences_between(from, up_to)
                .take(RUNS_PER_TIMER)
                .collect();
            moved.push((
                *id,
                match due.last() {
                    Some(last) if due.len() == RUNS_PER_TIMER => last.add_millis(1),
                    _ => up_to.max(through),
                },
            ));
            runs.extend(due.into_iter().map(|at| TaskKey::new(*id, at)));
        }
        let (checked, again) = self.look_for_rows(leases.as_ref(), runs, now).await?;
        check.again = again;
        for (id, through) in moved {
            if let Some(timer) = check.timers.get_mut(&id) {
                timer.through = through;
            }
        }
        Ok(checked)
    }

    /// Looks for the rows of `runs`: a run without one whose lease nobody holds is written
    /// skipped or handed off; returns what was done and the runs to look at again (held, or
    /// refused by every executor).
    async fn look_for_rows(
        &self,
        leases: &dyn chime_storage::RunLeases,
        runs: Vec<TaskKey>,
        now: Timestamp,
    ) -> StoreResult<(Checked, BTreeSet<TaskKey>)> {
        let mut checked = Checked {
            probed: runs.len(),
            ..Checked::default()
        };
        let mut again = BTreeSet::new();
        let mut missing = Vec::new();
        for chunk in runs.chunks(PROBE) {
            missing.extend(
                self.occurrences
                    .absent(chunk)
                    .await?
                    .into_iter()
                    .map(|a| a.key),
            );
        }
        if missing.is_empty() {
            return Ok((checked, again));
        }
        let held = leases.runs_held(&missing).await?;
        let mut lost = Vec::new();
        for (key, held) in missing.into_iter().zip(held) {
            if held {
                again.insert(key);
            } else {
                lost.push(key);
            }
        }
        if lost.is_empty() {
            return Ok((checked, again));
        }
        // Judged on the timers as they are now, as an executor would.
        let timers = self.timers_by_id(lost.iter().map(|k| k.timer_id)).await?;
        let mut skips: Vec<EarlySkip> = Vec::new();
        let mut hand_off: Vec<TaskKey> = Vec::new();
        for key in lost {
            let timer = timers.get(&key.timer_id);
            match early_skip(timer, key, None, now) {
                Some(skip) if matches!(skip.kind, EarlySkipKind::Overtaken { .. }) => {
                    skips.push(skip);
                }
                // A stopped timer's runs are not its to fire any more.
                Some(_) => {}
                None if timer.is_some_and(|t| t.unwritten_run(key.run_at, None)) => {
                    hand_off.push(key);
                }
                None => {}
            }
        }
        checked.skipped = self.occurrences.skip_before_claim(&skips).await?.len();
        for batch in hand_off.chunks(self.settings.batch) {
            let accepted = self.handoff.hand_off(batch).await;
            checked.handed_off += accepted;
            again.extend(batch[accepted..].iter().copied());
        }
        while again.len() > MAX_RUNS {
            again.pop_last();
        }
        Ok((checked, again))
    }

    /// Reads the unwritten timers of every bucket; a timer seen for the first time is
    /// checked from [`CATCH_UP`] ago (or its last change, if later).
    async fn read_unwritten_timers(&self, check: &mut Check, now: Timestamp) -> StoreResult<()> {
        let start = now.saturating_sub(CATCH_UP);
        let mut timers = HashMap::with_capacity(check.timers.len());
        // A bucket at a time, kept as schedules: the full rows of every bucket at once
        // would be the largest thing the scheduler holds.
        for bucket in self.settings.buckets.all() {
            for b in chime_storage::unwritten::timers_of(self.timers.as_ref(), bucket).await? {
                let through = check.timers.get(&b.timer.id).map_or(start, |t| t.through);
                let t = b.timer;
                timers.insert(
                    t.id,
                    Walked {
                        schedule: t.spec.schedule,
                        updated_at: t.updated_at,
                        through,
                    },
                );
            }
        }
        check.timers = timers;
        check.read_at = Some(now);
        Ok(())
    }
}
