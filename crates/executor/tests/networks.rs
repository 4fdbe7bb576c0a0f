//! The SSRF guard at delivery: a callback to an address the policy blocks is refused before
//! any connection, by IP literal or by a host name that resolves there, and not retried.
//! A real loopback sink shows that the same callbacks go through once the range is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chime_domain::{
    Bucket, CallbackInput, ClaimedOccurrence, Clock, NetworkPolicy, OccurrenceStatus,
    ScheduleInput, SystemClock, TaskKey, Timer, TimerId,
};
use chime_executor::{CallbackSettings, DeliveryTarget, HttpTarget};
use chime_test_support::sink::Sink;

fn timer(url: String) -> Timer {
    let now = SystemClock.now();
    let mut spec = chime_storage::contract::spec_with(
        "ops",
        "guarded",
        &ScheduleInput {
            every: Some("1h".into()),
            ..Default::default()
        },
        now,
    );
    spec.callback = CallbackInput {
        url,
        ..Default::default()
    }
    .parse()
    .unwrap();
    Timer {
        id: TimerId::new(7).unwrap(),
        spec,
        enabled: true,
        version: 1,
        bucket: Bucket::from_stored(0),
        created_at: now,
        updated_at: now,
        deleted_at: None,
    }
}

fn claimed(t: &Timer) -> ClaimedOccurrence {
    let now = SystemClock.now();
    ClaimedOccurrence {
        key: TaskKey::new(t.id, now),
        timer_version: 1,
        bucket: t.bucket,
        attempt: 1,
        due: now,
    }
}

fn target(networks: NetworkPolicy) -> HttpTarget {
    HttpTarget::new(CallbackSettings {
        networks,
        ..CallbackSettings::default()
    })
    .unwrap()
}

#[tokio::test]
async fn callbacks_to_blocked_addresses_are_refused_before_connecting_and_not_retried() {
    let sink = Sink::start().await.unwrap();
    let port = sink
        .url("/")
        .rsplit_once(':')
        .map(|(_, p)| p.trim_end_matches('/').to_owned())
        .unwrap();
    let strict = target(NetworkPolicy::default());
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        // A host name is judged by what it resolves to, at delivery.
        format!("http://localhost:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let t = timer(url.clone());
        let attempt = strict.deliver(&t, claimed(&t), &SystemClock).await;
        assert_eq!(attempt.outcome.status, OccurrenceStatus::Failed, "{url}");
        assert!(!attempt.retryable, "{url}: a policy refusal is not retried");
        let error = attempt.outcome.error.unwrap_or_default();
        assert!(
            error.contains("blocked by the callback network policy"),
            "{url}: {error}"
        );
    }
    assert!(sink.received().is_empty(), "nothing reached the sink");

    let open = target(NetworkPolicy::default().with_loopback());
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://localhost:{port}/hook"),
    ] {
        let t = timer(url.clone());
        let attempt = open.deliver(&t, claimed(&t), &SystemClock).await;
        assert_eq!(attempt.outcome.status, OccurrenceStatus::Succeeded, "{url}");
    }
    assert_eq!(sink.received().len(), 2);
}
