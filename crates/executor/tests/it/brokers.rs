//! The broker targets' allow-list at delivery: a timer naming a broker that is not (or no
//! longer) in CHIME_BROKERS is refused before any connection, and not retried. (Deliveries
//! to real brokers are the end-to-end tests in `tests/brokers.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::support::{claimed, timer};
use chime_domain::{AmqpInput, BrokerUrl, CallbackInput, NatsInput, OccurrenceStatus, SystemClock};
use chime_executor::{AmqpTarget, DeliveryTarget, NatsTarget};

#[tokio::test]
async fn brokers_outside_the_allow_list_are_refused_for_good() {
    // Allowed: another server. The timers name a broker nothing listens on: were the list not
    // checked, the attempt would fail to connect and be retried instead.
    let allowed = Arc::new(vec![BrokerUrl::parse("nats://10.9.9.9:4222").unwrap()]);
    let nats = timer(CallbackInput {
        nats: Some(NatsInput {
            url: "nats://127.0.0.1:1".into(),
            subject: "a.b".into(),
        }),
        ..Default::default()
    });
    let attempt = NatsTarget::new(allowed.clone())
        .deliver(&nats, claimed(&nats), &SystemClock)
        .await;
    assert_eq!(attempt.outcome.status, OccurrenceStatus::Failed);
    assert!(!attempt.retryable);
    assert!(
        attempt
            .outcome
            .error
            .as_deref()
            .unwrap()
            .contains("CHIME_BROKERS"),
        "{:?}",
        attempt.outcome.error
    );
    let amqp = timer(CallbackInput {
        amqp: Some(AmqpInput {
            url: "amqp://u:secret@127.0.0.1:1/%2f".into(),
            exchange: String::new(),
            routing_key: "q".into(),
        }),
        ..Default::default()
    });
    let attempt = AmqpTarget::new(allowed)
        .deliver(&amqp, claimed(&amqp), &SystemClock)
        .await;
    assert!(!attempt.retryable);
    let error = attempt.outcome.error.unwrap();
    assert!(
        error.contains("CHIME_BROKERS") && !error.contains("secret"),
        "{error}"
    );
}
