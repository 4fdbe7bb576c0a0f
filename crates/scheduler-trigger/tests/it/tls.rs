//! Mutual TLS between schedulers and executors, with certificates made in the test: an
//! executor that requires client certificates takes keys from a scheduler presenting one
//! signed by its client CA, over a DNS endpoint checked against the name; a scheduler without
//! a certificate, with one from another CA, or over plain TCP hands nothing off.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{SystemClock, TaskKey, TimerId, Timestamp};
use chime_executor::{CallbackSettings, Executor, ExecutorSettings, HttpTarget, Targets};
use chime_runtime::Tls;
use chime_scheduler::{Endpoints, GrpcExecutors, Handoff};
use chime_test_support::pki::TestCa;
use tokio_util::sync::CancellationToken;

fn keys(n: i64) -> Vec<TaskKey> {
    (1..=n)
        .map(|i| TaskKey::new(TimerId::new(i).unwrap(), Timestamp::from_millis(1_000)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_take_work_only_from_schedulers_with_a_trusted_certificate() {
    let servers = TestCa::new("chime servers");
    let clients = TestCa::new("chime clients");
    let executor_cert = servers.leaf("executor");
    let executor_tls = Tls::from_pem(
        executor_cert.cert,
        executor_cert.key,
        Some(clients.cert.clone()),
        None,
    )
    .unwrap();
    assert!(executor_tls.mutual());

    let db = chime_storage::testkit::sqlite().await;
    let executor = Executor::start(
        db.store(),
        db.store(),
        None,
        Arc::new(SystemClock),
        Targets::new(HttpTarget::new(CallbackSettings::default()).unwrap()),
        ExecutorSettings::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let server = tokio::spawn(chime_executor::grpc::serve(
        executor,
        listener,
        None,
        Arc::new(chime_runtime::admin::AlwaysReady),
        stop.clone(),
        Duration::from_secs(1),
        Some(executor_tls),
    ));

    let dns = || Endpoints::Dns {
        host: "localhost".into(),
        port,
    };
    let scheduler_cert = clients.leaf("scheduler");
    let trusted = Tls::from_pem(
        scheduler_cert.cert,
        scheduler_cert.key,
        None,
        Some(servers.cert.clone()),
    )
    .unwrap();
    let fleet = GrpcExecutors::with_tls(dns(), Some(trusted.grpc_client())).await;
    assert!(
        fleet
            .targets()
            .await
            .iter()
            .all(|t| t.starts_with("https://"))
    );
    assert_eq!(
        fleet.hand_off(&keys(3)).await,
        3,
        "a trusted scheduler hands off"
    );

    // No client certificate.
    let anonymous = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&servers.cert));
    let fleet = GrpcExecutors::with_tls(dns(), Some(anonymous)).await;
    assert_eq!(fleet.hand_off(&keys(3)).await, 0);
    // A certificate from a CA the executor does not trust for clients.
    let stranger = servers.leaf("stranger");
    let stranger = Tls::from_pem(
        stranger.cert,
        stranger.key,
        None,
        Some(servers.cert.clone()),
    )
    .unwrap();
    let fleet = GrpcExecutors::with_tls(dns(), Some(stranger.grpc_client())).await;
    assert_eq!(fleet.hand_off(&keys(3)).await, 0);
    // Plain TCP.
    let fleet = GrpcExecutors::new(dns()).await;
    assert_eq!(fleet.hand_off(&keys(3)).await, 0);

    stop.cancel();
    server.await.unwrap().unwrap();
}
