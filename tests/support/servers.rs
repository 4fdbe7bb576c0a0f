//! Private PostgreSQL and Redis servers for the tests that stop, restart or flush them: the
//! machine's shared servers must not be disturbed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, free_port_pair};

fn wait_for_port(port: u16, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A database server a test owns, to crash and start again.
pub trait PrivateDatabase {
    fn url(&self) -> String;
    fn stop(&mut self);
    fn start_again(&mut self);
}

impl PrivateDatabase for PrivatePostgres {
    fn url(&self) -> String {
        PrivatePostgres::url(self)
    }
    fn stop(&mut self) {
        PrivatePostgres::stop(self);
    }
    fn start_again(&mut self) {
        PrivatePostgres::start_again(self);
    }
}

impl PrivateDatabase for PrivateMariadb {
    fn url(&self) -> String {
        PrivateMariadb::url(self)
    }
    fn stop(&mut self) {
        PrivateMariadb::stop(self);
    }
    fn start_again(&mut self) {
        PrivateMariadb::start_again(self);
    }
}

/// A `redis-server` of its own, persisting nothing.
pub struct PrivateRedis {
    child: Child,
    pub port: u16,
}

impl PrivateRedis {
    pub fn start() -> Self {
        let port = free_port();
        Self {
            child: Self::spawn(port),
            port,
        }
    }

    fn spawn(port: u16) -> Child {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        wait_for_port(port, "redis-server");
        child
    }

    /// Kills the server: every client loses its connections, and every key is gone.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts an empty server on the same port, as Redis comes back after a crash with no
    /// persistence.
    pub fn start_again(&mut self) {
        self.child = Self::spawn(self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `FLUSHALL`: Redis loses every key.
    pub fn flushall(&self) {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "FLUSHALL"])
            .output()
            .expect("redis-cli");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of its own on loopback: six `redis-server --cluster-enabled yes`, three
/// masters and a replica each, removed when dropped.
pub struct PrivateRedisCluster {
    dir: PathBuf,
    nodes: Vec<(u16, Option<Child>)>,
}

impl PrivateRedisCluster {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "chime-redis-cluster-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("cluster directory");
        let mut nodes = Vec::new();
        while nodes.len() < 6 {
            // The cluster bus listens on port + 10000.
            let port = free_port_pair(10_000);
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            wait_for_port(port, "redis-server");
            nodes.push((port, Some(child)));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Self { dir, nodes };
        cluster.wait_healthy();
        cluster
    }

    fn cli(port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until every running node reports the cluster ok with three masters serving.
    pub fn wait_healthy(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self
                .nodes
                .iter()
                .filter(|(_, c)| c.is_some())
                .all(|(p, _)| {
                    Self::cli(*p, &["cluster", "info"]).contains("cluster_state:ok")
                        && Self::cli(*p, &["cluster", "nodes"])
                            .lines()
                            .filter(|l| {
                                l.contains("master")
                                    && !l.contains("fail")
                                    && l.split(' ').count() > 8
                            })
                            .count()
                            == 3
                });
            if ok {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the Redis Cluster did not settle"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis-cluster://…` with every node, as `CHIME_REDIS_URL` takes it.
    pub fn url(&self) -> String {
        let (first, rest) = self.nodes.split_first().expect("nodes");
        let others: Vec<String> = rest
            .iter()
            .map(|(p, _)| format!("node=127.0.0.1:{p}"))
            .collect();
        format!("redis-cluster://127.0.0.1:{}?{}", first.0, others.join("&"))
    }

    /// Kills one master that serves slots (SIGKILL); its replica takes over after the node
    /// timeout. Returns its port.
    pub fn kill9_a_master(&mut self) -> u16 {
        let (i, port) = self
            .nodes
            .iter()
            .enumerate()
            .find(|(_, (p, c))| c.is_some() && Self::cli(*p, &["role"]).starts_with("master"))
            .map(|(i, (p, _))| (i, *p))
            .expect("a running master");
        if let Some(mut child) = self.nodes[i].1.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        port
    }
}

impl Drop for PrivateRedisCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            if let Some(c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PostgreSQL cluster of its own (initdb in a scratch directory), which a test may stop
/// and start again.
pub struct PrivatePostgres {
    dir: PathBuf,
    pub port: u16,
}

fn pg_bin(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("no {name} (apt-get install postgresql)"))
}

/// PostgreSQL refuses to run as root: use its own account then.
fn as_pg(program: &Path) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl PrivatePostgres {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(chime_storage::testkit::unique("chime-pg"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let _ = Command::new("chmod").arg("777").arg(&dir).status();
        let init = as_pg(&pg_bin("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .output()
            .expect("initdb");
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        let pg = Self {
            dir,
            port: free_port(),
        };
        pg.start_again();
        pg
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        as_pg(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args)
            .output()
            .expect("pg_ctl")
    }

    /// Starts the server (again), on the same port and data.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let out = self.pg_ctl(&["-l", &log.to_string_lossy(), "-w", "-o", &options, "start"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_for_port(self.port, "postgres");
    }

    /// Stops the server at once, dropping every connection.
    pub fn stop(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `mariadbd` of its own (from the machine's `mariadb-server`), for the tests that crash
/// and restart the database. Durable commits (`innodb_flush_log_at_trx_commit=1`): what
/// Chime was told is committed must survive the crash.
pub struct PrivateMariadb {
    dir: PathBuf,
    child: Option<Child>,
    pub port: u16,
}

fn mariadbd() -> PathBuf {
    ["/usr/sbin/mariadbd", "/usr/bin/mariadbd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("mariadbd (apt-get install mariadb-server)")
}

impl PrivateMariadb {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(chime_storage::testkit::unique("chime-mariadb"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let user = whoami();
        let init = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--user={user}"))
            .arg("--auth-root-authentication-method=normal")
            .output()
            .expect("mariadb-install-db (apt-get install mariadb-server)");
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        let mut db = Self {
            dir,
            child: None,
            port: free_port(),
        };
        db.start_again();
        let created = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", &db.port.to_string(), "-u", "root"])
            .args(["-e", "CREATE DATABASE chime"])
            .output()
            .expect("mariadb client");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stderr)
        );
        db
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/chime", self.port)
    }

    /// Starts the server (again), on the same port and data (InnoDB recovers what it logged).
    pub fn start_again(&mut self) {
        let log = std::fs::File::create(self.dir.join("server.log")).expect("server log");
        let child = Command::new(mariadbd())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!(
                "--socket={}",
                self.dir.join("mariadb.sock").display()
            ))
            .arg(format!("--user={}", whoami()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-grant-tables"])
            .args(["--max-connections=300", "--innodb-buffer-pool-size=128M"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mariadbd");
        self.child = Some(child);
        wait_for_port(self.port, "mariadbd");
    }

    /// Kills the server (a crash): every connection drops at once.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "root".into())
}
