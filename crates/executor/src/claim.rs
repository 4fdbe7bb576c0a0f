//! The claim side of the pipeline: queued keys gathered into batches, claimed in one
//! statement and checked against their timers; [`crate::fire`] starts their callbacks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chime_domain::misfire::{early_skip, overtaken_among};
use chime_domain::{
    Claim, ClaimedOccurrence, DeliveryMode, EarlySkip, OccurrenceStatus, Outcome, TaskKey, Timer,
};
use chime_storage::{Exclusive, StoreResult};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::outcome::{completes, skip_reason};
use crate::{Backoff, CLAIM_MARGIN, Done, Inner, Job, hosts, timers};

/// Claims one lane's queued keys a batch at a time: whatever queued up while the previous
/// round trip ran forms the next batch, so batching adds no wait of its own. Each lane
/// (keys on time, a backlog) has a loop of its own, so a key on time never waits behind a
/// backlog's round trip: with one loop for both, a burst's claims (hundreds of keys, tens
/// of milliseconds on a busy database) held up the keys falling due beside it.
pub(crate) async fn claim_loop(inner: Arc<Inner>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let cap = inner.settings.batch;
    let mut batch = Vec::with_capacity(cap);
    while let Some(first) = jobs.recv().await {
        batch.push(first);
        while batch.len() < cap {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        gather(&inner, &mut jobs, &mut batch).await;
        let mut pending = std::mem::take(&mut batch);
        let mut backoff = Backoff::new();
        let round = std::time::Instant::now();
        let claimed = loop {
            match inner.clone().claim_and_fire(&mut pending).await {
                Err(e) if e.is_retryable() => backoff.pause("claim", &e).await,
                done => break done,
            }
        };
        metrics::histogram!("chime_executor_claim_seconds").record(round.elapsed().as_secs_f64());
        if let Err(e) = claimed {
            // Left pending in the database: the sweeper hands them out again.
            tracing::error!(error = %e, keys = pending.len(), "claim failed; dropping batch");
        }
    }
}

/// Lets `batch` wait for more keys while its earliest is due later than the linger plus
/// [`CLAIM_MARGIN`]; a key due sooner arriving meanwhile ends the wait. A burst, a retry or
/// a late hand-off is claimed at once.
async fn gather(inner: &Inner, jobs: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>) {
    let linger = inner.settings.claim_linger;
    let now = inner.clock.now();
    let Some(earliest) = batch.iter().map(|j| j.key.run_at).min() else {
        return;
    };
    if linger.is_zero() {
        return;
    }
    let wait = |earliest: chime_domain::Timestamp| {
        let ahead = earliest.as_millis() - now.as_millis();
        let spare = ahead - CLAIM_MARGIN.as_millis() as i64;
        Duration::from_millis(spare.clamp(0, linger.as_millis() as i64) as u64)
    };
    let start = tokio::time::Instant::now();
    let mut until = start + wait(earliest);
    while batch.len() < inner.settings.batch {
        match tokio::time::timeout_at(until, jobs.recv()).await {
            Ok(Some(job)) => {
                // A key due sooner shortens the wait to what it can spare.
                until = until.min(start + wait(job.key.run_at));
                batch.push(job);
            }
            Ok(None) | Err(_) => break,
        }
    }
}

pub(crate) type Timers = HashMap<chime_domain::TimerId, Arc<Timer>>;

impl Inner {
    /// Claims `jobs` and starts their callbacks: read their timers; mark the runs of stopped
    /// timers and those their timer's next run overtook skipped, beside the claim of the
    /// others (one round trip each, side by side, so the skips add no wait to the keys that
    /// fire); claim, skip or fire the rest. A run the store did not skip (a retry, say) is
    /// claimed after.
    async fn claim_and_fire(self: Arc<Self>, jobs: &mut Vec<Job>) -> StoreResult<()> {
        let timers = self.timers_of(jobs).await?;
        let runs = self.early_skips(jobs, &timers);
        if runs.is_empty() {
            return self.claim_known(jobs, timers).await;
        }
        let keys: HashSet<TaskKey> = runs.iter().map(|r| r.key).collect();
        let (mut held, rest): (Vec<Job>, Vec<Job>) =
            jobs.drain(..).partition(|j| keys.contains(&j.key));
        *jobs = rest;
        let (skipped, claimed) = tokio::join!(
            self.skip_before_claim(&runs),
            self.claim_known(jobs, timers.clone())
        );
        // Dropping a skipped job frees its permit.
        // A stopped timer's unwritten runs are not marked (nothing of them was written): the
        // claim after finds no row for them, or the row of a retry, which it skips.
        held.retain(|j| !skipped.contains(&j.key));
        if let Err(e) = claimed {
            // Tried again with the held keys: the caller retries what is left in `jobs`.
            jobs.append(&mut held);
            return Err(e);
        }
        if held.is_empty() {
            return Ok(());
        }
        let claimed = self.claim_known(&mut held, timers).await;
        jobs.append(&mut held);
        claimed
    }

    /// [`Self::claim_and_fire`] for `jobs` whose `timers` are read: hold back keys over their
    /// host's cap, claim the rest, then skip or fire each claimed occurrence.
    async fn claim_known(
        self: &Arc<Self>,
        jobs: &mut Vec<Job>,
        mut timers: Timers,
    ) -> StoreResult<()> {
        let claim = self.claim_terms(&timers);
        let mut slots = self.admit_to_hosts(jobs, &timers);
        let mut claimed = self.claim_keys(jobs, &timers, claim).await?;
        let unreadable = self.refresh_changed(&mut timers, &claimed).await;
        let dropped = self
            .recheck_unwritten(&mut claimed, &timers, &unreadable)
            .await;
        for job in jobs.drain(..) {
            if unreadable.contains(&job.key.timer_id) || dropped.contains(&job.key) {
                continue;
            }
            // `remove`: a key offered twice (two hand-offs of it in one batch) fires once.
            let Some(occurrence) = claimed.remove(&job.key) else {
                // Taken by another executor, finished already, or gone: nothing to do.
                metrics::counter!("chime_executor_not_claimed_total").increment(1);
                continue;
            };
            let timer = timers.get(&job.key.timer_id);
            if let Some(skip) = skip_reason(timer.map(Arc::as_ref), &occurrence, claim.now) {
                self.record_skip(
                    job,
                    &occurrence,
                    timer.map(Arc::as_ref),
                    skip.reason,
                    skip.misfired,
                );
                continue;
            }
            if let Some(timer) = timer.cloned() {
                let slot = slots.remove(&job.key);
                self.fire(job, occurrence, timer, slot);
            }
        }
        Ok(())
    }

    /// The timers of `jobs`: those carried from an earlier claim (keys that waited for their
    /// host), then the cache's, then the database's (cached if they fire soon). A carried or
    /// cached timer is checked against the version each claim reports
    /// ([`Self::refresh_changed`]).
    async fn timers_of(&self, jobs: &[Job]) -> StoreResult<Timers> {
        let carried: Timers = jobs
            .iter()
            .filter_map(|j| j.timer.as_ref().map(|t| (t.id, t.clone())))
            .collect();
        let mut ids: Vec<_> = jobs
            .iter()
            .map(|j| j.key.timer_id)
            .filter(|id| !carried.contains_key(id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let (mut timers, missing) = self.cache.lookup(&ids);
        timers.extend(carried);
        if !missing.is_empty() {
            let read: Vec<Arc<Timer>> = self
                .timers
                .get_timers(&missing)
                .await?
                .into_iter()
                .map(Arc::new)
                .collect();
            let now = self.clock.now();
            self.cache
                .keep(read.iter().filter(|t| timers::fires_soon(t, now)));
            timers.extend(read.into_iter().map(|t| (t.id, t)));
        }
        Ok(timers)
    }

    /// The runs of `jobs` to mark `skipped` without a claim: their timer is stopped
    /// (disabled, paused or deleted), or its next run is due already. Under overload most
    /// keys are such runs, and a claim and an outcome for each cost the database twice what
    /// the one write of [`Self::skip_before_claim`] does.
    fn early_skips(&self, jobs: &[Job], timers: &Timers) -> Vec<EarlySkip> {
        let now = self.clock.now();
        jobs.iter()
            // Read without deleted timers: one missing is gone for good.
            .filter_map(|job| {
                early_skip(
                    timers.get(&job.key.timer_id).map(Arc::as_ref),
                    job.key,
                    None,
                    now,
                )
            })
            .collect()
    }

    /// Marks `runs` skipped where the store finds them still waiting for their first attempt
    /// (see [`chime_domain::EarlySkipKind`]); the rest (retries, redrives, rows of another
    /// version) are left to the claim, which decides them as before. Returns the keys
    /// marked; none when the store fails, which only leaves every key to the claim.
    async fn skip_before_claim(&self, runs: &[EarlySkip]) -> HashSet<TaskKey> {
        let skipped: HashSet<TaskKey> = match self.occurrences.skip_before_claim(runs).await {
            Ok(keys) => keys.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, runs = runs.len(), "cannot skip runs before their claim; claiming them");
                return HashSet::new();
            }
        };
        let n = skipped.len() as u64;
        if n > 0 {
            let misfired = overtaken_among(runs, &skipped) as u64;
            tracing::debug!(skipped = n, misfired, "skipped runs before claiming them");
            metrics::counter!("chime_executor_skipped_total").increment(n);
            metrics::counter!("chime_executor_misfired_total").increment(misfired);
            metrics::counter!("chime_executor_outcomes_total", "status" => OccurrenceStatus::Skipped.as_str())
                .increment(n);
        }
        skipped
    }

    /// The claim's time and lease: long enough for the slowest callback among `timers`.
    fn claim_terms(&self, timers: &Timers) -> Claim {
        let longest = timers
            .values()
            .map(|t| t.spec.callback.timeout.get())
            .max()
            .unwrap_or_default();
        let now = self.clock.now();
        Claim {
            now,
            lease_until: now.saturating_add(longest + self.settings.lease_margin),
        }
    }

    /// Keeps in `jobs` the keys their host may run now, with their host slots. A key over
    /// its host's cap is not claimed now: it waits for the host, or is handed back for later.
    fn admit_to_hosts(
        &self,
        jobs: &mut Vec<Job>,
        timers: &Timers,
    ) -> HashMap<TaskKey, hosts::HostSlot> {
        let mut slots = HashMap::new();
        let mut deferred = Vec::new();
        jobs.retain(|job| {
            let Some(timer) = timers.get(&job.key.timer_id) else {
                return true;
            };
            match self.hosts.admit(
                &hosts::host_of(timer),
                job.key,
                timer.bucket,
                job.on_time,
                &job.span,
                Some(timer),
            ) {
                hosts::Admission::Run(slot) => {
                    slots.insert(job.key, slot);
                    true
                }
                hosts::Admission::Queued => false,
                hosts::Admission::Defer => {
                    deferred.push((job.key, timer.bucket));
                    false
                }
            }
        });
        self.hosts.defer(deferred);
        slots
    }

    /// Claims the keys of `jobs`. Timers with an overlap policy (`skip`, `buffer_one`) are
    /// claimed one at a time, each beside no other of its occurrences in flight; unwritten
    /// runs under their run leases ([`Self::take_unwritten`]); the rest in one statement.
    async fn claim_keys(
        &self,
        jobs: &[Job],
        timers: &Timers,
        claim: Claim,
    ) -> StoreResult<HashMap<TaskKey, ClaimedOccurrence>> {
        let (exclusive, keys): (Vec<TaskKey>, Vec<TaskKey>) =
            jobs.iter().map(|j| j.key).partition(|k| {
                timers
                    .get(&k.timer_id)
                    .is_some_and(|t| !t.spec.overlap.is_allow_all())
            });
        let (unwritten, keys): (Vec<TaskKey>, Vec<TaskKey>) = match &self.run_leases {
            Some(_) => keys.into_iter().partition(|k| {
                timers
                    .get(&k.timer_id)
                    .is_some_and(|t| t.enabled && t.unwritten_run(k.run_at, None))
            }),
            None => (Vec::new(), keys),
        };
        // Written runs go under leases too where a lease spares the database a write; not
        // `at_most_once` ones, whose lapsed claim the sweeper must see on the row.
        let leasing = self.settings.leased_first_attempts
            && self
                .run_leases
                .as_ref()
                .is_some_and(|l| l.apart_from_store());
        let (leased, keys): (Vec<TaskKey>, Vec<TaskKey>) = keys.into_iter().partition(|k| {
            leasing
                && timers
                    .get(&k.timer_id)
                    .is_some_and(|t| t.spec.delivery != DeliveryMode::AtMostOnce)
        });
        let claiming = match jobs.first() {
            Some(j) => tracing::info_span!(parent: &j.span, "claim", keys = keys.len()),
            None => tracing::Span::none(),
        };
        let (claimed, taken, first) = tokio::join!(
            async {
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                self.occurrences.claim(&keys, claim).await
            }
            .instrument(claiming),
            self.take_unwritten(&unwritten, timers, claim),
            self.take_first(&leased, claim)
        );
        let mut claimed: HashMap<TaskKey, ClaimedOccurrence> =
            claimed?.into_iter().map(|c| (c.key, c)).collect();
        claimed.extend(taken?);
        let first = first?;
        claimed.extend(first.fired);
        // The batch leaves backfilled occurrences under `skip` or `buffer_one` alone; one
        // statement tells which of the keys it did not claim are those. The rest were taken
        // or finished already: in a burst, the sweeper hands off keys still queued here, and
        // a transaction for each of those stalled this loop.
        let unclaimed: Vec<TaskKey> = keys
            .iter()
            .filter(|k| !claimed.contains_key(k))
            .chain(&first.left)
            .copied()
            .collect();
        let held = if unclaimed.is_empty() {
            Vec::new()
        } else {
            self.occurrences
                .held_for_exclusive(&unclaimed, claim.now)
                .await?
        };
        let mut waiting = Vec::new();
        for key in exclusive.into_iter().chain(held) {
            let Some(timer) = timers.get(&key.timer_id) else {
                continue;
            };
            match self
                .occurrences
                .claim_exclusive(key, claim, timer.spec.overlap)
                .await?
            {
                Exclusive::Claimed(c) => {
                    claimed.insert(key, c);
                }
                Exclusive::Skipped { beside } => {
                    tracing::debug!(task = %key, beside = %beside, "skipped: overlap");
                    metrics::counter!("chime_executor_overlap_skipped_total").increment(1);
                }
                // `buffer_one`: offered again shortly, until the one in flight has ended.
                Exclusive::Waiting { beside } => {
                    tracing::debug!(task = %key, beside = %beside, "waiting: overlap");
                    metrics::counter!("chime_executor_overlap_waiting_total").increment(1);
                    waiting.push((key, timer.bucket));
                }
                Exclusive::NotClaimable => {}
            }
        }
        self.hosts.offer_later(waiting);
        Ok(claimed)
    }

    /// Records a claimed occurrence as skipped, with why, without calling back.
    fn record_skip(
        &self,
        job: Job,
        occurrence: &ClaimedOccurrence,
        timer: Option<&Timer>,
        reason: String,
        misfired: bool,
    ) {
        metrics::counter!("chime_executor_skipped_total").increment(1);
        if misfired {
            metrics::counter!("chime_executor_misfired_total").increment(1);
        }
        let outcome = Outcome {
            unwritten: occurrence.unwritten,
            leased: occurrence.leased,
            ..Outcome::ended(
                job.key,
                occurrence.attempt,
                OccurrenceStatus::Skipped,
                None,
                Some(reason),
            )
        };
        let _ = self.done.send(Done {
            completes: completes(timer, &outcome),
            timer: None,
            offset_ms: 0,
            outcome,
            bucket: occurrence.bucket,
            permit: job.permit,
        });
    }
}

impl Inner {
    /// Reads again the timers whose version the claims say changed since they were cached
    /// (or that are gone), so no occurrence fires with an outdated timer. Returns those it
    /// could not read now (the database went away): their claimed runs are left to the
    /// sweeper once their lease runs out.
    async fn refresh_changed(
        &self,
        timers: &mut Timers,
        claimed: &HashMap<TaskKey, ClaimedOccurrence>,
    ) -> Vec<chime_domain::TimerId> {
        let mut changed: Vec<_> = claimed
            .values()
            .filter(|c| timers.get(&c.key.timer_id).map(|t| t.version) != c.timer_now)
            .map(|c| c.key.timer_id)
            .collect();
        if changed.is_empty() {
            return changed;
        }
        changed.sort_unstable();
        changed.dedup();
        self.cache.forget(&changed);
        for id in &changed {
            timers.remove(id);
        }
        match self.timers.get_timers(&changed).await {
            Ok(read) => {
                let read: Vec<Arc<Timer>> = read.into_iter().map(Arc::new).collect();
                let now = self.clock.now();
                self.cache
                    .keep(read.iter().filter(|t| timers::fires_soon(t, now)));
                timers.extend(read.into_iter().map(|t| (t.id, t)));
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, timers = changed.len(), "cannot read changed timers; their claimed runs wait for the sweeper");
                changed
            }
        }
    }
}
