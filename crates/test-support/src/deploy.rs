//! Chime's binaries as processes: each with its own log file, readiness awaited over HTTP,
//! stopped with SIGTERM (or killed when dropped). The end-to-end tests and the pipeline
//! benchmark start their deployments with this.

// Setup failures end the test or benchmark with a message, by design.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The admin token every deployment started here gives its gateway (auth stays required,
/// as in production).
pub const BOOTSTRAP_TOKEN: &str = "chime-test-bootstrap-token-0123456789";

/// An HTTP client builder whose requests carry [`BOOTSTRAP_TOKEN`].
pub fn api_client() -> reqwest::ClientBuilder {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {BOOTSTRAP_TOKEN}"))
            .expect("a valid header value"),
    );
    chime_runtime::http_client().default_headers(headers)
}

/// A gRPC interceptor sending [`BOOTSTRAP_TOKEN`].
pub fn bearer() -> chime_proto::Bearer {
    chime_proto::Bearer::new(Some(BOOTSTRAP_TOKEN)).expect("a valid header value")
}

/// Where cargo put this workspace's binaries: the running executable's own directory
/// (`chime-bench`), or the one above it for a test executable in `deps/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("executable path");
    let dir = exe.parent().expect("executable directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target profile directory").to_owned()
    } else {
        dir.to_owned()
    }
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

pub use crate::ports::{free_port, free_port_pair};

/// A directory for this run's logs, kept under `target/e2e/` (tests) or `target/bench/logs/`
/// (`chime-bench`) so a failure can be read.
pub fn log_dir(test: &str) -> PathBuf {
    let under_test = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.file_name()? == "deps"))
        .unwrap_or(false);
    let root = bin_dir().parent().expect("target directory").to_owned();
    let root = if under_test {
        root.join("e2e")
    } else {
        root.join("bench").join("logs")
    };
    // The pid and a random suffix keep parallel runs of one test apart.
    let dir = root.join(format!(
        "{test}_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
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
        Self::start_path(name, &bin(binary), args, env, dir)
    }

    /// [`Self::start`] of the executable at `path` (another build's, in an upgrade test).
    pub fn start_path(
        name: &str,
        path: &Path,
        args: &[&str],
        env: &[(&str, String)],
        dir: &Path,
    ) -> Self {
        let binary = path.display();
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(path);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // The runtime's thread count, when the harness is given one (tokio reads it).
        if let Ok(n) = std::env::var("TOKIO_WORKER_THREADS") {
            cmd.env("TOKIO_WORKER_THREADS", n);
        }
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

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = self.log();
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

    /// Sends SIGTERM, unless the process has exited already. Once a child is reaped its pid
    /// is free for reuse, by a process or by another's thread (a database server's
    /// connection thread, say), and `kill` on a thread's id signals that whole process.
    pub fn terminate(&mut self) {
        if !self.running() {
            return;
        }
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

/// A distributed Chime as separate processes: gateway, migrator, schedulers, executors.
pub mod cluster {
    use std::path::PathBuf;

    use super::{Service, free_port, log_dir};

    /// What to start.
    pub struct Spec {
        pub test: &'static str,
        pub database_url: String,
        /// Empty: no Redis (PostgreSQL-only mode).
        pub redis_url: String,
        pub redis_prefix: String,
        pub schedulers: usize,
        pub executors: usize,
        /// Settings for every service, after the defaults below.
        pub env: Vec<(&'static str, String)>,
    }

    /// One service process and how to start it again.
    pub struct Node {
        pub service: Service,
        /// `http://127.0.0.1:{port}` of its admin endpoints.
        pub admin: String,
        name: String,
        binary: &'static str,
        /// Where its executable is: another build's directory, or `None` for this build's.
        from: Option<PathBuf>,
        env: Vec<(&'static str, String)>,
        dir: PathBuf,
    }

    /// `binary` in `from` (another build's directory) or in this build's.
    fn executable(from: Option<&PathBuf>, binary: &str) -> PathBuf {
        match from {
            Some(dir) => dir.join(binary),
            None => super::bin(binary),
        }
    }

    /// Applies the migrations of this build (`from`: `None`) or another's to the database at
    /// `url`, as the migrate Job does, and waits for them.
    pub fn migrate(from: Option<&PathBuf>, url: &str) {
        let migrate = std::process::Command::new(executable(from, "chime-migrator"))
            .arg("migrate")
            .env_clear()
            .env("CHIME_DATABASE_URL", url)
            .output()
            .expect("chime-migrator migrate");
        assert!(
            migrate.status.success(),
            "{}",
            String::from_utf8_lossy(&migrate.stderr)
        );
    }

    impl Node {
        async fn start(
            name: String,
            binary: &'static str,
            from: Option<PathBuf>,
            env: Vec<(&'static str, String)>,
            dir: PathBuf,
            ready: &str,
        ) -> Self {
            let admin = env
                .iter()
                .find(|(k, _)| *k == "CHIME_ADMIN_ADDR")
                .map(|(_, v)| format!("http://{v}"))
                .unwrap_or_default();
            let path = executable(from.as_ref(), binary);
            let mut service = Service::start_path(&name, &path, &[], &env, &dir);
            let ready = if ready.is_empty() {
                format!("{admin}/readyz")
            } else {
                ready.to_owned()
            };
            service.wait_ready(&ready).await;
            Self {
                service,
                admin,
                name,
                binary,
                from,
                env,
                dir,
            }
        }

        /// Which build it runs: another build's directory, or `None` for this one's.
        pub fn build(&self) -> Option<&PathBuf> {
            self.from.as_ref()
        }

        /// From its next (re)start on, runs this build's binary: a rolling upgrade's step.
        pub fn upgrade(&mut self) {
            self.from = None;
        }

        /// The value it was started with for `key`.
        pub fn setting(&self, key: &str) -> Option<&str> {
            self.env
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        }

        /// Sets `key` for the next (re)start, as a rolling change of configuration does.
        pub fn set_env(&mut self, key: &'static str, value: String) {
            self.env.retain(|(k, _)| *k != key);
            self.env.push((key, value));
        }

        /// Starts the process again with the same settings (after it stopped or was killed),
        /// and waits until it is ready.
        pub async fn restart(&mut self) {
            assert!(!self.service.running(), "{} still runs", self.name);
            let n = self.dir.read_dir().map(|d| d.count()).unwrap_or(0);
            self.service = Service::start_path(
                &format!("{}-{n}", self.name),
                &executable(self.from.as_ref(), self.binary),
                &[],
                &self.env,
                &self.dir,
            );
            self.service
                .wait_ready(&format!("{}/readyz", self.admin))
                .await;
        }

        /// Its `/metrics` page.
        pub async fn metrics(&self) -> String {
            chime_runtime::http_client()
                .build()
                .expect("client")
                .get(format!("{}/metrics", self.admin))
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .unwrap_or_default()
        }

        /// A counter from its `/metrics`, 0 when absent.
        pub async fn counter(&self, name: &str) -> f64 {
            self.metrics()
                .await
                .lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .sum()
        }
    }

    pub struct Cluster {
        pub gateway: Node,
        pub migrator: Node,
        pub schedulers: Vec<Node>,
        pub executors: Vec<Node>,
        /// `http://127.0.0.1:{port}` of the gateway's REST API.
        pub rest: String,
        /// `http://127.0.0.1:{port}` of the gateway's gRPC API.
        pub grpc: String,
    }

    impl Cluster {
        /// Migrates the database, then starts migrator, executors, schedulers and gateway, each
        /// with its own admin port, and waits until all are ready.
        pub async fn start(spec: Spec) -> Self {
            Self::start_from(spec, None).await
        }

        /// [`Self::start`] with the binaries of another build, in `from` (its migrations
        /// included): the stack an upgrade starts from.
        pub async fn start_from(spec: Spec, from: Option<PathBuf>) -> Self {
            let dir = log_dir(spec.test);
            eprintln!("process logs: {}", dir.display());
            let common = |admin: u16| -> Vec<(&'static str, String)> {
                let mut env = vec![
                    ("CHIME_DATABASE_URL", spec.database_url.clone()),
                    ("CHIME_ADMIN_ADDR", format!("127.0.0.1:{admin}")),
                    ("CHIME_SHUTDOWN_GRACE", "10s".into()),
                    // The callback sink listens on loopback, which callbacks may not reach
                    // by default.
                    (
                        "CHIME_CALLBACK_ALLOW_NETWORKS",
                        "127.0.0.0/8,::1/128".into(),
                    ),
                    ("CHIME_LOG", "info".into()),
                    ("CHIME_BOOTSTRAP_TOKEN", super::BOOTSTRAP_TOKEN.into()),
                ];
                if !spec.redis_url.is_empty() {
                    env.push(("CHIME_REDIS_URL", spec.redis_url.clone()));
                    env.push(("CHIME_REDIS_PREFIX", spec.redis_prefix.clone()));
                }
                env.extend(spec.env.iter().cloned());
                env
            };
            migrate(from.as_ref(), &spec.database_url);

            let env = common(free_port());
            let migrator = Node::start(
                "migrator".into(),
                "chime-migrator",
                from.clone(),
                env,
                dir.clone(),
                "",
            )
            .await;

            let mut executors = Vec::new();
            let ports: Vec<u16> = (0..spec.executors).map(|_| free_port()).collect();
            let urls: Vec<String> = ports
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}"))
                .collect();
            for (i, port) in ports.iter().enumerate() {
                let mut env = common(free_port());
                env.push(("CHIME_EXECUTOR_ADDR", format!("127.0.0.1:{port}")));
                // No CHIME_EXECUTOR_ENDPOINTS: executors find their peers (for worker
                // deliveries to a worker connected elsewhere) in the membership roster.
                executors.push(
                    Node::start(
                        format!("executor-{i}"),
                        "chime-executor",
                        from.clone(),
                        env,
                        dir.clone(),
                        "",
                    )
                    .await,
                );
            }
            let mut schedulers = Vec::new();
            for i in 0..spec.schedulers {
                let mut env = common(free_port());
                // This build's schedulers find the executors in the roster, as in the
                // manifests; an older build's were given their addresses.
                if from.is_some() {
                    env.push(("CHIME_EXECUTOR_ENDPOINTS", urls.join(",")));
                }
                schedulers.push(
                    Node::start(
                        format!("scheduler-{i}"),
                        "chime-scheduler",
                        from.clone(),
                        env,
                        dir.clone(),
                        "",
                    )
                    .await,
                );
            }
            let (http, grpc) = (free_port(), free_port());
            let mut env = common(free_port());
            env.push(("CHIME_HTTP_ADDR", format!("127.0.0.1:{http}")));
            env.push(("CHIME_GRPC_ADDR", format!("127.0.0.1:{grpc}")));
            let rest = format!("http://127.0.0.1:{http}");
            let gateway = Node::start(
                "gateway".into(),
                "chime-gateway",
                from.clone(),
                env,
                dir.clone(),
                &format!("{rest}/readyz"),
            )
            .await;
            Self {
                gateway,
                migrator,
                schedulers,
                executors,
                rest,
                grpc: format!("http://127.0.0.1:{grpc}"),
            }
        }

        /// Every process, in shutdown order: schedulers, executors, migrator, gateway.
        pub fn nodes(&self) -> impl Iterator<Item = &Node> {
            self.schedulers
                .iter()
                .chain(&self.executors)
                .chain([&self.migrator, &self.gateway])
        }

        /// [`Cluster::nodes`], to stop or restart them.
        pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node> {
            self.schedulers
                .iter_mut()
                .chain(self.executors.iter_mut())
                .chain([&mut self.migrator, &mut self.gateway])
        }

        /// Stops whatever still runs with SIGTERM, in shutdown order (schedulers, executors,
        /// migrator, gateway); each must exit cleanly.
        pub async fn stop(&mut self) {
            for node in self.nodes_mut() {
                if node.service.running() {
                    node.service.stop().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Service;

    #[tokio::test]
    async fn terminating_an_exited_process_signals_nothing() {
        let dir = super::log_dir("terminating_an_exited_process");
        let mut done = Service::start_path(
            "exits-at-once",
            std::path::Path::new("/bin/true"),
            &[],
            &[],
            &dir,
        );
        assert!(done.wait_exit(Duration::from_secs(10)).await.success());
        // Reaped: its pid may belong to someone else now; `kill` would fail or hit them.
        done.terminate();
        done.stop().await;
    }
}
