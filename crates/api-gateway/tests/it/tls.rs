//! The gateway over TLS, with certificates made in the test: REST and gRPC answer over TLS
//! to clients trusting the CA (authentication still applies), and not over plain TCP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use chime_proto::v1 as pb;
use chime_test_support::pki::TestCa;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

#[tokio::test]
async fn rest_and_grpc_are_served_over_tls() {
    let ca = TestCa::new("chime test");
    let leaf = ca.leaf("gateway");
    let tls = chime_runtime::Tls::from_pem(leaf.cert, leaf.key, None, None).unwrap();
    let gw = support::start_tls(tls).await;
    let https = |path: &str| {
        gw.url(path)
            .replace("http://127.0.0.1", "https://localhost")
    };

    let trusting = chime_runtime::http_client()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca.cert).unwrap())
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ready = loop {
        match trusting.get(https("/readyz")).send().await {
            Ok(r) => break r,
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(ready.status(), 200);
    let anonymous = trusting.get(https("/v1/timers")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "TLS does not replace tokens");
    let created = trusting
        .post(https("/v1/timers"))
        .bearer_auth(support::BOOTSTRAP)
        .json(&support::timer_json("billing", "over-tls"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // A client that does not trust the CA, and a plain-TCP client, get nowhere.
    let untrusting = chime_runtime::http_client().build().unwrap();
    assert!(untrusting.get(https("/readyz")).send().await.is_err());
    let plain = gw.anonymous.get(gw.url("/readyz")).send().await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    let endpoint = gw.grpc.replace("http://127.0.0.1", "https://localhost");
    let channel = Channel::from_shared(endpoint)
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.cert)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = support::grpc_client_on(channel, Some(support::BOOTSTRAP));
    let listed = client
        .list_timers(pb::ListTimersRequest {
            app: "billing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.timers.len(), 1);
}
