//! NATS JetStream and RabbitMQ delivery targets against real brokers: 1,000 occurrences each
//! consumed once from the machine's brokers, and none lost when a broker of the test's own is
//! killed and started again mid-run. What arrived is read from the broker (the stream, the
//! queue), never from Chime's tables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chime_e2e::brokers::{
    PrivateNats, PrivateRabbit, amqp_drain, amqp_queue, amqp_url, drop_amqp_queue,
    drop_nats_stream, nats_received, nats_stream, nats_url,
};
use chime_e2e::cluster::Cluster;
use chime_e2e::start_on;
use chime_e2e::timers::{due_over, now, one_shots_to, until};
use chime_storage::testkit;
use serde_json::{Value, json};

/// Retries that outlast a broker's restart: RabbitMQ takes a few seconds to come back, and
/// far longer on a machine busy with other tests (about two minutes of retries here).
fn patient_retry() -> Value {
    json!({"max_attempts": 25, "initial_backoff": "500ms", "max_backoff": "5s"})
}

/// 1,000 one-shots due over 10 s from 4 s on, delivering to `callback`.
async fn schedule(cluster: &Cluster, callback: Value) -> (HashSet<String>, i64) {
    let start = now() + 4_000;
    let due = due_over(start, 10_000, 1_000);
    let expected = one_shots_to(
        &cluster.rest,
        json!({"callback": callback, "retry": patient_retry()}),
        "b",
        &due,
    )
    .await;
    (expected, start)
}

/// What a run came to: lost keys and duplicates, printed and returned.
fn tally(what: &str, expected: &HashSet<String>, got: &HashMap<String, usize>) -> (usize, usize) {
    let lost = expected.iter().filter(|k| !got.contains_key(*k)).count();
    let duplicates: usize = got.values().map(|n| n - 1).sum();
    eprintln!(
        "{what}: {} of {} received, lost {lost}, duplicates {duplicates}",
        got.len(),
        expected.len()
    );
    (lost, duplicates)
}

/// Waits until the executors recorded a failed attempt (to be retried): the broker's loss
/// was noticed.
async fn until_a_failure(cluster: &Cluster) {
    until("a failed publish", Duration::from_secs(30), || async {
        let mut failed = 0.0;
        for e in &cluster.executors {
            failed += e
                .metrics()
                .await
                .lines()
                .filter(|l| {
                    l.starts_with("chime_executor_outcomes_total")
                        && ["retrying", "failed", "dead"]
                            .iter()
                            .any(|s| l.contains(&format!("status=\"{s}\"")))
                })
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        failed > 0.0
    })
    .await;
}

fn unique(prefix: &str) -> String {
    format!("{prefix}{:08x}", rand::random::<u32>())
}

async fn nats_run(test: &'static str, broker: &str, restart: Option<&mut PrivateNats>) {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let stream = unique("CHIME_E2E_");
    let subject = nats_stream(broker, &stream).await;
    let env = vec![("CHIME_BROKERS", broker.to_owned())];
    let mut cluster = start_on(test, &db, &redis, 1, 2, env).await;
    let callback = json!({"nats": {"url": broker, "subject": subject}, "body": "fired"});
    let (expected, start) = schedule(&cluster, callback).await;
    if let Some(nats) = restart {
        until("half-way", Duration::from_secs(30), || async {
            now() >= start + 5_000
        })
        .await;
        nats.kill9();
        until_a_failure(&cluster).await;
        nats.start_again();
    }
    let url = broker.to_owned();
    until(
        "every occurrence in the stream",
        Duration::from_secs(90),
        || {
            let (url, stream, expected) = (url.clone(), stream.clone(), expected.clone());
            async move {
                let got = nats_received(&url, &stream).await;
                expected.iter().all(|k| got.contains_key(k))
            }
        },
    )
    .await;
    let got = nats_received(broker, &stream).await;
    let (lost, duplicates) = tally(test, &expected, &got);
    assert_eq!(lost, 0);
    // JetStream drops a republish with a Msg-Id it has seen (within 2 min).
    assert_eq!(duplicates, 0);
    cluster.stop().await;
    drop_nats_stream(broker, &stream).await;
}

async fn amqp_run(test: &'static str, broker: &str, restart: Option<&mut PrivateRabbit>) {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let queue = unique("chime-e2e-");
    amqp_queue(broker, &queue).await;
    let env = vec![("CHIME_BROKERS", broker.to_owned())];
    let mut cluster = start_on(test, &db, &redis, 1, 2, env).await;
    let callback =
        json!({"amqp": {"url": broker, "exchange": "", "routing_key": queue}, "body": "fired"});
    let (expected, start) = schedule(&cluster, callback).await;
    let restarted = restart.is_some();
    if let Some(rabbit) = restart {
        until("half-way", Duration::from_secs(30), || async {
            now() >= start + 5_000
        })
        .await;
        rabbit.kill9();
        until_a_failure(&cluster).await;
        rabbit.start_again();
    }
    let mut got = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    while !expected.iter().all(|k| got.contains_key(k)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every occurrence arrived"
        );
        if amqp_drain(broker, &queue, &mut got).await == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let (lost, duplicates) = tally(test, &expected, &got);
    assert_eq!(lost, 0);
    // AMQP has no de-duplication: only a publish whose confirmation the broker's death cut
    // off is published again.
    let most = if restarted { 20 } else { 0 };
    assert!(duplicates <= most, "{duplicates} duplicates");
    cluster.stop().await;
    drop_amqp_queue(broker, &queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jetstream_takes_each_occurrence_once() {
    nats_run("nats-once", &nats_url(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restarted_mid_run_loses_nothing() {
    let mut nats = PrivateNats::start();
    let url = nats.url();
    nats_run("nats-restart", &url, Some(&mut nats)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_takes_each_occurrence_once() {
    amqp_run("amqp-once", &amqp_url(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_restarted_mid_run_loses_nothing() {
    let mut rabbit = PrivateRabbit::start();
    let url = rabbit.url();
    amqp_run("amqp-restart", &url, Some(&mut rabbit)).await;
}
