//! The SSRF guard at delivery: a callback to an address the policy blocks is refused before
//! any connection, by IP literal or by a host name that resolves there, and not retried.
//! A real loopback sink shows that the same callbacks go through once the range is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use crate::support::claimed;
use chime_domain::{CallbackInput, NetworkPolicy, OccurrenceStatus, SystemClock, Timer};
use std::net::IpAddr;
use std::sync::Arc;

use chime_executor::{CallbackSettings, DeliveryTarget, HostLookup, HttpTarget, SystemLookup};
use chime_test_support::sink::Sink;

fn target(networks: NetworkPolicy) -> HttpTarget {
    HttpTarget::new(CallbackSettings {
        networks,
        lookup: Arc::new(TestLookup),
        ..CallbackSettings::default()
    })
    .unwrap()
}

/// A resolver under the test's control: `inside.test` is loopback, `rebound.test` has a
/// public address and a loopback one (as a rebinding attacker's name would),
/// `metadata.test` is the cloud metadata endpoint, anything else the system's answer.
#[derive(Debug)]
struct TestLookup;

#[async_trait::async_trait]
impl HostLookup for TestLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(match host {
            "inside.test" => vec![IpAddr::from([127, 0, 0, 1])],
            "rebound.test" => vec![
                IpAddr::from([93, 184, 216, 34]),
                IpAddr::from([127, 0, 0, 1]),
            ],
            "metadata.test" => vec![IpAddr::from([169, 254, 169, 254])],
            other => SystemLookup.lookup(other).await?,
        })
    }
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
        // A host name is judged by what it resolves to, at delivery: every address.
        format!("http://localhost:{port}/hook"),
        format!("http://inside.test:{port}/hook"),
        format!("http://rebound.test:{port}/hook"),
        "http://metadata.test/latest/meta-data/".to_owned(),
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
        format!("http://inside.test:{port}/hook"),
    ] {
        let t = timer(url.clone());
        let attempt = open.deliver(&t, claimed(&t), &SystemClock).await;
        assert_eq!(attempt.outcome.status, OccurrenceStatus::Succeeded, "{url}");
    }
    assert_eq!(sink.received().len(), 3);
}

fn timer(url: String) -> Timer {
    support::timer(CallbackInput {
        url: Some(url),
        ..Default::default()
    })
}
