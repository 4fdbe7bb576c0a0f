//! Fairness between callback targets: at most `max_per_host` callbacks to one host
//! (`host:port`) run at once in an executor, so a slow endpoint cannot take every in-flight
//! slot and starve the callbacks of others.
//!
//! A key over its host's cap is not claimed: it gives its in-flight permit back and waits,
//! unclaimed, in its host's queue (bounded in total); when one of that host's callbacks ends
//! the next waiting key takes a permit again and goes back to the claim queue. A key that
//! finds the queue full, or no permit when its turn comes, is handed back to the hot index a
//! little later. Unclaimed keys are still pending in the database, so one waiting in an
//! executor that dies is found by the sweeper.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{Bucket, Clock, TaskKey};
use chime_storage::{HotEntry, HotIndex};
use tokio::sync::{Semaphore, mpsc};

use crate::Job;

/// How much later a key handed back to the hot index is due again.
pub(crate) const DEFER: Duration = Duration::from_millis(250);

/// A key waiting for its host, without a permit.
pub(crate) struct Waiting {
    key: TaskKey,
    bucket: Bucket,
    span: tracing::Span,
}

#[derive(Default)]
struct State {
    running: HashMap<String, usize>,
    waiting: HashMap<String, VecDeque<Waiting>>,
    waiting_total: usize,
}

pub(crate) struct Hosts {
    per_host: usize,
    max_waiting: usize,
    state: Mutex<State>,
    permits: Arc<Semaphore>,
    queue: mpsc::UnboundedSender<Job>,
    index: Option<Arc<dyn HotIndex>>,
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
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        if let Some(next) = self.hosts.release(&self.host) {
            self.hosts.resume(next);
        }
    }
}

impl Hosts {
    pub(crate) fn new(
        per_host: usize,
        max_waiting: usize,
        permits: Arc<Semaphore>,
        queue: mpsc::UnboundedSender<Job>,
        index: Option<Arc<dyn HotIndex>>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            per_host,
            max_waiting,
            state: Mutex::new(State::default()),
            permits,
            queue,
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
        span: &tracing::Span,
    ) -> Admission {
        let mut state = self.state();
        let running = state.running.entry(host.to_owned()).or_default();
        if *running < self.per_host {
            *running += 1;
            return Admission::Run(HostSlot {
                hosts: self.clone(),
                host: host.to_owned(),
            });
        }
        if state.waiting_total >= self.max_waiting {
            return Admission::Defer;
        }
        state.waiting_total += 1;
        state
            .waiting
            .entry(host.to_owned())
            .or_default()
            .push_back(Waiting {
                key,
                bucket,
                span: span.clone(),
            });
        metrics::counter!("chime_executor_host_waits_total").increment(1);
        Admission::Queued
    }

    /// A callback to `host` ended: its slot goes to the host's next waiting key, if any.
    fn release(&self, host: &str) -> Option<Waiting> {
        let mut state = self.state();
        let next = state.waiting.get_mut(host).and_then(VecDeque::pop_front);
        if next.is_some() {
            state.waiting_total -= 1;
        }
        if state.waiting.get(host).is_some_and(VecDeque::is_empty) {
            state.waiting.remove(host);
        }
        if let Some(n) = state.running.get_mut(host) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.running.remove(host);
            }
        }
        next
    }

    /// Sends a waiting key back to be claimed, with a permit, or defers it.
    fn resume(&self, next: Waiting) {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            self.defer(vec![(next.key, next.bucket)]);
            return;
        };
        let job = Job {
            key: next.key,
            permit,
            span: next.span,
        };
        if let Err(lost) = self.queue.send(job) {
            self.defer(vec![(lost.0.key, next.bucket)]);
        }
    }

    /// Hands keys back to the hot index, due [`DEFER`] from now. Without one (or if the
    /// write fails) they stay pending in the database, where the sweeper finds them.
    pub(crate) fn defer(&self, keys: Vec<(TaskKey, Bucket)>) {
        if keys.is_empty() {
            return;
        }
        metrics::counter!("chime_executor_deferred_total").increment(keys.len() as u64);
        let Some(index) = self.index.clone() else {
            return;
        };
        let due = self.clock.now().saturating_add(DEFER);
        let entries: Vec<HotEntry> = keys
            .into_iter()
            .map(|(key, bucket)| HotEntry::new(key, due, bucket))
            .collect();
        tokio::spawn(async move {
            if let Err(e) = index.add(&entries).await {
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
pub(crate) fn host_of(timer: &chime_domain::Timer) -> String {
    let url = timer.spec.callback.url.as_url();
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_domain::{SystemClock, TimerId, Timestamp};

    fn key(n: i64) -> TaskKey {
        TaskKey::new(TimerId::new(n).unwrap(), Timestamp::from_millis(1_000))
    }

    #[tokio::test]
    async fn a_host_at_its_cap_queues_then_defers_and_a_freed_slot_resumes_the_next() {
        let permits = Arc::new(Semaphore::new(10));
        let (queue, mut jobs) = mpsc::unbounded_channel();
        let hosts = Hosts::new(2, 2, permits.clone(), queue, None, Arc::new(SystemClock));
        let span = tracing::Span::none();
        let b = Bucket::from_stored(0);
        let run = |n| match hosts.admit("slow:80", key(n), b, &span) {
            Admission::Run(slot) => Some(slot),
            _ => None,
        };
        let first = run(1).unwrap();
        let _second = run(2).unwrap();
        assert!(matches!(
            hosts.admit("slow:80", key(3), b, &span),
            Admission::Queued
        ));
        assert!(matches!(
            hosts.admit("slow:80", key(4), b, &span),
            Admission::Queued
        ));
        assert!(matches!(
            hosts.admit("slow:80", key(5), b, &span),
            Admission::Defer
        ));
        // Another host is not held up.
        assert!(run_other(&hosts, &span));
        assert_eq!(hosts.waiting(), 2);
        drop(first);
        let resumed = jobs.recv().await.unwrap();
        assert_eq!(resumed.key, key(3));
        assert_eq!(
            permits.available_permits(),
            9,
            "the resumed key holds a permit"
        );
        assert_eq!(hosts.waiting(), 1);
    }

    fn run_other(hosts: &Arc<Hosts>, span: &tracing::Span) -> bool {
        matches!(
            hosts.admit("fast:80", key(9), Bucket::from_stored(0), span),
            Admission::Run(_)
        )
    }
}
