//! Every `chime timers` subcommand against a running `chime dev`, error exits included;
//! `chime dev` keeping timers and history across a restart; the token the CLI sends.

use std::process::Command;
use std::time::Duration;

use chime_e2e::{free_port, log_dir};

use crate::support::*;

#[tokio::test]
async fn every_subcommand_against_chime_dev() {
    let dir = log_dir("cli");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let echo = format!("{}/v1/echo", d.rest);

    // create, table and JSON
    let table = ok(&chime(
        s,
        &[
            "create",
            "--app",
            "demo",
            "--name",
            "hello",
            "--every",
            "1s",
            "--url",
            &echo,
            "--header",
            "X-Job=demo",
            "--timeout",
            "2s",
        ],
    ));
    assert!(
        table.contains("id:") && table.contains("every 1s"),
        "{table}"
    );
    let cron = json(&chime(
        s,
        &[
            "create",
            "--app",
            "demo",
            "--name",
            "nightly",
            "--cron",
            "0 0 2 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--url",
            &echo,
            "--output",
            "json",
        ],
    ));
    let cron_id = cron["id"].as_i64().unwrap().to_string();
    assert_eq!(cron["schedule"], "cron 0 0 2 * * * (Europe/Berlin)");
    assert_eq!(cron["next_runs"].as_array().unwrap().len(), 5);

    // list and get
    let listed = json(&chime(s, &["list", "--app", "demo", "--output", "json"]));
    let timers = listed["timers"].as_array().unwrap();
    assert_eq!(timers.len(), 2);
    let hello = timers[0]["id"].as_i64().unwrap().to_string();
    let table = ok(&chime(s, &["list"]));
    assert!(
        table.starts_with("ID") && table.contains("nightly"),
        "{table}"
    );
    let paged = json(&chime(s, &["list", "--page-size", "1", "--output", "json"]));
    assert!(paged["next_page_token"].is_string());
    let got = json(&chime(s, &["get", &hello, "--output", "json"]));
    assert_eq!(got["callback"]["headers"]["x-job"], "demo");

    // the timer fires: runs shows the history
    let run = wait_for_run(s, &hello, "succeeded").await;
    assert_eq!(run["http_status"], 200);
    assert!(run["lateness_ms"].is_i64());
    let runs = ok(&chime(s, &["runs", &hello]));
    assert!(runs.contains("succeeded"), "{runs}");

    // update keeps what is not given
    let updated = json(&chime(
        s,
        &["update", &cron_id, "--every", "1h", "--output", "json"],
    ));
    assert_eq!(updated["schedule"], "every 1h");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["callback"]["url"], echo.as_str());
    let stale = chime(
        s,
        &[
            "update",
            &cron_id,
            "--timeout",
            "3s",
            "--expected-version",
            "1",
        ],
    );
    assert!(failed(&stale, 1).contains("version"));

    // disable, enable, trigger
    let off = json(&chime(s, &["disable", &cron_id, "--output", "json"]));
    assert_eq!(off["enabled"], false);
    let refused = chime(s, &["trigger", &cron_id]);
    failed(&refused, 1);
    let on = json(&chime(s, &["enable", &cron_id, "--output", "json"]));
    assert_eq!(on["enabled"], true);
    let trig = json(&chime(s, &["trigger", &cron_id, "--output", "json"]));
    assert!(
        trig["task_key"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{cron_id}:"))
    );
    wait_for_run(s, &cron_id, "succeeded").await;

    // delete
    assert!(ok(&chime(s, &["delete", &cron_id])).contains("deleted"));

    // errors: not found (4), refused by the server with the field named (1), usage (2),
    // unreachable (3)
    assert!(failed(&chime(s, &["get", &cron_id]), 4).contains("not found"));
    assert!(failed(&chime(s, &["delete", "987654"]), 4).contains("not found"));
    let bad_cron = chime(
        s,
        &[
            "create", "--app", "demo", "--name", "x", "--cron", "nope", "--url", &echo,
        ],
    );
    assert!(failed(&bad_cron, 1).contains("schedule.cron"));
    let bad_url = chime(
        s,
        &[
            "create", "--app", "demo", "--name", "x", "--every", "1m", "--url", "ftp://x",
        ],
    );
    assert!(failed(&bad_url, 1).contains("url"));
    let no_schedule = chime(
        s,
        &["create", "--app", "demo", "--name", "x", "--url", &echo],
    );
    assert!(failed(&no_schedule, 2).contains("schedule"));
    let bad_header = chime(
        s,
        &[
            "create", "--app", "a", "--name", "x", "--every", "1m", "--url", &echo, "--header",
            "oops",
        ],
    );
    assert_eq!(bad_header.status.code(), Some(2));
    let bad_status = chime(s, &["runs", &hello, "--status", "done"]);
    assert!(failed(&bad_status, 1).contains("status"));
    let closed = format!("http://127.0.0.1:{}", free_port());
    assert!(failed(&chime(&closed, &["list"]), 3).contains("cannot reach"));

    // --help reads like a manual
    let help = Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for part in [
        "chime dev",
        "chime timers create",
        "CHIME_SERVER",
        "Exit codes",
    ] {
        assert!(help.contains(part), "{part} missing from --help:\n{help}");
    }
    d.service.stop().await;
}

#[tokio::test]
async fn chime_dev_keeps_timers_and_history_across_a_restart() {
    let dir = log_dir("cli-restart");
    let db = dir.join("chime-dev.db");
    let db = db.to_str().unwrap();
    let mut first = dev(&["--db", db], &dir).await;
    let echo = format!("{}/v1/echo", first.rest);
    let created = json(&chime(
        &first.grpc,
        &[
            "create", "--app", "demo", "--name", "tick", "--every", "1s", "--url", &echo,
            "--output", "json",
        ],
    ));
    let id = created["id"].as_i64().unwrap().to_string();
    let before = wait_for_run(&first.grpc, &id, "succeeded").await;
    // Ctrl-C is a clean stop.
    let sent = Command::new("kill")
        .args(["-INT", &first.service.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    assert!(
        first
            .service
            .wait_exit(Duration::from_secs(30))
            .await
            .success()
    );

    let mut second = dev(&["--db", db], &dir).await;
    let got = json(&chime(&second.grpc, &["get", &id, "--output", "json"]));
    assert_eq!(got["name"], "tick");
    let runs = json(&chime(
        &second.grpc,
        &["runs", &id, "--page-size", "1000", "--output", "json"],
    ));
    let keys: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&before["task_key"].as_str().unwrap()),
        "history kept"
    );
    // And it keeps firing after the restart (the echo URL's port changed, so it fails now:
    // a run recorded after the restart is what counts).
    let restarted = chrono_now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let runs = json(&chime(&second.grpc, &["runs", &id, "--output", "json"]));
        let newer = runs["runs"].as_array().unwrap().iter().any(|r| {
            r["fired_at"]
                .as_str()
                .is_some_and(|f| f > restarted.as_str())
        });
        if newer {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    second.service.stop().await;
}

#[tokio::test]
async fn the_cli_sends_its_token_when_auth_is_required() {
    const TOKEN: &str = "cli-test-admin-token-0123";
    let dir = log_dir("cli-token");
    let mut d = dev_with(
        &["--memory"],
        &dir,
        &[
            ("CHIME_AUTH", "required".into()),
            ("CHIME_BOOTSTRAP_TOKEN", TOKEN.into()),
        ],
    )
    .await;
    let refused = chime(&d.grpc, &["list"]);
    let stderr = failed(&refused, 1);
    assert!(
        stderr.contains("--token") && stderr.contains("CHIME_TOKEN"),
        "{stderr}"
    );
    ok(&chime(&d.grpc, &["list", "--token", TOKEN]));
    ok(&chime_with(&d.grpc, &["list"], &[("CHIME_TOKEN", TOKEN)]));
    // The token is not echoed in the help's environment listing.
    let help = chime_with(&d.grpc, &["--help"], &[("CHIME_TOKEN", TOKEN)]);
    assert!(!String::from_utf8_lossy(&help.stdout).contains(TOKEN));
    d.service.stop().await;
}
