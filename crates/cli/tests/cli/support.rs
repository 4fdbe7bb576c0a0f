//! What the CLI tests share: `chime dev` on free ports, and the `chime` binary run against it.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chime_e2e::{Service, free_port};
use serde_json::Value;

pub struct Dev {
    pub service: Service,
    pub grpc: String,
    pub rest: String,
}

/// `chime dev` on free ports, with `args` (`--memory`, or `--db PATH`).
pub async fn dev(args: &[&str], dir: &Path) -> Dev {
    dev_with(args, dir, &[]).await
}

/// [`dev`] with more environment.
pub async fn dev_with(args: &[&str], dir: &Path, extra: &[(&'static str, String)]) -> Dev {
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
pub fn chime(server: &str, args: &[&str]) -> Output {
    chime_with(server, args, &[])
}

/// [`chime`] with more environment.
pub fn chime_with(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("timers")
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).unwrap()
}

pub fn failed(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// Waits until `id` has a run in `status`, by asking the CLI.
pub async fn wait_for_run(server: &str, id: &str, status: &str) -> Value {
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

/// `chime apply ARGS…` against `server`.
pub fn apply(server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("apply")
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .output()
        .unwrap()
}

pub fn chime_top(server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .args(args)
        .env_clear()
        .env("CHIME_SERVER", server)
        .output()
        .unwrap()
}

/// Now, as RFC 3339.
pub fn chrono_now() -> String {
    use chime_domain::Clock;
    chime_domain::SystemClock.now().to_rfc3339()
}
