//! `chime dev`'s own defaults and how it exits on a config it cannot load, before it starts.

use std::process::{Command, Output};

fn dev(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chime"))
        .arg("dev")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run chime dev")
}

#[test]
fn dev_dumps_its_own_defaults_and_exits_2_on_a_bad_setting() {
    let dumped = dev(&["--memory", "--dump-config"], &[]);
    assert!(dumped.status.success(), "{dumped:?}");
    let text = String::from_utf8_lossy(&dumped.stdout);
    assert!(
        text.contains("mode = \"off\""),
        "no tokens by default in dev:\n{text}"
    );
    let told = dev(
        &["--memory", "--dump-config"],
        &[("CHIME_AUTH", "required")],
    );
    assert!(String::from_utf8_lossy(&told.stdout).contains("mode = \"required\""));

    let bad = dev(&["--memory"], &[("CHIME_WORKER_THREADS", "0")]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .to_lowercase()
            .contains("worker_threads"),
        "{bad:?}"
    );
}
