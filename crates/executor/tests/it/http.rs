//! The callback client over real sockets: what every callback carries, how long it waits,
//! what it keeps of an answer, which failures may be retried, and that https is TLS with
//! the certificate checked.

use std::time::{Duration, Instant};

use chime_domain::{CallbackInput, NetworkPolicy, OccurrenceStatus, SystemClock, Timer};
use chime_executor::{Attempt, CallbackSettings, DeliveryTarget, HttpTarget};
use chime_test_support::pki::TestCa;
use chime_test_support::sink::Sink;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{self, claimed};

fn target(output_cap: usize) -> HttpTarget {
    HttpTarget::new(CallbackSettings {
        output_cap,
        networks: NetworkPolicy::default().with_loopback(),
        ..CallbackSettings::default()
    })
    .unwrap()
}

fn timer(callback: CallbackInput) -> Timer {
    support::timer(callback)
}

fn to(url: String) -> CallbackInput {
    CallbackInput {
        url: Some(url),
        ..Default::default()
    }
}

async fn deliver(target: &HttpTarget, callback: CallbackInput) -> Attempt {
    let t = timer(callback);
    target.deliver(&t, claimed(&t), &SystemClock).await
}

/// A server on a loopback port that reads one request's head and answers `response` as
/// written, or never answers when it is `None`.
async fn answering(response: Option<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        match response {
            Some(response) => {
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            }
            // Hold the connection open, silent, until the client gives up.
            None => {
                let _ = stream.read(&mut buf).await;
            }
        }
    });
    url
}

#[tokio::test]
async fn a_callback_names_its_sender_unless_the_timer_does() {
    let sink = Sink::start().await.unwrap();
    let t = target(1024);
    let plain = deliver(&t, to(sink.url("/plain"))).await;
    let mut own = to(sink.url("/own"));
    own.headers
        .insert("User-Agent".into(), "billing-cron/2".into());
    own.method = Some("PUT".into());
    own.body = Some(r#"{"run":"nightly"}"#.into());
    let own = deliver(&t, own).await;
    assert_eq!(plain.outcome.status, OccurrenceStatus::Succeeded);
    assert_eq!(own.outcome.status, OccurrenceStatus::Succeeded);
    assert_eq!(plain.outcome.output.as_deref(), Some("ok"));

    let received = sink.received();
    let plain = received.iter().find(|r| r.path == "/plain").unwrap();
    assert!(
        plain
            .header("user-agent")
            .unwrap()
            .starts_with("chime-executor/"),
        "{:?}",
        plain.headers
    );
    assert_eq!(plain.header("accept"), Some("*/*"));
    assert_eq!(plain.method, "POST");
    assert!(plain.header("idempotency-key").is_some());
    assert!(plain.header("traceparent").is_some());
    let own = received.iter().find(|r| r.path == "/own").unwrap();
    assert_eq!(own.header("user-agent"), Some("billing-cron/2"));
    assert_eq!(own.method, "PUT");
    assert_eq!(own.body, r#"{"run":"nightly"}"#);
}

#[tokio::test]
async fn an_answer_keeps_its_retry_after_and_the_first_bytes_of_its_body() {
    let body = "x".repeat(100_000);
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let url = answering(Some(response.into_bytes())).await;
    let attempt = deliver(&target(16), to(url)).await;
    assert_eq!(attempt.outcome.status, OccurrenceStatus::Failed);
    assert_eq!(attempt.outcome.http_status, Some(503));
    assert!(attempt.retryable, "a 503 may pass");
    assert_eq!(attempt.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(
        attempt.outcome.output.as_deref(),
        Some("x".repeat(16).as_str())
    );
    assert_eq!(
        attempt.outcome.error.as_deref(),
        Some("callback answered HTTP 503")
    );
}

#[tokio::test]
async fn a_callback_that_gets_no_answer_gives_up_at_its_timeout_and_may_be_retried() {
    let url = answering(None).await;
    let mut callback = to(url);
    callback.timeout = Some("1s".into());
    let started = Instant::now();
    let attempt = deliver(&target(1024), callback).await;
    let took = started.elapsed();
    assert_eq!(attempt.outcome.status, OccurrenceStatus::Failed);
    assert!(attempt.retryable);
    assert_eq!(
        attempt.outcome.error.as_deref(),
        Some("callback timed out after 1s")
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_refused_connection_or_a_garbled_answer_may_be_retried() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let refused = deliver(&target(1024), to(format!("http://{closed}/hook"))).await;
    assert_eq!(refused.outcome.status, OccurrenceStatus::Failed);
    assert!(refused.retryable);
    let error = refused.outcome.error.unwrap();
    assert!(
        error.starts_with("cannot connect to the callback:"),
        "{error}"
    );

    let url = answering(Some(b"not http at all\r\n\r\n".to_vec())).await;
    let garbled = deliver(&target(1024), to(url)).await;
    assert_eq!(garbled.outcome.status, OccurrenceStatus::Failed);
    assert!(garbled.retryable);
    assert_eq!(garbled.outcome.http_status, None);
    let error = garbled.outcome.error.unwrap();
    assert!(error.starts_with("callback failed:"), "{error}");
}

#[tokio::test]
async fn https_is_tls_and_a_certificate_no_root_vouches_for_is_refused() {
    let ca = TestCa::new("nobody trusts this");
    let leaf = ca.leaf("callee");
    let tls = chime_runtime::Tls::from_pem(leaf.cert, leaf.key, None, None).unwrap();
    let sink = Sink::start_tls(&tls).await.unwrap();
    let attempt = deliver(&target(1024), to(sink.url("/hook"))).await;
    assert_eq!(attempt.outcome.status, OccurrenceStatus::Failed);
    // The receiver may fix its certificate; a later attempt may pass.
    assert!(attempt.retryable);
    let error = attempt.outcome.error.unwrap();
    assert!(
        error.starts_with("cannot connect to the callback:") && error.contains("certificate"),
        "{error}"
    );
    assert!(sink.received().is_empty());
}
