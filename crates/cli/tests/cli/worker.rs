//! `chime worker`: a command run for each delivery.

use std::time::Duration;

use chime_e2e::{Service, log_dir};

use crate::support::*;

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
