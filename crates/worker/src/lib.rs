//! A client for Chime's registered workers. A worker connects to an executor
//! (`chime.v1.WorkerService/Connect`) with an app token, names its group, and takes that
//! group's deliveries, at most `credits` at once; the handler's [`Answer`] acks or nacks each.
//! A dropped connection is re-established with backoff; deliveries open at that moment go to
//! other workers, so a handler must tolerate seeing an occurrence twice (its idempotency key
//! is the same on every attempt).
//!
//! ```no_run
//! # async fn example() -> Result<(), chime_worker::Error> {
//! use chime_worker::{Answer, WorkerConfig};
//! let config = WorkerConfig::new("http://chime-executor:50061", "billing", "invoices")
//!     .with_token("chime_…");
//! chime_worker::run(config, |delivery| async move {
//!     println!("{} attempt {}", delivery.idempotency_key, delivery.attempt);
//!     Answer::Ack
//! }, tokio_util::sync::CancellationToken::new()).await
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chime_proto::v1 as pb;
use chime_proto::v1::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{ClientTlsConfig, Endpoint};

/// Where and as whom a worker connects.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// An executor's gRPC URL (`http://host:50061`, `https://…` with `tls`).
    pub server: String,
    /// An app token of `app` (none when the executors run with auth off).
    pub token: Option<String>,
    pub app: String,
    pub group: String,
    /// Deliveries handled at once.
    pub credits: u32,
    /// Shown in the executor's logs.
    pub name: String,
    pub tls: Option<ClientTlsConfig>,
}

impl WorkerConfig {
    pub fn new(
        server: impl Into<String>,
        app: impl Into<String>,
        group: impl Into<String>,
    ) -> Self {
        Self {
            server: server.into(),
            token: None,
            app: app.into(),
            group: group.into(),
            credits: 1,
            name: String::new(),
            tls: None,
        }
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn with_credits(mut self, credits: u32) -> Self {
        self.credits = credits.max(1);
        self
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// One attempt of one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    /// `{timer_id}:{run_at_ms}`: the same on every attempt of the occurrence.
    pub idempotency_key: String,
    pub timer_id: i64,
    pub app: String,
    pub timer_name: String,
    /// When the occurrence was due (RFC 3339, ms).
    pub scheduled_at: String,
    pub attempt: u32,
    pub body: Vec<u8>,
    /// The callback's headers and Chime's (`idempotency-key`, `x-chime-*`, `traceparent`,
    /// `webhook-*` signature headers).
    pub headers: HashMap<String, String>,
    /// How long the executor waits for the answer.
    pub ack_timeout: Duration,
    /// Whether the timer keeps output: when false, an answer's output is not sent.
    pub keep_output: bool,
    /// A broadcast run's shard: (index, 0-based; total). `None` for other runs.
    pub shard: Option<(u32, u32)>,
}

impl From<pb::Delivery> for Delivery {
    fn from(d: pb::Delivery) -> Self {
        Self {
            id: d.delivery_id,
            idempotency_key: d.idempotency_key,
            timer_id: d.timer_id,
            app: d.app,
            timer_name: d.timer_name,
            scheduled_at: d.scheduled_at,
            attempt: d.attempt,
            body: d.body,
            headers: d.headers,
            ack_timeout: Duration::from_millis(u64::from(d.ack_timeout_ms)),
            keep_output: !d.omit_output,
            shard: (d.shard_total > 0).then_some((d.shard_index, d.shard_total)),
        }
    }
}

/// What the handler made of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ack,
    /// Failed; `retryable` lets the timer's retry policy try again.
    Nack {
        retryable: bool,
        error: String,
    },
}

impl Answer {
    /// This answer with what the work printed, kept as the run's `output` (the executor
    /// keeps its last 4 KiB).
    pub fn with_output(self, output: impl Into<String>) -> Answered {
        Answered {
            answer: self,
            output: Some(output.into()),
        }
    }
}

/// An [`Answer`] and, optionally, the output that goes with it. A handler returns either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub answer: Answer,
    pub output: Option<String>,
}

impl From<Answer> for Answered {
    fn from(answer: Answer) -> Self {
        Self {
            answer,
            output: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid server URL {0:?}: {1}")]
    Server(String, String),
    /// Refused for good: a bad token, an app the token may not act for, a bad group.
    #[error("the executor refused this worker: {0}")]
    Refused(tonic::Status),
}

/// Runs the worker until `stop`: connects, takes deliveries, answers each with `handler`,
/// and reconnects (backoff 100 ms doubling to 5 s) when the connection drops.
pub async fn run<F, Fut, A>(
    config: WorkerConfig,
    handler: F,
    stop: CancellationToken,
) -> Result<(), Error>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = A> + Send + 'static,
    A: Into<Answered>,
{
    let handler = Arc::new(handler);
    let mut endpoint = Endpoint::from_shared(config.server.clone())
        .map_err(|e| Error::Server(config.server.clone(), e.to_string()))?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5));
    if let Some(tls) = config.tls.clone() {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| Error::Server(config.server.clone(), e.to_string()))?;
    }
    let mut backoff = Duration::from_millis(100);
    while !stop.is_cancelled() {
        match session(&endpoint, &config, handler.clone(), &stop).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(status) if refused_for_good(&status) => return Err(Error::Refused(status)),
            Err(status) => {
                tracing::warn!(error = %status.message(), code = ?status.code(), "worker connection lost; reconnecting");
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    Ok(())
}

fn refused_for_good(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument
    )
}

/// One connection: ends when the stream does (`Ok`: the executor closed it) or fails.
async fn session<F, Fut, A>(
    endpoint: &Endpoint,
    config: &WorkerConfig,
    handler: Arc<F>,
    stop: &CancellationToken,
) -> Result<(), tonic::Status>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = A> + Send + 'static,
    A: Into<Answered>,
{
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("cannot connect: {e}")))?;
    let (out, outbound) = mpsc::channel::<pb::WorkerMessage>(config.credits as usize + 16);
    let register = pb::WorkerMessage {
        kind: Some(pb::worker_message::Kind::Register(pb::Register {
            app: config.app.clone(),
            group: config.group.clone(),
            credits: config.credits,
            name: config.name.clone(),
        })),
    };
    let _ = out.send(register).await;
    let mut request = tonic::Request::new(ReceiverStream::new(outbound));
    if let Some(token) = &config.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("the token is not valid header text"))?;
        request.metadata_mut().insert("authorization", value);
    }
    let mut inbound = WorkerServiceClient::new(channel)
        .connect(request)
        .await?
        .into_inner();
    let handling = CancellationToken::new();
    let _stop_handlers = handling.clone().drop_guard();
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            m = inbound.message() => m?,
        };
        let Some(message) = message else {
            return Ok(());
        };
        match message.kind {
            Some(pb::executor_message::Kind::Registered(r)) => {
                tracing::info!(worker_id = %r.worker_id, app = %config.app, group = %config.group, "worker registered");
            }
            Some(pb::executor_message::Kind::Delivery(d)) => {
                let handler = handler.clone();
                let out = out.clone();
                let handling = handling.clone();
                tokio::spawn(async move {
                    let id = d.delivery_id.clone();
                    let omit_output = d.omit_output;
                    let answered: Answered = tokio::select! {
                        a = handler(d.into()) => a.into(),
                        // The connection is gone: the executor has moved it on already.
                        () = handling.cancelled() => return,
                    };
                    let output = answered.output.filter(|_| !omit_output).unwrap_or_default();
                    let kind = match answered.answer {
                        Answer::Ack => pb::worker_message::Kind::Ack(pb::Ack {
                            delivery_id: id,
                            output,
                        }),
                        Answer::Nack { retryable, error } => {
                            pb::worker_message::Kind::Nack(pb::Nack {
                                delivery_id: id,
                                retryable,
                                error,
                                output,
                            })
                        }
                    };
                    let _ = out.send(pb::WorkerMessage { kind: Some(kind) }).await;
                });
            }
            None => {}
        }
    }
}
