//! `chime apply`: timer files synced with a diff, and pruned.

use chime_e2e::log_dir;

use crate::support::*;

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
