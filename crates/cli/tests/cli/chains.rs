//! Chains and worker targets from the CLI: `--then-success` / `--then-failure` on create and
//! update (`--no-then` removes a chain), a cycle refused, a chained run showing its parent;
//! `chime apply` writing a manifest's steps before the timers that name them, with a worker
//! route and a broadcast kept.

use chime_e2e::log_dir;
use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_and_worker_targets_from_the_cli() {
    let dir = log_dir("cli-chains");
    let mut d = dev(&["--memory"], &dir).await;
    let s = d.grpc.as_str();
    let echo = format!("{}/v1/echo", d.rest);
    let yearly = ["--cron", "0 0 3 1 1 *", "--url", echo.as_str()];
    let create = |name: &str, more: &[&str]| {
        let mut args = vec!["create", "--app", "etl", "--name", name];
        args.extend_from_slice(&yearly);
        args.extend_from_slice(more);
        args.extend_from_slice(&["--output", "json"]);
        chime(s, &args)
    };
    let load = json(&create("load", &[]));
    let load_id = load["id"].to_string();
    let refused = failed(&create("extract", &["--then-success", "nope"]), 1);
    assert!(refused.contains("then"), "{refused}");
    let extract = json(&create(
        "extract",
        &["--then-success", "load", "--then-failure", "load"],
    ));
    let extract_id = extract["id"].to_string();
    assert_eq!(
        extract["then"],
        json!({"on_success": ["load"], "on_failure": ["load"]})
    );
    let shown = ok(&chime(s, &["get", &extract_id]));
    assert!(
        shown.contains("then ok:   load") && shown.contains("then fail: load"),
        "{shown}"
    );
    let cycle = failed(
        &chime(s, &["update", &load_id, "--then-success", "extract"]),
        1,
    );
    assert!(cycle.contains("comes back"), "{cycle}");

    // A triggered run of extract succeeds (the echo answers 2xx): load runs, its parent told.
    ok(&chime(s, &["trigger", &extract_id]));
    let chained = wait_for_run(s, &load_id, "succeeded").await;
    let parent = chained["parent_run"].as_str().unwrap().to_owned();
    assert!(parent.starts_with(&format!("{extract_id}:")), "{chained}");
    let parent_run = ok(&chime(s, &["run", &parent]));
    assert!(
        parent_run.contains("chain") && parent_run.contains("on_success load: started"),
        "{parent_run}"
    );
    let removed = json(&chime(
        s,
        &["update", &extract_id, "--no-then", "--output", "json"],
    ));
    assert!(removed["then"].is_null(), "{removed}");

    // A manifest whose head sorts before its step: the step is written first.
    let files = dir.join("chained");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("timers.yaml"),
        format!(
            "timers:\n\
             - name: a-head\n  schedule:\n    every: 1h\n  callback:\n    url: {echo}\n  \
               then:\n    on_success: [b-step]\n\
             - name: b-step\n  schedule:\n    every: 1h\n  callback:\n    worker:\n      \
               group: batch\n      route: consistent_hash\n\
             - name: c-fanout\n  schedule:\n    every: 1h\n  callback:\n    worker:\n      \
               group: batch\n      broadcast: true\n"
        ),
    )
    .unwrap();
    let applied = ok(&apply(
        s,
        &["-f", files.to_str().unwrap(), "--app", "pipeline"],
    ));
    assert!(applied.contains("3 created"), "{applied}");
    let listed = json(&chime(
        s,
        &["list", "--app", "pipeline", "--output", "json"],
    ));
    let by_name = |name: &str| {
        listed["timers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("a-head")["then"]["on_success"], json!(["b-step"]));
    assert_eq!(
        by_name("b-step")["callback"]["worker"],
        json!({"group": "batch", "route": "consistent_hash"})
    );
    assert_eq!(
        by_name("c-fanout")["callback"]["worker"],
        json!({"group": "batch", "broadcast": true})
    );
    let again = ok(&apply(
        s,
        &["-f", files.to_str().unwrap(), "--app", "pipeline"],
    ));
    assert_eq!(again.trim(), "0 created, 0 changed, 3 unchanged, 0 deleted");
    d.service.stop().await;
}
