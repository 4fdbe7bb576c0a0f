//! The executor against real PostgreSQL, calling back a real loopback HTTP sink.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    AppName, CallbackInput, ClaimedOccurrence, Clock, Occurrence, OccurrenceStatus, Outcome,
    SystemClock, TargetKind, TaskKey, Timer,
};
use chime_executor::{
    Attempt, CallbackSettings, DeliveryTarget, Executor, ExecutorSettings, HttpTarget, Stopping,
    Targets,
};
use chime_storage::{Activity, OccurrenceStore, TimerStore};

use crate::support::pg::*;

#[tokio::test]
async fn fires_the_callback_with_chime_headers_and_records_success() {
    let s = setup().await;
    let t = timer(&s, "hook", s.sink.url("/hook"), &[("x-job", "invoice")]).await;
    let key = due_now(&s, &t, 0).await;
    let exec = executor(&s, 16);
    assert_eq!(exec.offer(&[key]).unwrap().accepted, 1);
    let run = finished(&s, key).await;
    assert_eq!(run.status, OccurrenceStatus::Succeeded);
    assert_eq!(run.attempt, 1);
    assert_eq!(run.http_status, Some(200));
    assert_eq!(run.output.as_deref(), Some("ok"));
    let late = run.lateness_ms.unwrap();
    assert!(late >= 0, "fired before due: {late} ms");

    let got = s.sink.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/hook"));
    assert_eq!(r.body, "{\"kind\":\"test\"}");
    assert_eq!(r.header("x-job"), Some("invoice"));
    assert_eq!(r.header("idempotency-key"), Some(key.to_string().as_str()));
    assert_eq!(
        r.header("x-chime-timer-id"),
        Some(t.id.to_string().as_str())
    );
    assert_eq!(
        r.header("x-chime-scheduled-at"),
        Some(key.run_at.to_rfc3339().as_str())
    );
    assert_eq!(r.header("x-chime-attempt"), Some("1"));
    // The send time is the run's fired_at, so a callee can split lateness the same way.
    assert_eq!(
        r.header("x-chime-sent-at"),
        Some(run.fired_at.unwrap().to_rfc3339().as_str())
    );
    let tp = r.header("traceparent").unwrap();
    assert!(
        tp.starts_with("00-") && tp.ends_with("-01") && tp.len() == 55,
        "{tp}"
    );
    // The permit comes back with the outcome, just after it is written.
    wait_for("the permit back", || async { exec.in_flight() == 0 }).await;
}

#[tokio::test]
async fn a_key_offered_ahead_is_claimed_at_once_and_fired_at_its_due_time() {
    let s = setup().await;
    let t = timer(&s, "ahead", s.sink.url("/ahead"), &[]).await;
    let key = due_now(&s, &t, 300).await;
    let exec = executor(&s, 16);
    assert_eq!(exec.offer(&[key]).unwrap().accepted, 1);
    occurrence_when(&s, key, "the claim", |o| {
        o.status == OccurrenceStatus::Running
    })
    .await;
    let run = finished(&s, key).await;
    assert_eq!(run.status, OccurrenceStatus::Succeeded);
    let got = s.sink.received();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].at_ms >= key.run_at.as_millis(),
        "called back {} ms before due",
        key.run_at.as_millis() - got[0].at_ms
    );
}

#[tokio::test]
async fn skips_disabled_changed_and_deleted_timers_without_calling_back() {
    let s = setup().await;
    let off = timer(&s, "off", s.sink.url("/"), &[]).await;
    let changed = timer(&s, "changed", s.sink.url("/"), &[]).await;
    let gone = timer(&s, "gone", s.sink.url("/"), &[]).await;
    let keys = [
        due_now(&s, &off, 0).await,
        due_now(&s, &changed, 0).await,
        due_now(&s, &gone, 0).await,
    ];
    s.db.store
        .set_timer_enabled(off.id, false, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap();
    s.db.store
        .update_timer(
            changed.id,
            None,
            changed.spec.clone(),
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap();
    s.db.store.delete_timer(gone.id).await.unwrap();

    let exec = executor(&s, 16);
    assert_eq!(exec.offer(&keys).unwrap().accepted, 3);
    let reasons: Vec<_> = [
        finished(&s, keys[0]).await,
        finished(&s, keys[1]).await,
        finished(&s, keys[2]).await,
    ]
    .into_iter()
    .map(|o| {
        assert_eq!(o.status, OccurrenceStatus::Skipped);
        o.error.unwrap()
    })
    .collect();
    assert_eq!(reasons[0], "timer disabled");
    assert!(reasons[1].starts_with("timer changed"), "{}", reasons[1]);
    assert_eq!(reasons[2], "timer deleted");
    assert_eq!(s.sink.count(), 0);
}

/// The executor keeps timers between claims; a change (a new version) is seen at the next
/// claim, so an occurrence of the old version is skipped and one of the new version calls the
/// new callback, never the cached one.
#[tokio::test]
async fn a_timer_changed_after_it_was_cached_is_read_again() {
    let s = setup().await;
    let t = timer(&s, "cached", s.sink.url("/old"), &[]).await;
    let exec = executor(&s, 16);
    let first = due_now(&s, &t, 0).await;
    assert_eq!(exec.offer(&[first]).unwrap().accepted, 1);
    assert_eq!(
        finished(&s, first).await.status,
        OccurrenceStatus::Succeeded
    );

    let mut spec = t.spec.clone();
    spec.callback = CallbackInput {
        url: Some(s.sink.url("/new")),
        ..Default::default()
    }
    .parse()
    .unwrap();
    let updated =
        s.db.store
            .update_timer(t.id, None, spec, chime_domain::Horizon::DEFAULT)
            .await
            .unwrap()
            .timer;
    let old = due_now(&s, &t, 10).await;
    let new = due_now(&s, &updated, 20).await;
    assert_eq!(exec.offer(&[old, new]).unwrap().accepted, 2);
    let skipped = finished(&s, old).await;
    assert_eq!(skipped.status, OccurrenceStatus::Skipped);
    assert!(skipped.error.unwrap().starts_with("timer changed"));
    assert_eq!(finished(&s, new).await.status, OccurrenceStatus::Succeeded);
    let paths: Vec<String> = s.sink.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, vec!["/old".to_owned(), "/new".to_owned()]);
}

/// Waits until `key` left pending and running: an outcome, final or a retry.
async fn settled(s: &Setup, key: TaskKey) -> Occurrence {
    let store = s.db.store.clone();
    wait_for("an outcome", || {
        let store = store.clone();
        async move {
            store.get_occurrence(key).await.unwrap().is_some_and(|o| {
                !matches!(
                    o.status,
                    OccurrenceStatus::Pending | OccurrenceStatus::Running
                )
            })
        }
    })
    .await;
    store.get_occurrence(key).await.unwrap().unwrap()
}

#[tokio::test]
async fn failures_are_retried_failed_or_dead_by_kind_and_policy() {
    let s = setup().await;
    let refused = {
        // A port nobody listens on: bind, note it, release it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e503 = timer(&s, "e503", s.sink.url("/status/503"), &[]).await;
    let e400 = timer(&s, "e400", s.sink.url("/status/400"), &[]).await;
    let down = timer(&s, "down", format!("http://{refused}/"), &[]).await;
    // https to a plain-HTTP server: the TLS handshake fails, a transport failure.
    let tls = timer(&s, "tls", format!("https://{}/", s.sink.addr()), &[]).await;
    let last = timer(&s, "last", s.sink.url("/status/500"), &[]).await;
    let last = with_policy(&s, last, 1, false).await;
    let amo = timer(&s, "amo", s.sink.url("/status/500"), &[]).await;
    let amo = with_policy(&s, amo, 3, true).await;
    let keys = [
        due_now(&s, &e503, 0).await,
        due_now(&s, &e400, 0).await,
        due_now(&s, &down, 0).await,
        due_now(&s, &tls, 0).await,
        due_now(&s, &last, 0).await,
        due_now(&s, &amo, 0).await,
    ];
    let exec = executor(&s, 16);
    exec.offer(&keys).unwrap();
    let [r503, r400, rdown, rtls, rlast, ramo] = [
        settled(&s, keys[0]).await,
        settled(&s, keys[1]).await,
        settled(&s, keys[2]).await,
        settled(&s, keys[3]).await,
        settled(&s, keys[4]).await,
        settled(&s, keys[5]).await,
    ];
    // 5xx, refused, TLS: retried after the first backoff (1 s, jitter keeps ≥ half).
    for r in [&r503, &rdown, &rtls] {
        assert_eq!(r.status, OccurrenceStatus::Retrying, "{r:?}");
        let wait = r.next_attempt_at.unwrap().as_millis() - r.fired_at.unwrap().as_millis();
        assert!((400..=1_100).contains(&wait), "{wait} ms");
        assert_eq!(r.attempt, 1);
    }
    assert_eq!(r503.http_status, Some(503));
    assert_eq!(r503.error.as_deref(), Some("callback answered HTTP 503"));
    assert!(
        rdown.error.as_deref().unwrap().contains("connect"),
        "{:?}",
        rdown.error
    );
    // 400: not retryable.
    assert_eq!(r400.status, OccurrenceStatus::Failed);
    assert_eq!(r400.http_status, Some(400));
    // The last attempt: dead.
    assert_eq!(rlast.status, OccurrenceStatus::Dead);
    // at_most_once: never retried.
    assert_eq!(ramo.status, OccurrenceStatus::Failed);
}

#[tokio::test]
async fn says_full_beyond_max_in_flight_and_takes_work_again_once_done() {
    let s = setup().await;
    let slow = timer(&s, "slow", s.sink.url("/delay/300"), &[]).await;
    // On time: a backlog would be held to a quarter of the permits.
    let mut keys = Vec::new();
    for i in 0..5 {
        keys.push(due_now(&s, &slow, i).await);
    }
    let exec = executor(&s, 2);
    let first = exec.offer(&keys).unwrap();
    assert_eq!((first.accepted, first.available), (2, 0));
    assert_eq!(exec.offer(&keys[2..]).unwrap().accepted, 0, "full");
    wait_for("room", || async { exec.in_flight() == 0 }).await;
    // Keys on time again: the first ones are a backlog by now.
    let more = [due_now(&s, &slow, 0).await, due_now(&s, &slow, 1).await];
    assert_eq!(exec.offer(&more).unwrap().accepted, 2);
}

#[tokio::test]
async fn two_executors_offered_the_same_key_call_back_once() {
    let s = setup().await;
    let t = timer(&s, "once", s.sink.url("/"), &[]).await;
    let mut keys = Vec::new();
    for i in 0..50 {
        keys.push(due_now(&s, &t, -i * 10_000).await);
    }
    let (a, b) = (executor(&s, 200), executor(&s, 100));
    // Twice to the same executor as well (both land in one claim batch), and to another.
    a.offer(&[keys.clone(), keys.clone()].concat()).unwrap();
    b.offer(&keys).unwrap();
    wait_for("both to finish", || async {
        a.in_flight() == 0 && b.in_flight() == 0
    })
    .await;
    assert_eq!(s.sink.count(), 50);
    let mut seen: Vec<_> = s
        .sink
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").unwrap().to_owned())
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 50);
}

#[tokio::test]
async fn drain_finishes_accepted_work_then_refuses_more() {
    let s = setup().await;
    let slow = timer(&s, "slow", s.sink.url("/delay/200"), &[]).await;
    let mut keys = Vec::new();
    for i in 0..10 {
        keys.push(due_now(&s, &slow, -i * 10_000).await);
    }
    let exec = executor(&s, 100);
    assert_eq!(exec.offer(&keys).unwrap().accepted, 10);
    assert_eq!(exec.drain(Duration::from_secs(10)).await, 0);
    assert_eq!(s.sink.count(), 10);
    for k in &keys {
        let o = s.db.store.get_occurrence(*k).await.unwrap().unwrap();
        assert_eq!(o.status, OccurrenceStatus::Succeeded, "{k}");
    }
    assert_eq!(exec.offer(&keys), Err(Stopping));
}

#[tokio::test]
async fn execute_over_grpc() {
    use chime_proto::v1::executor_service_client::ExecutorServiceClient;
    use chime_proto::v1::{ExecuteRequest, Task};

    let s = setup().await;
    let t = timer(&s, "grpc", s.sink.url("/"), &[]).await;
    let key = due_now(&s, &t, 0).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(chime_executor::grpc::serve(
        executor(&s, 8),
        listener,
        None,
        Arc::new(chime_runtime::admin::AlwaysReady),
        stop.clone(),
        Duration::from_secs(5),
        None,
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = ExecutorServiceClient::new(channel);
    let task = |k: TaskKey| Task {
        timer_id: k.timer_id.get(),
        run_at_ms: k.run_at.as_millis(),
    };
    let answer = client
        .execute(ExecuteRequest {
            tasks: vec![task(key)],
            on_time: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((answer.accepted, answer.available), (1, 7));
    let bad = client
        .execute(ExecuteRequest {
            tasks: vec![Task {
                timer_id: 0,
                run_at_ms: 1,
            }],
            on_time: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    // The scheduler's word on which keys are on time holds: seven overdue keys it calls on
    // time are taken (at most one permit is still held), where a backlog may hold only two
    // of the eight. (No occurrences: their claims find nothing to call.)
    let overdue: Vec<Task> = (1..=7)
        .map(|i| Task {
            timer_id: key.timer_id.get(),
            run_at_ms: key.run_at.as_millis() - 10_000 - i,
        })
        .collect();
    let answer = client
        .execute(ExecuteRequest {
            tasks: overdue,
            on_time: Some(7),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.accepted, 7);
    stop.cancel();
    server.await.unwrap().unwrap();
    // Shutdown drained the accepted key before the server stopped.
    assert_eq!(s.sink.count(), 1);
}

#[tokio::test]
async fn a_second_full_wave_of_callbacks_reuses_the_first_waves_connections() {
    const WAVE: usize = 100;
    let s = setup().await;
    // Slow answers keep a whole wave in flight at once, so it needs WAVE connections.
    let t = timer(&s, "wave", s.sink.url("/delay/300"), &[]).await;
    let exec = executor(&s, WAVE);
    for wave in 0..2 {
        // On time (a backlog would be held to a quarter of the permits), and distinct.
        let now = SystemClock.now();
        let keys: Vec<TaskKey> = (0..WAVE)
            .map(|i| TaskKey::new(t.id, now.add_millis((wave * WAVE + i) as i64)))
            .collect();
        insert(&s, &t, &keys).await;
        assert_eq!(exec.offer(&keys).unwrap().accepted, WAVE);
        for key in keys {
            assert_eq!(finished(&s, key).await.status, OccurrenceStatus::Succeeded);
        }
    }
    assert_eq!(s.sink.count(), 2 * WAVE);
    assert_eq!(
        s.sink.connections(),
        WAVE,
        "the second wave found every connection of the first idle in the pool"
    );
}

/// A target that delivers nowhere: it records each attempt and answers as told.
struct RecordingTarget {
    seen: std::sync::Mutex<Vec<(TaskKey, u32)>>,
    succeed: bool,
}

#[async_trait::async_trait]
impl DeliveryTarget for RecordingTarget {
    async fn deliver(
        &self,
        _: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        self.seen
            .lock()
            .unwrap()
            .push((occurrence.key, occurrence.attempt));
        let status = if self.succeed {
            OccurrenceStatus::Succeeded
        } else {
            OccurrenceStatus::Failed
        };
        Attempt {
            outcome: Outcome::ended(
                occurrence.key,
                occurrence.attempt,
                status,
                Some(clock.now()),
                (!self.succeed).then(|| "the receiver said no".to_owned()),
            ),
            retryable: true,
            retry_after: None,
        }
    }
}

#[tokio::test]
async fn deliveries_go_through_the_target_of_the_timers_kind_with_the_same_retry_policy() {
    let s = setup().await;
    let config = chime_runtime::Config::default();
    let run_with = |succeed: bool| {
        let target = Arc::new(RecordingTarget {
            seen: std::sync::Mutex::new(Vec::new()),
            succeed,
        });
        let targets = Targets::new(HttpTarget::new(CallbackSettings::default()).unwrap())
            .with(TargetKind::Http, target.clone());
        let exec = Executor::start(
            s.db.store(),
            s.db.store(),
            None,
            Arc::new(SystemClock),
            targets,
            ExecutorSettings::from_config(&config),
        );
        (exec, target)
    };

    let t = timer(&s, "elsewhere", s.sink.url("/hook"), &[]).await;
    let ok = due_now(&s, &t, 0).await;
    let (exec, target) = run_with(true);
    assert_eq!(exec.offer(&[ok]).unwrap().accepted, 1);
    assert_eq!(finished(&s, ok).await.status, OccurrenceStatus::Succeeded);
    assert_eq!(*target.seen.lock().unwrap(), vec![(ok, 1)]);

    // A retryable failure is retried by the timer's policy, as for HTTP.
    let refused = due_now(&s, &t, 1).await;
    let (exec, target) = run_with(false);
    assert_eq!(exec.offer(&[refused]).unwrap().accepted, 1);
    let run = occurrence_when(&s, refused, "a retry", |o| {
        o.status == OccurrenceStatus::Retrying
    })
    .await;
    assert_eq!(run.error.as_deref(), Some("the receiver said no"));
    assert_eq!(*target.seen.lock().unwrap(), vec![(refused, 1)]);
    // Nothing went over HTTP.
    assert!(s.sink.received().is_empty());
}

#[tokio::test]
async fn attempts_are_tallied_per_app_and_written_by_the_drain() {
    let s = setup().await;
    let ok = timer(&s, "tally-ok", s.sink.url("/ok"), &[]).await;
    let bad = timer(&s, "tally-bad", s.sink.url("/status/400"), &[]).await;
    let mut config = chime_runtime::Config::default();
    config.callbacks.allow_networks = vec!["127.0.0.0/8".into()];
    let exec = Executor::start_with(
        s.db.store(),
        s.db.store(),
        None,
        Some(s.db.store()),
        Arc::new(SystemClock),
        Targets::new(HttpTarget::new(CallbackSettings::from_config(&config)).unwrap()),
        ExecutorSettings::from_config(&config),
    );
    let keys = [due_now(&s, &ok, 0).await, due_now(&s, &bad, 0).await];
    assert_eq!(exec.offer(&keys).unwrap().accepted, 2);
    for key in keys {
        finished(&s, key).await;
    }
    // Written every few seconds, and once more when the executor drains.
    assert_eq!(exec.drain(Duration::from_secs(5)).await, 0);
    let tallies =
        s.db.store
            .read_activity(
                Some(&AppName::parse("ops").unwrap()),
                SystemClock.now().add_millis(-120_000),
            )
            .await
            .unwrap();
    let mut total = chime_domain::Counts::default();
    for t in &tallies {
        total.merge(&t.counts);
    }
    assert_eq!(
        (total.fired, total.succeeded, total.failed, total.dead),
        (2, 1, 1, 0),
        "{tallies:?}"
    );
    assert!(total.lateness_quantile_ms(0.5).is_some());
}
