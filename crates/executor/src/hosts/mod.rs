//! Fairness between callback targets: at most `max_per_host` callbacks to one host
//! (`host:port`) run at once in an executor, so a slow endpoint cannot take every in-flight
//! slot and starve the callbacks of others.
//!
//! Only slow hosts are held to the cap. A host whose callbacks have been answering within
//! [`FAST`] (a moving average of their durations) cannot hog the slots, and queueing its keys
//! slowed a single-host burst (each resumed key was claimed on its own), so its keys run
//! over the cap. A host not measured yet is capped.
//!
//! A key over its host's cap is not claimed: it gives its in-flight permit back and waits,
//! unclaimed, in its host's queue (bounded in total); when one of that host's callbacks ends
//! the next waiting key takes a permit again and goes back to the claim queue. A key that
//! finds no permit when its turn comes keeps its place at the head of the queue while the
//! host has callbacks running (the next to end tries again); a key that finds the queue
//! full, or no permit and nothing running to try again, is handed back to the hot index a
//! little later. At a burst's start its host is not measured yet, so thousands queue; the
//! first answers found it fast and let them all go at once, into permits new offers had
//! taken meanwhile: handed back, they were up to a third of a 20,000 burst, each 250 ms
//! later and read, offered and claimed again. Keys on time wait ahead of a backlog's
//! (`chime_domain::BACKLOG_AFTER`) and resume into their own claim queue. Unclaimed keys
//! are still pending in the database, so one waiting in an executor that dies is found by
//! the sweeper.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::Job;
use crate::lanes::{Lanes, Permit, Permits};
use chime_domain::{Bucket, Clock, TaskKey, Timer};
use chime_storage::{HotEntry, HotWrites};

/// Callbacks answered within this (moving average) make a host fast: not held to the cap.
pub(crate) const FAST: Duration = Duration::from_millis(100);

/// Most hosts whose speed is remembered; past it the memory starts over.
const MAX_MEASURED: usize = 4096;

/// How much later a key handed back to the hot index is due again.
pub(crate) const DEFER: Duration = Duration::from_millis(250);

/// The most of its callback's own bytes (body and headers) a waiting key's timer may hold
/// for the key to carry it to its claim. Thousands of keys may wait
/// (4 × `executor.max_in_flight`), so a timer with a large body is read again instead: the
/// waiting keys' timers stay within a few tens of MiB.
const CARRY_UP_TO: usize = 1024;

/// Whether a waiting key keeps `timer` for its claim ([`CARRY_UP_TO`]).
fn worth_carrying(timer: &Timer) -> bool {
    let callback = &timer.spec.callback;
    let body = callback.body.as_ref().map_or(0, |b| b.as_str().len());
    let headers: usize = callback
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    body + headers <= CARRY_UP_TO
}

/// A key waiting for its host, without a permit.
pub(crate) struct Waiting {
    key: TaskKey,
    bucket: Bucket,
    span: tracing::Span,
    /// Not part of a backlog when it came: it waits ahead of those that were.
    on_time: bool,
    /// Its timer as read for the claim it waits to join, carried to that claim: a burst's
    /// one-shots are not cached (they do not fire again), and reading each waiting key's
    /// timer again made a fifth more timer reads than firings. Only small timers
    /// ([`CARRY_UP_TO`]).
    timer: Option<Arc<Timer>>,
}

#[derive(Default)]
struct State {
    running: HashMap<String, usize>,
    /// Moving average of each host's callback durations, in ms.
    speed: HashMap<String, u64>,
    waiting: HashMap<String, VecDeque<Waiting>>,
    waiting_total: usize,
}

pub(crate) struct Hosts {
    per_host: usize,
    max_waiting: usize,
    state: Mutex<State>,
    permits: Arc<Permits>,
    lanes: Lanes,
    index: Option<HotWrites>,
    clock: Arc<dyn Clock>,
}

/// What to do with a key whose timer calls `host`.
pub(crate) enum Admission {
    /// Claim and call it now; the slot frees when dropped.
    Run(HostSlot),
    /// Queued for the host: drop the job's permit.
    Queued,
    /// No room to wait: hand it back to the hot index.
    Defer,
}

/// One running callback's place in its host's cap.
pub(crate) struct HostSlot {
    hosts: Arc<Hosts>,
    host: String,
    /// When its callback started (set by [`HostSlot::begin`]): what the host's speed is
    /// measured from, not the wait for the due instant before it.
    started: Option<chime_domain::Timestamp>,
}

impl HostSlot {
    pub(crate) fn begin(&mut self) {
        self.started = Some(self.hosts.clock.now());
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let took = self.started.map(|s| {
            self.hosts
                .clock
                .now()
                .as_millis()
                .saturating_sub(s.as_millis())
        });
        let released = self.hosts.release(&self.host, took);
        self.hosts.resume(released);
    }
}

/// What one callback's end lets go of its host's queue.
#[derive(Default)]
struct Released {
    /// Keys that took an in-flight permit: on to their claim.
    resumed: Vec<(Waiting, Permit)>,
    /// Keys with no permit and no callback of their host running to try again for them.
    deferred: Vec<Waiting>,
}

impl Hosts {
    pub(crate) fn new(
        per_host: usize,
        max_waiting: usize,
        permits: Arc<Permits>,
        lanes: Lanes,
        index: Option<HotWrites>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            per_host,
            max_waiting,
            state: Mutex::new(State::default()),
            permits,
            lanes,
            index,
            clock,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn admit(
        self: &Arc<Self>,
        host: &str,
        key: TaskKey,
        bucket: Bucket,
        on_time: bool,
        span: &tracing::Span,
        timer: Option<&Arc<Timer>>,
    ) -> Admission {
        let mut state = self.state();
        let fast = state
            .speed
            .get(host)
            .is_some_and(|ms| *ms < FAST.as_millis() as u64);
        let running = state.running.entry(host.to_owned()).or_default();
        if *running < self.per_host || fast {
            *running += 1;
            return Admission::Run(HostSlot {
                hosts: self.clone(),
                host: host.to_owned(),
                started: None,
            });
        }
        if state.waiting_total >= self.max_waiting {
            return Admission::Defer;
        }
        state.waiting_total += 1;
        let now = self.clock.now();
        let queue = state.waiting.entry(host.to_owned()).or_default();
        // Keys on time go ahead of a backlog's, in the order they came (they are few: a
        // backlog is what fills a queue). A burst's keys queued while still on time are a
        // backlog once late: a key on time goes ahead of them too, not behind thousands.
        let at = if on_time {
            queue
                .iter()
                .position(|w| !w.on_time || chime_domain::in_backlog(w.key.run_at, now))
                .unwrap_or(queue.len())
        } else {
            queue.len()
        };
        queue.insert(
            at,
            Waiting {
                key,
                bucket,
                span: span.clone(),
                on_time,
                timer: timer.filter(|t| worth_carrying(t)).cloned(),
            },
        );
        metrics::counter!("chime_executor_host_waits_total").increment(1);
        Admission::Queued
    }

    /// A callback to `host` ended (after `took` ms, if it started): its slot goes to the
    /// host's next waiting key, if any. A host found fast lets its waiting keys go together,
    /// as many as take a permit, so they are claimed together rather than one per finished
    /// callback. Each takes its permit here, from the head of the queue, and the first that
    /// finds none stops the round in its place: the next callback to end tries again (taking
    /// as many as the free permits out and putting back those that found none moved
    /// hundreds of keys at every callback's end in a burst, whose keys are held to their
    /// instant's share while other permits stand free). Keys on time wait ahead of a
    /// backlog's and resume into their own claim queue. When none of the host's callbacks
    /// runs, the keys this round would have let go that found no permit are deferred: no
    /// end is left to try again for them. (Keys resumed just before are on their way to a
    /// claim, not yet running: deferring the whole queue whenever none was running sent
    /// thousands of a burst's keys back in its last moments.)
    fn release(&self, host: &str, took: Option<i64>) -> Released {
        let mut state = self.state();
        let mut fast = false;
        if let Some(ms) = took {
            let ms = u64::try_from(ms).unwrap_or(0);
            if state.speed.len() >= MAX_MEASURED && !state.speed.contains_key(host) {
                state.speed.clear();
            }
            let avg = state.speed.entry(host.to_owned()).or_insert(ms);
            *avg = (*avg * 4 + ms) / 5;
            fast = *avg < FAST.as_millis() as u64;
        }
        let mut running = 0;
        if let Some(n) = state.running.get_mut(host) {
            *n = n.saturating_sub(1);
            running = *n;
            if *n == 0 {
                state.running.remove(host);
            }
        }
        let mut out = Released::default();
        let Some(queue) = state.waiting.get_mut(host) else {
            return out;
        };
        let round = if fast {
            queue.len().min(self.permits.available().max(1))
        } else {
            1
        };
        let now = self.clock.now();
        while out.resumed.len() < round {
            let Some(w) = queue.pop_front() else { break };
            match self.permits.try_take(w.on_time, w.key.run_at, now) {
                Some(permit) => out.resumed.push((w, permit)),
                None => {
                    queue.push_front(w);
                    if running == 0 {
                        let rest = (round - out.resumed.len()).min(queue.len());
                        out.deferred.extend(queue.drain(..rest));
                    }
                    break;
                }
            }
        }
        // Resumed keys pass `admit` again on their way to the claim.
        let left = queue.is_empty();
        state.waiting_total -= out.resumed.len() + out.deferred.len();
        if left {
            state.waiting.remove(host);
        }
        out
    }

    /// Sends the keys a callback's end let go back to be claimed, each with its permit, in
    /// the lane it came in, and hands back those deferred.
    fn resume(&self, released: Released) {
        let mut deferred: Vec<(TaskKey, Bucket)> = released
            .deferred
            .into_iter()
            .map(|w| (w.key, w.bucket))
            .collect();
        for (w, permit) in released.resumed {
            let job = Job {
                key: w.key,
                permit,
                span: w.span,
                on_time: w.on_time,
                timer: w.timer,
            };
            if let Err(lost) = self.lanes.send(job, w.on_time) {
                deferred.push((lost.key, w.bucket));
            }
        }
        self.defer(deferred);
    }

    /// Hands keys back to the hot index, due [`DEFER`] from now. Without one (or if the
    /// write fails) they stay pending in the database, where the sweeper finds them.
    pub(crate) fn defer(&self, keys: Vec<(TaskKey, Bucket)>) {
        if keys.is_empty() {
            return;
        }
        metrics::counter!("chime_executor_deferred_total").increment(keys.len() as u64);
        self.offer_later(keys);
    }

    /// Hands `keys` back to the hot index, due again [`DEFER`] from now (without an index,
    /// the sweeper finds them in the database).
    pub(crate) fn offer_later(&self, keys: Vec<(TaskKey, Bucket)>) {
        if keys.is_empty() {
            return;
        }
        let Some(index) = self.index.clone() else {
            return;
        };
        let due = self.clock.now().saturating_add(DEFER);
        let entries: Vec<HotEntry> = keys
            .into_iter()
            .map(|(key, bucket)| HotEntry::new(key, due, bucket))
            .collect();
        tokio::spawn(async move {
            if let Err(e) = index.deferred(&entries).await {
                tracing::warn!(error = %e, keys = entries.len(), "cannot hand deferred keys back; the sweeper will");
            }
        });
    }

    /// Keys waiting for their host now (for tests and the drain).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state().waiting_total
    }
}

/// The host a timer's callbacks go to: what the cap counts by.
/// Workers count by app and group, brokers by their server.
pub(crate) fn host_of(timer: &chime_domain::Timer) -> String {
    use chime_domain::Target;
    let url = match &timer.spec.callback.target {
        Target::Http(u) => u.as_url(),
        Target::Nats(n) => n.url.as_url(),
        Target::Amqp(a) => a.url.as_url(),
        Target::Worker(w) => return format!("worker:{}/{}", timer.spec.app, w.group),
    };
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests;
