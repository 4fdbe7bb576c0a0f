//! Message brokers for the delivery-target tests: the machine's NATS (JetStream) and RabbitMQ
//! for plain runs, and private servers of the test's own to kill and start again. What a
//! broker holds is read back here: the receiver's record, never Chime's tables.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::free_port;

/// The shared NATS server: `CHIME_TEST_NATS_URL` (set by `scripts/with-test-services.sh`).
pub fn nats_url() -> String {
    std::env::var("CHIME_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// The shared RabbitMQ: `CHIME_TEST_AMQP_URL`.
pub fn amqp_url() -> String {
    std::env::var("CHIME_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn wait_for_port(port: u16, what: &str, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(chime_storage::testkit::unique(what));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Kills the server process at once. Each server here is one process (`nats-server`; the
/// Erlang VM that `rabbitmq-server` execs into), signalled by its pid: never a process group
/// through the `kill` command, which once read `kill -9 -<pgid>` as `-1` (every process on
/// the machine).
fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A `nats-server -js` of its own, its stream store in a scratch directory.
pub struct PrivateNats {
    dir: PathBuf,
    child: Option<Child>,
    pub port: u16,
}

impl PrivateNats {
    pub fn start() -> Self {
        let mut nats = Self {
            dir: scratch("chime-nats"),
            child: None,
            port: free_port(),
        };
        nats.start_again();
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on the same port and store.
    pub fn start_again(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.join("store"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("nats-server (apt-get install nats-server)");
        self.child = Some(child);
        wait_for_port(self.port, "nats-server", Duration::from_secs(30));
    }

    /// Kills it at once.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill9(&mut c);
        }
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A RabbitMQ node of its own (the machine's `rabbitmq-server`), with its own name, port,
/// configuration and data.
pub struct PrivateRabbit {
    dir: PathBuf,
    child: Option<Child>,
    pub port: u16,
}

impl PrivateRabbit {
    pub fn start() -> Self {
        let dir = scratch("chime-rabbit");
        let port = free_port();
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("plugins file");
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .expect("config file");
        std::fs::write(dir.join("env.conf"), "").expect("env file");
        let mut rabbit = Self {
            dir,
            child: None,
            port,
        };
        rabbit.start_again();
        rabbit
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts the node (again) on the same port and data.
    pub fn start_again(&mut self) {
        let d = |name: &str| self.dir.join(name).display().to_string();
        let name = self
            .dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace('-', "_");
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log");
        let child = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .env("HOME", d(""))
            .env("RABBITMQ_CONF_ENV_FILE", d("env.conf"))
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_NODENAME", format!("{name}@localhost"))
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_PID_FILE", d("pid"))
            // The script execs the VM instead of running it as a child: the pid we hold is
            // the broker's.
            .env("RUNNING_UNDER_SYSTEMD", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("rabbitmq-server (apt-get install rabbitmq-server)");
        self.child = Some(child);
        // The Erlang VM boots in seconds on an idle machine; beside the other end-to-end
        // tests on a slow one, a restart took over a minute (2026-12-02, in .ci/run).
        wait_for_port(self.port, "rabbitmq-server", Duration::from_secs(180));
    }

    /// Kills the node at once (the Erlang VM; its port helpers exit with it).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill9(&mut c);
        }
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A JetStream stream named `name` (file storage) for the subject `name.fired`; returns the
/// subject. Dropped by [`drop_nats_stream`].
pub async fn nats_stream(url: &str, name: &str) -> String {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("nats"));
    let subject = format!("{name}.fired");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.clone()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("create stream");
    subject
}

pub async fn drop_nats_stream(url: &str, name: &str) {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("nats"));
    let _ = js.delete_stream(name).await;
}

/// How many times each `Nats-Msg-Id` is in the stream.
pub async fn nats_received(url: &str, name: &str) -> HashMap<String, usize> {
    let Ok(client) = async_nats::connect(url).await else {
        return HashMap::new();
    };
    let js = async_nats::jetstream::new(client);
    let Ok(mut stream) = js.get_stream(name).await else {
        return HashMap::new();
    };
    let Ok(info) = stream.info().await else {
        return HashMap::new();
    };
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    let mut by_id = HashMap::new();
    for seq in first..=last {
        if let Ok(m) = stream.get_raw_message(seq).await
            && let Some(id) = m.headers.get("Nats-Msg-Id")
        {
            *by_id.entry(id.to_string()).or_insert(0) += 1;
        }
    }
    by_id
}

/// A durable queue named `name` on the broker at `url`.
pub async fn amqp_queue(url: &str, name: &str) {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    channel
        .queue_declare(
            name.into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .expect("queue_declare");
    let _ = conn.close(200, "done".into()).await;
}

/// Takes every message from the queue (acked, so it is gone), adding each `message_id` to
/// `into`; returns how many it took.
pub async fn amqp_drain(url: &str, name: &str, into: &mut HashMap<String, usize>) -> usize {
    let Ok(conn) = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await
    else {
        return 0;
    };
    let Ok(channel) = conn.create_channel().await else {
        return 0;
    };
    let mut taken = 0;
    while let Ok(Some(m)) = channel
        .basic_get(
            name.into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
    {
        let id = m
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        *into.entry(id).or_insert(0) += 1;
        taken += 1;
    }
    let _ = conn.close(200, "done".into()).await;
    taken
}

/// Deletes the queue.
pub async fn drop_amqp_queue(url: &str, name: &str) {
    if let Ok(conn) = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await
        && let Ok(channel) = conn.create_channel().await
    {
        let _ = channel
            .queue_delete(name.into(), lapin::options::QueueDeleteOptions::default())
            .await;
        let _ = conn.close(200, "done".into()).await;
    }
}
