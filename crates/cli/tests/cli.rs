//! The `chime` binary: every `chime timers` subcommand against a running `chime dev`, error
//! exits included, and `chime dev` keeping timers and history across a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chime_e2e::{Service, free_port, log_dir};
use serde_json::Value;

struct Dev {
    service: Service,
    grpc: String,
    rest: String,
}

/// `chime dev` on free ports, with `args` (`--memory`, or `--db PATH`).
async fn dev(args: &[&str], dir: &Path) -> Dev {
    dev_with(args, dir, &[]).await
}

/// [`dev`] with more environment.
async fn dev_with(args: &[&str], dir: &Path, extra: &[(&'static str, String)]) -> Dev {
    let (http, grpc) = (free_port(), free_port());
    let mut env = vec![
        ("CHIME_HTTP_ADDR", format!("127.0.0.1:{http}")),
        ("CHIME_GRPC_ADDR", format!("127.0.0.1:{grpc}")),
        ("CHIME_LOG", "info".to_owned()),
    ];
    env.extend_from_slice(extra);
    let mut all = vec!["dev"];
    all.extend_from_slice(args);
    let mut service = Service::start("chime-dev", "chime", &all, &env, dir);
    let rest = format!("http://127.0.0.1:{http}");
    service.wait_ready(&format!("{rest}/readyz")).await;
    Dev {
        service,
        grpc: format!("http://127.0.0.1:{grpc}"),
        rest,
    }
}

/// Runs `chime timers …` against `server`.
fn chime(server: &str, args: &[&str]) -> Output {
    chime_with(server, args, &[])
}

/// [`chime`] with more environment.
fn chime_with(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("timers")
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).unwrap()
}

fn failed(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// Waits until `id` has a run in `status`, by asking the CLI.
async fn wait_for_run(server: &str, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let runs = json(&chime(
            server,
            &["runs", id, "--status", status, "--output", "json"],
        ));
        if let Some(first) = runs["runs"].as_array().and_then(|r| r.first()) {
            return first.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {status} run of timer {id}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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

fn chrono_now() -> String {
    use chime_domain::Clock;
    chime_domain::SystemClock.now().to_rfc3339()
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

/// Runs `chime apply …` against `server`.
fn apply(server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("apply")
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .output()
        .unwrap()
}

#[tokio::test]
async fn apply_syncs_timer_files_with_a_diff_and_prunes() {
    let dir = log_dir("cli-apply");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let files = dir.join("timers");
    std::fs::create_dir_all(&files).unwrap();
    let echo = format!("{}/v1/echo", d.rest);
    std::fs::write(
        files.join("nightly.yaml"),
        format!(
            "name: nightly\nschedule:\n  cron: \"0 2 * * *\"\n  time_zone: Europe/Berlin\n\
             callback:\n  url: {echo}\nlabels:\n  team: billing\n"
        ),
    )
    .unwrap();
    std::fs::write(
        files.join("more.json"),
        format!(
            r#"{{"timers": [{{"app": "ops", "name": "heartbeat", "schedule": {{"every": "1m"}},
                "callback": {{"url": "{echo}"}}}}]}}"#
        ),
    )
    .unwrap();
    let dir_arg = files.to_str().unwrap();

    // A dry run shows the plan and creates nothing.
    let plan = ok(&apply(s, &["-f", dir_arg, "--app", "ops", "--dry-run"]));
    assert!(
        plan.contains("+ heartbeat") && plan.contains("+ nightly"),
        "{plan}"
    );
    assert!(plan.contains("2 would be created"), "{plan}");
    let listed = json(&chime(s, &["list", "--app", "ops", "--output", "json"]));
    assert!(listed["timers"].as_array().unwrap().is_empty());

    let applied = ok(&apply(s, &["-f", dir_arg, "--app", "ops"]));
    assert!(applied.contains("2 created"), "{applied}");
    // Applying again changes nothing, not even versions.
    let again = ok(&apply(s, &["-f", dir_arg, "--app", "ops"]));
    assert_eq!(again.trim(), "0 created, 0 changed, 2 unchanged, 0 deleted");

    // One changed field: a one-line diff naming it.
    std::fs::write(
        files.join("nightly.yaml"),
        format!(
            "name: nightly\nschedule:\n  cron: \"0 3 * * *\"\n  time_zone: Europe/Berlin\n\
             callback:\n  url: {echo}\nlabels:\n  team: billing\n"
        ),
    )
    .unwrap();
    let diff = ok(&apply(s, &["-f", dir_arg, "--app", "ops"]));
    assert_eq!(
        diff.trim(),
        "~ nightly: schedule\n0 created, 1 changed, 1 unchanged, 0 deleted"
    );

    // A timer made by hand is left alone, then pruned.
    ok(&chime(
        s,
        &[
            "create", "--app", "ops", "--name", "stray", "--every", "1h", "--url", &echo,
        ],
    ));
    let kept = ok(&apply(s, &["-f", dir_arg, "--app", "ops"]));
    assert!(kept.contains("0 deleted"), "{kept}");
    let pruned = ok(&apply(s, &["-f", dir_arg, "--app", "ops", "--prune"]));
    assert!(
        pruned.contains("- stray") && pruned.contains("1 deleted"),
        "{pruned}"
    );
    let listed = json(&chime(s, &["list", "--app", "ops", "--output", "json"]));
    let names: Vec<&str> = listed["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["heartbeat", "nightly"]);

    // A timer of another app in the files is refused before anything is sent.
    let refused = apply(s, &["-f", dir_arg, "--app", "billing"]);
    assert!(failed(&refused, 2).contains("not --app"));
    d.service.stop().await;
}

#[tokio::test]
async fn labels_limits_pause_notes_and_previews_from_the_cli() {
    let dir = log_dir("cli-semantics");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let echo = format!("{}/v1/echo", d.rest);
    let t = json(&chime(
        s,
        &[
            "create",
            "--app",
            "sem",
            "--name",
            "limited",
            "--every",
            "1h",
            "--url",
            &echo,
            "--label",
            "team=ops",
            "--max-runs",
            "4",
            "--on-complete",
            "delete",
            "--catch-up-window",
            "5m",
            "--retry-max-age",
            "1h",
            "--output",
            "json",
        ],
    ));
    assert_eq!(t["labels"]["team"], "ops");
    assert_eq!(t["max_runs"], 4);
    assert_eq!(t["remaining_runs"], 4);
    assert_eq!(t["catch_up_window"], "5m");
    assert_eq!(t["retry"]["max_age"], "1h");
    let id = t["id"].to_string();

    let paused = json(&chime(
        s,
        &[
            "disable",
            &id,
            "--reason",
            "maintenance window",
            "--output",
            "json",
        ],
    ));
    assert_eq!(paused["state"], "paused");
    assert_eq!(paused["paused"]["reason"], "maintenance window");
    let listed = json(&chime(
        s,
        &[
            "list", "--state", "paused", "--label", "team=ops", "--output", "json",
        ],
    ));
    assert_eq!(listed["timers"].as_array().unwrap().len(), 1);
    let table = ok(&chime(s, &["get", &id]));
    assert!(table.contains("paused:    maintenance window"), "{table}");

    let next = json(&chime(
        s,
        &["next", &id, "--count", "10", "--output", "json"],
    ));
    assert_eq!(
        next["runs"].as_array().unwrap().len(),
        4,
        "max_runs bounds it"
    );
    let preview = ok(&chime(
        s,
        &[
            "preview",
            "--cron",
            "30 2 * * *",
            "--time-zone",
            "America/New_York",
            "--from",
            "2026-03-07T00:00:00Z",
            "--count",
            "3",
        ],
    ));
    assert!(preview.contains("gap"), "{preview}");
    d.service.stop().await;
}

/// `chime ARGS…` (not under `timers`) against `server`.
fn chime_top(server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendars_and_backfill_from_the_cli() {
    let dir = log_dir("cli-calendars");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let echo = format!("{}/v1/echo", d.rest);
    let put = json(&chime_top(
        s,
        &[
            "calendars",
            "put",
            "--app",
            "sem",
            "--name",
            "holidays",
            "--date",
            "2030-12-24/2030-12-26",
            "--output",
            "json",
        ],
    ));
    assert_eq!(put["created"], true, "{put}");
    let listed = ok(&chime_top(s, &["calendars", "list", "--app", "sem"]));
    assert!(
        listed.contains("holidays  2030-12-24/2030-12-26"),
        "{listed}"
    );

    let t = json(&chime(
        s,
        &[
            "create",
            "--app",
            "sem",
            "--name",
            "noon",
            "--cron",
            "0 0 12 * * *",
            "--start-at",
            "2030-12-23T00:00:00Z",
            "--url",
            &echo,
            "--exclude-calendar",
            "holidays",
            "--output",
            "json",
        ],
    ));
    assert_eq!(t["exclude_calendars"][0], "holidays", "{t}");
    let id = t["id"].to_string();
    let next = json(&chime(
        s,
        &["next", &id, "--count", "2", "--output", "json"],
    ));
    let days: Vec<&str> = next["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["utc"].as_str().unwrap())
        .collect();
    assert_eq!(
        days,
        ["2030-12-23T12:00:00.000Z", "2030-12-27T12:00:00.000Z"]
    );
    let preview = ok(&chime(
        s,
        &[
            "preview",
            "--cron",
            "0 0 12 * * *",
            "--from",
            "2030-12-23T13:00:00Z",
            "--count",
            "1",
            "--app",
            "sem",
            "--exclude-calendar",
            "holidays",
        ],
    ));
    assert!(preview.contains("2030-12-27T12:00:00.000Z"), "{preview}");

    // Backfill: three past minutes of an every-minute timer, each called once, marked.
    let every = json(&chime(
        s,
        &[
            "create",
            "--app",
            "sem",
            "--name",
            "minutely",
            "--cron",
            "0 * * * * *",
            "--url",
            &echo,
            "--output",
            "json",
        ],
    ));
    let eid = every["id"].to_string();
    let done = json(&chime(
        s,
        &[
            "backfill",
            &eid,
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-01T00:03:00Z",
            "--rate",
            "100",
            "--output",
            "json",
        ],
    ));
    assert_eq!(done["added"], 3, "{done}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let runs = json(&chime(
            s,
            &["runs", &eid, "--status", "succeeded", "--output", "json"],
        ));
        let marked = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["backfill"] == "allow_all")
            .count();
        if marked == 3 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{runs}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let table = ok(&chime(s, &["runs", &eid]));
    assert!(table.contains("succeeded (backfill)"), "{table}");
    d.service.stop().await;
}

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

/// `chime worker -- CMD` against `chime dev`: a timer applied from a file with a worker
/// callback runs the command with the body on stdin and the metadata in its environment; a
/// failing exit nacks, and the retry acks.
#[tokio::test]
async fn chime_worker_runs_a_command_for_each_delivery() {
    let dir = log_dir("cli-worker");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Attempt 1 fails (exit 1, a nack); attempt 2 writes the body and the metadata.
    let script = r#"[ "$CHIME_ATTEMPT" -ge 2 ] || { echo first attempt refused >&2; exit 1; }
        cat > "$OUT/body"; echo "$CHIME_APP $CHIME_TIMER_NAME $CHIME_ATTEMPT $CHIME_IDEMPOTENCY_KEY" > "$OUT/meta""#;
    let mut worker = Service::start(
        "worker",
        "chime",
        &[
            "worker", "--server", s, "--app", "ops", "--group", "scripts", "--", "sh", "-c", script,
        ],
        &[("OUT", out.display().to_string())],
        &dir,
    );
    let files = dir.join("timers");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("job.yaml"),
        "name: job\nschedule:\n  after: 1s\ncallback:\n  worker:\n    group: scripts\n  \
         body: hello worker\nretry:\n  initial_backoff: 1s\n  jitter: false\n",
    )
    .unwrap();
    let applied = ok(&apply(s, &["-f", files.to_str().unwrap(), "--app", "ops"]));
    assert!(applied.contains("1 created"), "{applied}");
    let listed = json(&chime(s, &["list", "--app", "ops", "--output", "json"]));
    let id = listed["timers"][0]["id"].to_string();
    let run = wait_for_run(s, &id, "succeeded").await;
    assert_eq!(run["attempt"], 2, "{run}");
    assert_eq!(
        std::fs::read_to_string(out.join("body")).unwrap(),
        "hello worker"
    );
    let meta = std::fs::read_to_string(out.join("meta")).unwrap();
    assert!(meta.starts_with(&format!("ops job 2 {id}:")), "{meta}");
    worker.terminate();
    assert!(worker.wait_exit(Duration::from_secs(10)).await.success());
    d.service.stop().await;
}
