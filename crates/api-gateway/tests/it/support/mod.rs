//! A gateway served in-process on loopback ports over a private PostgreSQL schema and a
//! private Redis prefix for its hot index.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use chime_api_gateway::{AuthSettings, Gateway, TimerApi, TimerService};
use chime_domain::{Horizon, ShardKey, SystemClock, TaskKey, Timestamp};
use chime_storage::testkit::{self, PgFixture, RedisFixture};
use chime_storage::{HotEntry, HotIndex, StoreError, StoreResult};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The admin token every test gateway accepts.
pub const BOOTSTRAP: &str = "test-bootstrap-token-0123456789";

pub struct TestGateway {
    pub http: String,
    pub grpc: String,
    /// Sends the bootstrap token with every request.
    pub client: reqwest::Client,
    /// Sends no token.
    pub anonymous: reqwest::Client,
    pub db: PgFixture,
    /// The hot index the gateway writes to (a private Redis prefix), if it has one.
    pub redis: Option<RedisFixture>,
    shutdown: CancellationToken,
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn loopback() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// A hot index whose Redis is gone: every call fails as a lost connection does.
pub struct DownIndex;

#[async_trait]
impl HotIndex for DownIndex {
    async fn add(&self, _: &[HotEntry]) -> StoreResult<()> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn due(
        &self,
        _: ShardKey,
        _: Timestamp,
        _: usize,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn touch(&self, _: &[ShardKey]) -> StoreResult<()> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn remove(&self, _: ShardKey, _: &[TaskKey]) -> StoreResult<()> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn shard_complete(&self, _: ShardKey) -> StoreResult<bool> {
        Err(StoreError::unavailable("connection refused"))
    }
}

/// The one broker test gateways allow timers to publish to.
pub const ALLOWED_BROKER: &str = "nats://127.0.0.1:4222";

/// A gateway on PostgreSQL and a Redis hot index.
pub async fn start() -> TestGateway {
    let redis = testkit::redis().await;
    let index = redis.hot_index();
    start_with(Some(index), Some(redis), None, None).await
}

/// A gateway (no hot index) serving REST and gRPC over TLS.
pub async fn start_tls(tls: chime_runtime::Tls) -> TestGateway {
    start_with(None, None, None, Some(tls)).await
}

/// A gateway (no hot index) limiting each app's creates.
pub async fn start_with_quotas(quotas: chime_api_gateway::QuotaSettings) -> TestGateway {
    start_with(None, None, Some(quotas), None).await
}

/// A gateway whose hot index is down.
pub async fn start_with_index_down() -> TestGateway {
    start_with(Some(Arc::new(DownIndex)), None, None, None).await
}

async fn start_with(
    index: Option<Arc<dyn HotIndex>>,
    redis: Option<RedisFixture>,
    quotas: Option<chime_api_gateway::QuotaSettings>,
    tls: Option<chime_runtime::Tls>,
) -> TestGateway {
    let db = testkit::pg().await;
    let shutdown = CancellationToken::new();
    let mut service = TimerService::new(
        db.store(),
        db.store(),
        index,
        // Without the per-timer spread, so the tests can count the rows a change writes.
        Horizon {
            spread: std::time::Duration::ZERO,
            ..Horizon::DEFAULT
        },
        Arc::new(SystemClock),
    )
    // The tests call back loopback addresses; the policy itself is tested in callbacks.rs.
    .with_networks(chime_domain::NetworkPolicy::open())
    .with_brokers(vec![
        chime_domain::BrokerUrl::parse(ALLOWED_BROKER).expect("a broker URL"),
    ])
    .with_calendars(db.store())
    .with_activity(db.store())
    .with_notifications(db.store())
    .with_chains(db.store())
    .with_shards(db.store());
    if let Some(q) = quotas {
        service = service.with_quotas(q);
    }
    let api: Arc<dyn TimerApi> = Arc::new(service);
    let gateway = Gateway::new(
        api,
        db.store(),
        Arc::new(SystemClock),
        &AuthSettings {
            bootstrap_token: Some(BOOTSTRAP.into()),
            ..AuthSettings::off()
        },
    )
    .with_tls(tls);
    let (http, http_addr) = loopback().await;
    let (grpc, grpc_addr) = loopback().await;
    tokio::spawn(gateway.serve(http, grpc, None, shutdown.clone()));
    TestGateway {
        http: format!("http://{http_addr}"),
        grpc: format!("http://{grpc_addr}"),
        client: client_with(Some(BOOTSTRAP)),
        anonymous: client_with(None),
        db,
        redis,
        shutdown,
    }
}

/// An HTTP client sending `token` as its bearer token.
pub fn client_with(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
    }
    chime_runtime::http_client()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A gRPC client of `gw` sending `token` (none: no token).
pub async fn grpc_client(gw: &TestGateway, token: Option<&str>) -> chime_proto::AuthedTimerClient {
    let channel = tonic::transport::Channel::from_shared(gw.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    grpc_client_on(channel, token)
}

/// A gRPC client on `channel` sending `token`.
pub fn grpc_client_on(
    channel: tonic::transport::Channel,
    token: Option<&str>,
) -> chime_proto::AuthedTimerClient {
    chime_proto::v1::timer_service_client::TimerServiceClient::with_interceptor(
        channel,
        chime_proto::Bearer::new(token).unwrap(),
    )
}

/// A valid gRPC timer of `app`/`name`: every minute, calling back a port nothing listens on.
pub fn grpc_spec(app: &str, name: &str) -> chime_proto::v1::TimerSpec {
    use chime_proto::v1 as pb;
    pb::TimerSpec {
        app: app.into(),
        name: name.into(),
        schedule: Some(pb::Schedule {
            kind: Some(pb::schedule::Kind::Every("1m".into())),
            anchor: None,
        }),
        callback: Some(pb::Callback {
            url: "http://127.0.0.1:9/cb".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A valid create body for `app`/`name`.
pub fn timer_json(app: &str, name: &str) -> Value {
    json!({
        "app": app,
        "name": name,
        "schedule": {"cron": "0 0 2 * * *", "time_zone": "Europe/Berlin"},
        "callback": {"url": "http://billing.internal/run", "method": "POST",
                     "headers": {"X-Job": "invoice"}, "body": "{\"kind\":\"nightly\"}",
                     "timeout": "5s"},
        "retry": {"max_attempts": 3, "initial_backoff": "1s", "max_backoff": "60s"},
        "enabled": true
    })
}

impl TestGateway {
    /// Another gateway replica over the same database (no hot index), serving REST until
    /// the returned token is cancelled: its base URL.
    pub async fn replica(&self) -> (String, tokio_util::sync::DropGuard) {
        let api: Arc<dyn TimerApi> = Arc::new(TimerService::new(
            self.db.store(),
            self.db.store(),
            None,
            Horizon::DEFAULT,
            Arc::new(SystemClock),
        ));
        let gateway = Gateway::new(
            api,
            self.db.store(),
            Arc::new(SystemClock),
            &AuthSettings {
                bootstrap_token: Some(BOOTSTRAP.into()),
                ..AuthSettings::off()
            },
        );
        let (http, http_addr) = loopback().await;
        let (grpc, _) = loopback().await;
        let stop = CancellationToken::new();
        tokio::spawn(gateway.serve(http, grpc, None, stop.clone()));
        (format!("http://{http_addr}"), stop.drop_guard())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http)
    }

    /// Sends JSON and returns (status, content type, body).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, String, Value) {
        let mut req = self.client.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        read(req.send().await.unwrap()).await
    }

    pub async fn create(&self, app: &str, name: &str) -> Value {
        let (status, _, body) = self
            .send(
                reqwest::Method::POST,
                "/v1/timers",
                Some(timer_json(app, name)),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }
}

pub async fn read(resp: reqwest::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, ct, body)
}

/// Asserts a problem+json response with the given status, code and (if given) field.
pub fn assert_problem(resp: &(u16, String, Value), status: u16, code: &str, field: Option<&str>) {
    let (got, ct, body) = resp;
    assert_eq!(*got, status, "{body}");
    assert_eq!(ct, "application/problem+json", "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    if let Some(f) = field {
        assert_eq!(body["field"], f, "{body}");
    }
}

/// Polls `check` until it holds, failing after five seconds: for what the gateway finishes
/// after it answered (a stopped timer's runs taken out of the store and the index).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
