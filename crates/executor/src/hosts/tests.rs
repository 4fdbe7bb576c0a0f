//! The hosts' caps, queues and hand-backs, against real permits and claim lanes.

use super::*;
use chime_domain::{SystemClock, TimerId, Timestamp};
use tokio::sync::mpsc::UnboundedReceiver;

/// Two claim lanes, and their receivers: on time, backlog.
fn lanes() -> (Lanes, UnboundedReceiver<Job>, UnboundedReceiver<Job>) {
    let (on_time, on_time_jobs) = tokio::sync::mpsc::unbounded_channel();
    let (backlog, backlog_jobs) = tokio::sync::mpsc::unbounded_channel();
    (Lanes { on_time, backlog }, on_time_jobs, backlog_jobs)
}

fn key(n: i64) -> TaskKey {
    TaskKey::new(TimerId::new(n).unwrap(), Timestamp::from_millis(1_000))
}

/// Ten permits, `per_host` callbacks a host and `max_waiting` keys waiting, and the
/// backlog's claim queue.
fn capped(
    per_host: usize,
    max_waiting: usize,
) -> (Arc<Permits>, Arc<Hosts>, UnboundedReceiver<Job>) {
    let permits = Permits::new(10);
    let (lanes, _, jobs) = lanes();
    let clock = Arc::new(SystemClock);
    let hosts = Hosts::new(per_host, max_waiting, permits.clone(), lanes, None, clock);
    (permits, hosts, jobs)
}

#[tokio::test]
async fn a_host_at_its_cap_queues_then_defers_and_a_freed_slot_resumes_the_next() {
    let (permits, hosts, mut jobs) = capped(2, 2);
    let span = tracing::Span::none();
    let b = Bucket::from_stored(0);
    let run = |n| match hosts.admit("slow:80", key(n), b, false, &span, None) {
        Admission::Run(slot) => Some(slot),
        _ => None,
    };
    let first = run(1).unwrap();
    let _second = run(2).unwrap();
    assert!(matches!(
        hosts.admit("slow:80", key(3), b, false, &span, None),
        Admission::Queued
    ));
    assert!(matches!(
        hosts.admit("slow:80", key(4), b, false, &span, None),
        Admission::Queued
    ));
    assert!(matches!(
        hosts.admit("slow:80", key(5), b, false, &span, None),
        Admission::Defer
    ));
    // Another host is not held up.
    assert!(run_other(&hosts, &span));
    assert_eq!(hosts.waiting(), 2);
    drop(first);
    let resumed = jobs.recv().await.unwrap();
    assert_eq!(resumed.key, key(3));
    assert_eq!(permits.available(), 9, "the resumed key holds a permit");
    assert_eq!(hosts.waiting(), 1);
}

/// Admits backlog key `n` for `host` (bucket 0, no span).
fn admit(hosts: &Arc<Hosts>, host: &str, n: i64) -> Admission {
    hosts.admit(
        host,
        key(n),
        Bucket::from_stored(0),
        false,
        &tracing::Span::none(),
        None,
    )
}

/// Takes every free permit, for keys on time due at distinct instants (so no instant's
/// share stops it), and holds them.
fn take_all(permits: &Permits) -> Vec<crate::lanes::Permit> {
    let now = SystemClock.now();
    (0..)
        .map_while(|i| permits.try_take(true, now.add_millis(1_000 + i), now))
        .collect()
}

#[tokio::test]
async fn a_key_finding_no_permit_waits_while_its_host_runs_and_is_deferred_when_it_does_not() {
    let (permits, hosts, mut jobs) = capped(2, 10);
    let run = |n| match admit(&hosts, "h:80", n) {
        Admission::Run(slot) => slot,
        _ => panic!("{n} runs"),
    };
    let (first, second) = (run(1), run(2));
    for n in [3, 4] {
        assert!(matches!(admit(&hosts, "h:80", n), Admission::Queued));
    }
    let mut held = take_all(&permits);
    assert_eq!(permits.available(), 0);
    // No permit for key 3, but the host's second callback still runs: it waits, first.
    drop(first);
    assert_eq!(hosts.waiting(), 2, "nothing deferred");
    held.pop();
    drop(second);
    // Its job holds the permit until its outcome is written.
    let job = jobs.recv().await.unwrap();
    assert_eq!(job.key, key(3), "its place kept");
    assert_eq!(hosts.waiting(), 1);
    // Key 3 claimed and running, no permit left: when it ends with nothing else of the
    // host running, key 4 has no callback to wait for and is deferred.
    let third = run(3);
    assert_eq!(permits.available(), 0);
    drop(third);
    assert_eq!(hosts.waiting(), 0, "deferred");
    assert!(jobs.try_recv().is_err());
    drop(job);
}

#[tokio::test]
async fn a_host_found_fast_lets_as_many_waiting_keys_go_as_there_are_permits() {
    let (permits, hosts, mut jobs) = capped(1, 10);
    let Admission::Run(mut first) = admit(&hosts, "h:80", 1) else {
        panic!("first runs")
    };
    for n in 2..=6 {
        assert!(matches!(admit(&hosts, "h:80", n), Admission::Queued));
    }
    let mut held = take_all(&permits);
    held.truncate(held.len() - 2);
    assert_eq!(permits.available(), 2);
    // Answered at once: fast. Two permits free, so two go; three wait, none deferred.
    first.begin();
    drop(first);
    let resumed = [jobs.recv().await.unwrap(), jobs.recv().await.unwrap()];
    assert_eq!(resumed.each_ref().map(|j| j.key), [key(2), key(3)]);
    assert!(jobs.try_recv().is_err());
    assert_eq!(hosts.waiting(), 3);
}

#[tokio::test]
async fn keys_held_to_their_instants_share_keep_their_place_while_other_permits_stand_free() {
    let (permits, hosts, mut jobs) = capped(2, 10);
    let run = |n| match admit(&hosts, "h:80", n) {
        Admission::Run(mut slot) => {
            slot.begin();
            slot
        }
        _ => panic!("{n} runs"),
    };
    let (first, second) = (run(1), run(2));
    for n in 3..=7 {
        assert!(matches!(admit(&hosts, "h:80", n), Admission::Queued));
    }
    // The waiting keys' instant holds its whole share (a backlog alone: 7 of 10), three
    // permits stand free for other instants.
    let now = SystemClock.now();
    let mut held: Vec<_> = (0..)
        .map_while(|_| permits.try_take(false, key(1).run_at, now))
        .collect();
    assert_eq!((held.len(), permits.available()), (7, 3));
    // Fast, and three permits free, but none for these keys: all keep their place.
    drop(first);
    assert!(jobs.try_recv().is_err());
    assert_eq!(hosts.waiting(), 5, "nothing deferred while the host runs");
    // One of the instant's permits comes back: the head takes it, the next stays.
    held.pop();
    drop(second);
    assert_eq!(jobs.recv().await.unwrap().key, key(3));
    assert!(jobs.try_recv().is_err());
    // Nothing of the host runs now: the rest of that round (as many as were free) is
    // handed back; what is left waits.
    assert_eq!(hosts.waiting(), 1);
}

#[tokio::test]
async fn a_key_on_time_waits_ahead_of_a_backlog_for_its_host() {
    let permits = Permits::new(10);
    let (lanes, mut on_time_jobs, mut backlog_jobs) = lanes();
    let hosts = Hosts::new(1, 10, permits, lanes, None, Arc::new(SystemClock));
    let span = tracing::Span::none();
    let b = Bucket::from_stored(0);
    // `key(n)` is long overdue: a backlog.
    let Admission::Run(first) = hosts.admit("slow:80", key(1), b, false, &span, None) else {
        panic!("first runs")
    };
    for n in [2, 3] {
        assert!(matches!(
            hosts.admit("slow:80", key(n), b, false, &span, None),
            Admission::Queued
        ));
    }
    let on_time = TaskKey::new(TimerId::new(9).unwrap(), SystemClock.now());
    assert!(matches!(
        hosts.admit("slow:80", on_time, b, true, &span, None),
        Admission::Queued
    ));
    drop(first);
    // Resumed first, and into the claim queue for keys on time.
    assert_eq!(on_time_jobs.recv().await.unwrap().key, on_time);
    assert!(backlog_jobs.try_recv().is_err());
}

#[tokio::test]
async fn a_host_that_answers_fast_is_not_held_to_the_cap() {
    let permits = Permits::new(10);
    let (lanes, _on_time_jobs, _jobs) = lanes();
    let clock = chime_domain::ManualClock::new(Timestamp::from_millis(0));
    let hosts = Hosts::new(1, 4, permits, lanes, None, Arc::new(clock.clone()));
    let span = tracing::Span::none();
    let b = Bucket::from_stored(0);
    let admit = |n| hosts.admit("h:80", key(n), b, false, &span, None);
    // Not measured yet: capped.
    let Admission::Run(mut first) = admit(1) else {
        panic!("first runs")
    };
    assert!(matches!(admit(2), Admission::Queued));
    // Its callback answers in 5 ms: the host is fast and runs over the cap.
    first.begin();
    clock.advance(Duration::from_millis(5));
    drop(first);
    let held = admit(3);
    assert!(matches!(held, Admission::Run(_)));
    assert!(matches!(admit(4), Admission::Run(_)));
    // Slow answers make it capped again.
    let Admission::Run(mut slow) = admit(5) else {
        panic!("fast host runs")
    };
    slow.begin();
    clock.advance(Duration::from_secs(5));
    drop(slow);
    assert!(
        matches!(admit(6), Admission::Queued),
        "one held, at the cap"
    );
    drop(held);
}

#[test]
fn a_waiting_key_carries_only_a_small_timer() {
    let now = SystemClock.now();
    let mut spec = chime_storage::contract::spec_every("ops", "t", "1h", now);
    assert!(worth_carrying(&chime_storage::contract::unstored_timer(
        1,
        spec.clone(),
        now
    )));
    spec.callback.body =
        Some(chime_domain::CallbackBody::parse("x".repeat(CARRY_UP_TO + 1)).unwrap());
    assert!(!worth_carrying(&chime_storage::contract::unstored_timer(
        1, spec, now
    )));
}

fn run_other(hosts: &Arc<Hosts>, span: &tracing::Span) -> bool {
    matches!(
        hosts.admit("fast:80", key(9), Bucket::from_stored(0), false, span, None),
        Admission::Run(_)
    )
}
