//! Running Chime's binaries as processes for end-to-end tests: each with its own log file,
//! readiness awaited over HTTP, stopped with SIGTERM (or killed when the test ends early).

// Setup failures end the test with a message, by design.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

pub mod cluster;
pub mod servers;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Where cargo put this workspace's binaries: beside the `deps` folder of the running test.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target profile directory")
        .to_owned()
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, which \
         `make test` does)",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A directory for this run's logs, kept under `target/e2e/` so a failure can be read.
pub fn log_dir(test: &str) -> PathBuf {
    let dir = bin_dir()
        .parent()
        .expect("target directory")
        .join("e2e")
        .join(chime_storage::testkit::unique(test));
    std::fs::create_dir_all(&dir).expect("log directory");
    dir
}

pub struct Service {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Service {
    /// Starts `binary` with exactly `env` (plus PATH), logging to `{dir}/{name}.log`.
    pub fn start(
        name: &str,
        binary: &str,
        args: &[&str],
        env: &[(&str, String)],
        dir: &Path,
    ) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(bin(binary));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        Self {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until `GET {url}` answers 200, failing fast if the process exits.
    pub async fn wait_ready(&mut self, url: &str) {
        let client = chime_runtime::http_client().build().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            if let Some(exit) = self.child.try_wait().expect("process status") {
                panic!("{} exited early ({exit}):\n{}", self.name, self.log_tail());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} not ready at {url}:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: the process dies without any chance to clean up.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "cannot signal {}", self.name);
    }

    /// Waits for the process to exit, at most `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(exit) = self.child.try_wait().expect("process status") {
                return exit;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not exit within {within:?}:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then the exit, which must be clean.
    pub async fn stop(&mut self) {
        self.terminate();
        let exit = self.wait_exit(Duration::from_secs(30)).await;
        assert!(
            exit.success(),
            "{} exited with {exit}:\n{}",
            self.name,
            self.log_tail()
        );
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
