//! A gateway served in-process on loopback ports over a private PostgreSQL schema, with a
//! real gRPC migrator on loopback that records the MigrateTimer calls it gets.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_api_gateway::migrator::{GrpcMigrator, MigrateNotifier};
use chime_api_gateway::{TimerApi, TimerService};
use chime_domain::SystemClock;
use chime_proto::v1::migrator_service_server::{MigratorService, MigratorServiceServer};
use chime_proto::v1::{MigrateTimerRequest, MigrateTimerResponse, MigrateTimersRequest};
use chime_storage::testkit::{self, PgFixture};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct RecordingMigrator(pub Arc<Mutex<Vec<i64>>>);

#[tonic::async_trait]
impl MigratorService for RecordingMigrator {
    async fn migrate_timer(
        &self,
        req: tonic::Request<MigrateTimerRequest>,
    ) -> Result<tonic::Response<MigrateTimerResponse>, tonic::Status> {
        self.0.lock().unwrap().push(req.into_inner().timer_id);
        Ok(tonic::Response::new(MigrateTimerResponse {
            materialized: 1,
        }))
    }

    /// Records a batch's ids negated, so tests tell the two calls apart.
    async fn migrate_timers(
        &self,
        req: tonic::Request<MigrateTimersRequest>,
    ) -> Result<tonic::Response<MigrateTimerResponse>, tonic::Status> {
        let ids = req.into_inner().timer_ids;
        self.0.lock().unwrap().extend(ids.iter().map(|id| -id));
        Ok(tonic::Response::new(MigrateTimerResponse {
            materialized: ids.len() as u64,
        }))
    }
}

pub struct TestGateway {
    pub http: String,
    pub grpc: String,
    pub migrated: Arc<Mutex<Vec<i64>>>,
    pub client: reqwest::Client,
    pub db: PgFixture,
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

/// A gateway whose migrator answers and records.
pub async fn start() -> TestGateway {
    let recorder = RecordingMigrator::default();
    let (listener, addr) = loopback().await;
    let shutdown = CancellationToken::new();
    let server = tonic::transport::Server::builder()
        .add_service(MigratorServiceServer::new(recorder.clone()))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown.clone().cancelled_owned(),
        );
    tokio::spawn(server);
    start_with(&format!("http://{addr}"), recorder.0, shutdown).await
}

/// A gateway whose migrator endpoint has nobody listening.
pub async fn start_without_migrator() -> TestGateway {
    start_with(
        "http://127.0.0.1:1",
        Arc::default(),
        CancellationToken::new(),
    )
    .await
}

async fn start_with(
    migrator_url: &str,
    migrated: Arc<Mutex<Vec<i64>>>,
    shutdown: CancellationToken,
) -> TestGateway {
    let db = testkit::pg().await;
    let migrator: Arc<dyn MigrateNotifier> =
        Arc::new(GrpcMigrator::new(migrator_url, Duration::from_secs(1)).unwrap());
    let api: Arc<dyn TimerApi> = Arc::new(TimerService::new(
        db.store(),
        db.store(),
        migrator,
        Arc::new(SystemClock),
    ));
    let (http, http_addr) = loopback().await;
    let (grpc, grpc_addr) = loopback().await;
    tokio::spawn(chime_api_gateway::serve(
        api,
        http,
        grpc,
        None,
        shutdown.clone(),
    ));
    TestGateway {
        http: format!("http://{http_addr}"),
        grpc: format!("http://{grpc_addr}"),
        migrated,
        client: chime_runtime::http_client().build().unwrap(),
        db,
        shutdown,
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
