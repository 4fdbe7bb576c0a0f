//! A distributed Chime as separate processes: gateway, migrator, schedulers, executors.

use std::path::PathBuf;

use crate::{Service, free_port, log_dir};

/// What to start.
pub struct Spec {
    pub test: &'static str,
    pub database_url: String,
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
    env: Vec<(&'static str, String)>,
    dir: PathBuf,
}

impl Node {
    async fn start(
        name: String,
        binary: &'static str,
        env: Vec<(&'static str, String)>,
        dir: PathBuf,
        ready: &str,
    ) -> Self {
        let admin = env
            .iter()
            .find(|(k, _)| *k == "CHIME_ADMIN_ADDR")
            .map(|(_, v)| format!("http://{v}"))
            .unwrap_or_default();
        let mut service = Service::start(&name, binary, &[], &env, &dir);
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
            env,
            dir,
        }
    }

    /// Starts the process again with the same settings (after it stopped or was killed),
    /// and waits until it is ready.
    pub async fn restart(&mut self) {
        assert!(!self.service.running(), "{} still runs", self.name);
        let n = self.dir.read_dir().map(|d| d.count()).unwrap_or(0);
        self.service = Service::start(
            &format!("{}-{n}", self.name),
            self.binary,
            &[],
            &self.env,
            &self.dir,
        );
        self.service
            .wait_ready(&format!("{}/readyz", self.admin))
            .await;
    }

    /// A counter from its `/metrics`, 0 when absent.
    pub async fn counter(&self, name: &str) -> f64 {
        let text = chime_runtime::http_client()
            .build()
            .expect("client")
            .get(format!("{}/metrics", self.admin))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        text.lines()
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
}

impl Cluster {
    /// Migrates the database, then starts migrator, executors, schedulers and gateway, each
    /// with its own admin port, and waits until all are ready.
    pub async fn start(spec: Spec) -> Self {
        let dir = log_dir(spec.test);
        eprintln!("process logs: {}", dir.display());
        let common = |admin: u16| -> Vec<(&'static str, String)> {
            let mut env = vec![
                ("CHIME_DATABASE_URL", spec.database_url.clone()),
                ("CHIME_REDIS_URL", spec.redis_url.clone()),
                ("CHIME_REDIS_PREFIX", spec.redis_prefix.clone()),
                ("CHIME_ADMIN_ADDR", format!("127.0.0.1:{admin}")),
                ("CHIME_SHUTDOWN_GRACE", "10s".into()),
                ("CHIME_LOG", "info".into()),
                ("CHIME_MIGRATOR__STEP", "10s".into()),
            ];
            env.extend(spec.env.iter().cloned());
            env
        };
        let migrate = std::process::Command::new(crate::bin("chime-migrator"))
            .arg("migrate")
            .env_clear()
            .env("CHIME_DATABASE_URL", &spec.database_url)
            .output()
            .expect("chime-migrator migrate");
        assert!(
            migrate.status.success(),
            "{}",
            String::from_utf8_lossy(&migrate.stderr)
        );

        let migrator_port = free_port();
        let mut env = common(free_port());
        env.push(("CHIME_MIGRATOR_ADDR", format!("127.0.0.1:{migrator_port}")));
        let migrator = Node::start("migrator".into(), "chime-migrator", env, dir.clone(), "").await;

        let mut executors = Vec::new();
        let mut urls = Vec::new();
        for i in 0..spec.executors {
            let port = free_port();
            let mut env = common(free_port());
            env.push(("CHIME_EXECUTOR_ADDR", format!("127.0.0.1:{port}")));
            executors.push(
                Node::start(
                    format!("executor-{i}"),
                    "chime-executor",
                    env,
                    dir.clone(),
                    "",
                )
                .await,
            );
            urls.push(format!("http://127.0.0.1:{port}"));
        }
        let mut schedulers = Vec::new();
        for i in 0..spec.schedulers {
            let mut env = common(free_port());
            env.push(("CHIME_EXECUTOR_ENDPOINTS", urls.join(",")));
            schedulers.push(
                Node::start(
                    format!("scheduler-{i}"),
                    "chime-scheduler",
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
        env.push((
            "CHIME_MIGRATOR_ENDPOINT",
            format!("http://127.0.0.1:{migrator_port}"),
        ));
        let rest = format!("http://127.0.0.1:{http}");
        let gateway = Node::start(
            "gateway".into(),
            "chime-gateway",
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
        }
    }

    /// Stops whatever still runs with SIGTERM, in shutdown order (schedulers, executors,
    /// migrator, gateway); each must exit cleanly.
    pub async fn stop(&mut self) {
        let nodes = self
            .schedulers
            .iter_mut()
            .chain(self.executors.iter_mut())
            .chain([&mut self.migrator, &mut self.gateway]);
        for node in nodes {
            if node.service.running() {
                node.service.stop().await;
            }
        }
    }
}
