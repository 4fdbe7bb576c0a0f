//! Labels, limits, pause notes, previews, calendars and backfill from the CLI.

use std::time::Duration;

use chime_e2e::log_dir;

use crate::support::*;

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
