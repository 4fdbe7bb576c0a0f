//! The real `chime-gateway` process: refuses to start without an admin token while auth is
//! required, refuses a schema that is behind, serves once migrated (to token holders only),
//! and exits cleanly on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chime_storage::testkit;
use chime_test_support::ports::free_port;

const TOKEN: &str = "binary-test-admin-token";

#[tokio::test]
async fn refuses_an_old_schema_then_serves_and_stops_on_sigterm() {
    let db = testkit::pg_unmigrated().await;
    let url = db.url();
    let gateway = env!("CARGO_BIN_EXE_chime-gateway");
    let (http, grpc) = (free_port(), free_port());
    let run = || {
        let mut cmd = Command::new(gateway);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CHIME_DATABASE_URL", &url)
            .env("CHIME_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("CHIME_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
            .env("CHIME_CALLBACK_ALLOW_NETWORKS", "127.0.0.0/8")
            .env("CHIME_LOG", "warn")
            .env("CHIME_BOOTSTRAP_TOKEN", TOKEN);
        cmd
    };

    let open = run().env_remove("CHIME_BOOTSTRAP_TOKEN").output().unwrap();
    assert!(!open.status.success());
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert!(
        stderr.contains("CHIME_BOOTSTRAP_TOKEN") && stderr.contains("CHIME_AUTH=off"),
        "{stderr}"
    );

    let refused = run().output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("chime-migrator migrate"), "{stderr}");

    db.store.migrate().await.unwrap();
    let mut child = run()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = chime_runtime::http_client().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = client
            .get(format!("http://127.0.0.1:{http}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "gateway not ready in time");
        assert!(child.try_wait().unwrap().is_none(), "gateway exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = serde_json::json!({"app": "billing", "name": "bin", "schedule": {"every": "1m"},
                                  "callback": {"url": "http://127.0.0.1:9/"}});
    let create = || {
        client
            .post(format!("http://127.0.0.1:{http}/v1/timers"))
            .json(&body)
    };
    let anonymous = create().send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers().contains_key("www-authenticate"));
    let created = create().bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(created.status(), 201);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "gateway did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
}
