//! `chime notifications set|get`.

use std::time::Duration;

use chime_e2e::log_dir;

use crate::support::*;

/// `chime notifications set|get` against `chime dev`: a timer whose callback fails makes
/// `timer.failing`, posted to the dev echo endpoint and listed by `get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_from_the_cli() {
    let dir = log_dir("cli-notifications");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let echo = format!("{}/v1/echo", d.rest);
    let refused = failed(
        &chime_top(
            s,
            &[
                "notifications",
                "set",
                "--app",
                "ops",
                "--url",
                &echo,
                "--on",
                "late",
            ],
        ),
        1,
    );
    assert!(refused.contains("on"), "{refused}");
    let set = json(&chime_top(
        s,
        &[
            "notifications",
            "set",
            "--app",
            "ops",
            "--url",
            &echo,
            "--on",
            "failing",
            "--failing-after",
            "1",
            "--output",
            "json",
        ],
    ));
    assert_eq!(set["created"], true, "{set}");
    assert_eq!(
        set["settings"]["on"],
        serde_json::json!(["failing"]),
        "{set}"
    );
    // A callback answering 404: each run fails at once.
    let missing = format!("{}/v1/no-such-route", d.rest);
    ok(&chime(
        s,
        &[
            "create", "--app", "ops", "--name", "broken", "--every", "1s", "--url", &missing,
        ],
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let table = loop {
        let table = ok(&chime_top(s, &["notifications", "get", "--app", "ops"]));
        if table.contains("timer.failing") {
            break table;
        }
        assert!(tokio::time::Instant::now() < deadline, "{table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        table.contains("broken") && table.contains("delivered (1 tries)"),
        "{table}"
    );
    d.service.stop().await;
}
