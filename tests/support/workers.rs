//! Registered workers for end-to-end tests: `chime worker` processes whose command appends
//! each delivery (`{idempotency key} {attempt} {worker}`) to one shared receipt file, the
//! receiver's record the tests count from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::Service;
use crate::cluster::{Cluster, Node};

/// The gRPC URL of an executor, where workers connect.
pub fn executor_url(node: &Node) -> String {
    format!(
        "http://{}",
        node.setting("CHIME_EXECUTOR_ADDR")
            .expect("an executor's address")
    )
}

/// What a test's workers share: their app and token, the receipt file, the log directory.
pub struct Workers {
    pub token: String,
    pub app: String,
    pub receipts: PathBuf,
    pub dir: PathBuf,
}

impl Workers {
    /// Workers of app `faults` on `cluster`, with an app token minted for them, recording
    /// into a fresh receipt file of their own.
    pub async fn for_faults(cluster: &Cluster, test: &str) -> Self {
        let dir = crate::log_dir(test);
        Self {
            token: app_token(&cluster.rest, "faults").await,
            app: "faults".into(),
            receipts: receipt_file(&dir, "receipts.txt"),
            dir,
        }
    }

    /// Starts `chime worker` for `group` on `executor`, running `script` (sh) for each
    /// delivery; `$RECEIPTS` names the receipt file and `$WORKER` this worker.
    pub fn start(
        &self,
        name: &str,
        executor: &str,
        group: &str,
        credits: u32,
        script: &str,
    ) -> Service {
        self.start_as(name, executor, &self.app, group, credits, script)
    }

    /// Starts one worker of `group` per (name, executor URL), each once the one before is
    /// connected, so the order they registered in is the order given.
    pub async fn start_in_order(
        &self,
        cluster: &Cluster,
        workers: &[(&str, &str)],
        group: &str,
        credits: u32,
        script: &str,
    ) -> Vec<Service> {
        let mut started = Vec::new();
        for (name, executor) in workers {
            started.push(self.start(name, executor, group, credits, script));
            let want = started.len() as f64;
            crate::timers::until(
                &format!("{name} connected"),
                std::time::Duration::from_secs(30),
                || async { connected(cluster).await == want },
            )
            .await;
        }
        started
    }

    /// [`Workers::start`] naming `app` instead of the token's.
    pub fn start_as(
        &self,
        name: &str,
        executor: &str,
        app: &str,
        group: &str,
        credits: u32,
        script: &str,
    ) -> Service {
        let credits = credits.to_string();
        let args = [
            "worker",
            "--server",
            executor,
            "--app",
            app,
            "--group",
            group,
            "--credits",
            &credits,
            "--name",
            name,
            "--",
            "sh",
            "-c",
            script,
        ];
        let env = [
            ("CHIME_TOKEN", self.token.clone()),
            ("RECEIPTS", self.receipts.display().to_string()),
            ("WORKER", name.to_owned()),
        ];
        Service::start(name, "chime", &args, &env, &self.dir)
    }
}

/// The script that records a delivery and acks it.
pub const RECORD: &str =
    r#"echo "$CHIME_IDEMPOTENCY_KEY $CHIME_ATTEMPT $WORKER $(date +%s%3N)" >> "$RECEIPTS""#;

/// Workers connected, over every executor.
pub async fn connected(cluster: &Cluster) -> f64 {
    let mut n = 0.0;
    for e in &cluster.executors {
        n += e.counter("chime_executor_workers_connected").await;
    }
    n
}

/// Receipts per idempotency key: (attempt, worker, unix ms received) of each, in order.
pub fn receipts(file: &Path) -> HashMap<String, Vec<(u32, String, i64)>> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut by_key: HashMap<String, Vec<(u32, String, i64)>> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        // A line being written as we read is incomplete: skip it, the next read has it.
        let [key, attempt, worker, at] = parts[..] else {
            continue;
        };
        let (Ok(attempt), Ok(at)) = (attempt.parse(), at.parse()) else {
            continue;
        };
        by_key
            .entry(key.to_owned())
            .or_default()
            .push((attempt, worker.to_owned(), at));
    }
    by_key
}

/// A fresh receipt file in `dir`.
pub fn receipt_file(dir: &Path, name: &str) -> PathBuf {
    let file = dir.join(name);
    let _ = std::fs::remove_file(&file);
    file
}

/// Mints an app token through the REST API.
pub async fn app_token(rest: &str, app: &str) -> String {
    let answer: serde_json::Value = crate::timers::client()
        .post(format!("{rest}/v1/apps/{app}/tokens"))
        .json(&serde_json::json!({"name": "e2e-worker"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["token"].as_str().expect("a token").to_owned()
}

/// A cluster of one scheduler and two executors, with three workers of one group started in
/// order: worker-a and worker-c on executor 0, worker-b on executor 1.
pub struct ThreeWorkers {
    pub cluster: Cluster,
    pub pool: Workers,
    /// worker-a, worker-b, worker-c.
    pub workers: Vec<Service>,
    /// The database and Redis prefix the cluster uses, removed when dropped: bind them for
    /// the test's length.
    pub fixtures: (
        chime_storage::testkit::PgFixture,
        chime_storage::testkit::RedisFixture,
    ),
}

impl ThreeWorkers {
    /// For test `test`: the workers take `group`'s deliveries, `credits` at once, running
    /// `script` for each.
    pub async fn start(test: &'static str, group: &str, credits: u32, script: &str) -> Self {
        let (db, redis) = (
            chime_storage::testkit::pg().await,
            chime_storage::testkit::redis().await,
        );
        let cluster = crate::start_on(test, &db, &redis, 1, 2, vec![]).await;
        let pool = Workers::for_faults(&cluster, &format!("{test}-receipts")).await;
        let (e0, e1) = (
            executor_url(&cluster.executors[0]),
            executor_url(&cluster.executors[1]),
        );
        let order = [("worker-a", &*e0), ("worker-b", &*e1), ("worker-c", &*e0)];
        let workers = pool
            .start_in_order(&cluster, &order, group, credits, script)
            .await;
        Self {
            cluster,
            pool,
            workers,
            fixtures: (db, redis),
        }
    }
}
