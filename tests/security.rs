//! Signed callbacks from real processes, verified with the `standardwebhooks` package from
//! PyPI (an implementation independent of Chime's): every callback verifies with its app's
//! secret, a tampered body or timestamp does not, `webhook-id` is the same on every attempt
//! of an occurrence, and after a rotation callbacks carry both signatures, each verifying
//! with its own secret.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chime_e2e::timers::{client, create};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use serde_json::{Value, json};

const APP: &str = "signed";

/// A venv with `standardwebhooks` under target/, made on first use.
fn python() -> PathBuf {
    let dir = chime_e2e::bin_dir().join("../pytools-webhooks");
    let python = dir.join("bin/python");
    if !python.exists() {
        let venv = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&dir)
            .status()
            .expect("python3");
        assert!(venv.success(), "python3 -m venv failed");
        let pip = Command::new(dir.join("bin/pip"))
            .args(["install", "-q", "standardwebhooks==1.1.0"])
            .status()
            .expect("pip");
        assert!(pip.success(), "pip install standardwebhooks failed");
    }
    python
}

/// What the independent library says of each message, verified with `secret`.
fn verify(secret: &str, messages: &[Value]) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/verify_webhooks.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = json!({"secret": secret, "messages": messages}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn message(r: &Received) -> Value {
    let header = |n: &str| r.header(n).unwrap_or_default().to_owned();
    json!({
        "headers": {
            "webhook-id": header("webhook-id"),
            "webhook-timestamp": header("webhook-timestamp"),
            "webhook-signature": header("webhook-signature"),
        },
        "body": r.body,
    })
}

/// Waits until the sink holds `n` requests for `path`.
async fn received(sink: &Sink, path: &str, n: usize) -> Vec<Received> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: Vec<Received> = sink
            .received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: {} of {n} arrived",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn secret(rest: &str, rotate: bool) -> Value {
    let url = format!("{rest}/v1/apps/{APP}/signing-secret");
    let req = if rotate {
        client().post(format!("{url}/rotate"))
    } else {
        client().get(url)
    };
    let answer = req.send().await.unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

/// A one-shot of [`APP`] due in a second, calling `path` on the sink with `body`.
async fn one_shot(rest: &str, sink: &Sink, name: &str, path: &str, body: &str) {
    create(
        rest,
        json!({"app": APP, "name": name, "schedule": {"after": "1s"},
               "callback": {"url": sink.url(path), "method": "POST", "body": body},
               "retry": {"max_attempts": 3, "initial_backoff": "1s"}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_are_signed_the_standard_webhooks_way() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let sink = Sink::start().await.unwrap();
    let mut c = chime_e2e::start_on("security-signed", &db, &redis, 1, 1, vec![]).await;
    let first = secret(&c.rest, false).await;
    let first = first["secret"].as_str().unwrap().to_owned();
    assert!(first.starts_with("whsec_"), "{first}");

    // The first attempt fails, the retry succeeds: both signed, one webhook-id.
    sink.set_healthy(false);
    one_shot(&c.rest, &sink, "signed", "/switch", r#"{"kind":"nightly"}"#).await;
    let failed = received(&sink, "/switch", 1).await;
    sink.set_healthy(true);
    let both = received(&sink, "/switch", 2).await;
    assert_eq!(failed[0].header("webhook-id"), both[1].header("webhook-id"));
    assert_eq!(
        both[0].header("webhook-id"),
        both[0].header("idempotency-key"),
        "webhook-id names the occurrence"
    );
    let messages: Vec<Value> = both.iter().map(message).collect();
    assert_eq!(verify(&first, &messages), ["ok", "ok"]);

    // Tampering with the body or the timestamp fails verification.
    let mut body = messages[1].clone();
    body["body"] = json!(r#"{"kind":"hourly"}"#);
    let mut stamp = messages[1].clone();
    let ts: i64 = stamp["headers"]["webhook-timestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    stamp["headers"]["webhook-timestamp"] = json!((ts - 1).to_string());
    let other = format!("whsec_{}", "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk=");
    let verdicts = verify(&first, &[body, stamp]);
    assert!(
        verdicts.iter().all(|v| v.starts_with("refused")),
        "{verdicts:?}"
    );
    assert!(verify(&other, &messages[1..])[0].starts_with("refused"));

    // After a rotation: two signatures, each verifying with its own secret.
    let rotated = secret(&c.rest, true).await;
    let second = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(rotated["previous"], json!([first]));
    // Executors read secrets again within auth.cache_ttl (1 s); a callback after that
    // carries both.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let rotated_callback = loop {
        n += 1;
        let path = format!("/rotated-{n}");
        one_shot(&c.rest, &sink, &format!("rotated-{n}"), &path, "{}").await;
        let got = received(&sink, &path, 1).await.remove(0);
        let parts = got.header("webhook-signature").unwrap().split(' ').count();
        if parts == 2 {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "no callback carried both signatures"
        );
    };
    let m = [message(&rotated_callback)];
    assert_eq!(verify(&second, &m), ["ok"]);
    assert_eq!(verify(&first, &m), ["ok"]);
    c.stop().await;
}
