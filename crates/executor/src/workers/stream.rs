//! `chime.v1.WorkerService/Connect`: authenticates a worker by its app token, registers it
//! with [`Workers`], forwards its acks, nacks and credits, and unregisters it when the
//! stream ends (its open deliveries then go to other workers).

use std::sync::Arc;
use std::time::Duration;

use chime_domain::AppName;
use chime_proto::v1 as pb;
use chime_proto::v1::worker_service_server::WorkerService;
use chime_runtime::auth::Authenticator;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::{MAX_CREDITS, Reply, Workers};
use crate::targets::Signer;

/// How long a new stream may take to send its Register.
const REGISTER_WITHIN: Duration = Duration::from_secs(10);

pub struct WorkerGrpc {
    workers: Arc<Workers>,
    /// `None`: auth off (`chime dev`), any app may connect.
    auth: Option<Arc<Authenticator>>,
    /// Ends every stream: the server's graceful stop waits for open streams.
    stop: CancellationToken,
    /// Checks the signature of peers' forwarded deliveries.
    signer: Option<Arc<Signer>>,
}

impl WorkerGrpc {
    pub fn new(workers: Arc<Workers>, auth: Option<Arc<Authenticator>>) -> Self {
        Self {
            workers,
            auth,
            stop: CancellationToken::new(),
            signer: None,
        }
    }

    /// Takes forwarded deliveries only when signed with their app's secret: the executors'
    /// port is open to workers, who must not inject deliveries for another app.
    pub fn with_signer(mut self, signer: Arc<Signer>) -> Self {
        self.signer = Some(signer);
        self
    }

    pub fn signer(&self) -> Option<Arc<Signer>> {
        self.signer.clone()
    }

    /// The registry the streams feed.
    pub fn workers(&self) -> Arc<Workers> {
        self.workers.clone()
    }

    /// Cancelled once the executor has drained, to close the workers' streams.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Checks the bearer token against the app the worker names.
    async fn authorize(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        app: &AppName,
    ) -> Result<(), Status> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        let header = metadata
            .get("authorization")
            .and_then(|v| http::HeaderValue::from_bytes(v.as_bytes()).ok());
        match auth.authenticate(header.as_ref()).await {
            Ok(verified) if verified.may_act_for(app) => Ok(()),
            Ok(_) => Err(Status::permission_denied(format!(
                "this token may not act for app {app}"
            ))),
            Err(Ok(_)) => Err(Status::unauthenticated(
                "a worker needs authorization: Bearer <app token>",
            )),
            Err(Err(e)) => Err(Status::unavailable(format!(
                "cannot check the token now: {e}"
            ))),
        }
    }
}

fn registration(message: Option<pb::WorkerMessage>) -> Result<pb::Register, Status> {
    match message.and_then(|m| m.kind) {
        Some(pb::worker_message::Kind::Register(r)) => Ok(r),
        _ => Err(Status::invalid_argument(
            "the first message of a worker stream must be a Register",
        )),
    }
}

#[tonic::async_trait]
impl WorkerService for WorkerGrpc {
    type ConnectStream = ReceiverStream<Result<pb::ExecutorMessage, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let metadata = request.metadata().clone();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_WITHIN, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register within 10s"))??;
        let register = registration(first)?;
        let app = AppName::parse(register.app.clone())
            .map_err(|e| Status::invalid_argument(format!("register.{e}")))?;
        let group = chime_domain::worker_group(&register.group)
            .map_err(|e| Status::invalid_argument(format!("register.{e}")))?;
        self.authorize(&metadata, &app).await?;
        // Deliveries are bounded by credits; the extra room is for Registered.
        let (tx, rx) = mpsc::channel(MAX_CREDITS as usize + 1);
        let conn = self.workers.register(
            app.clone(),
            group.clone(),
            register.credits.max(1),
            &register.name,
            tx.clone(),
        );
        tracing::info!(worker = %conn.id, %app, group, credits = register.credits, "worker connected");
        let registered = pb::ExecutorMessage {
            kind: Some(pb::executor_message::Kind::Registered(pb::Registered {
                worker_id: conn.id.clone(),
            })),
        };
        let _ = tx.send(Ok(registered)).await;
        // The registry's sender is the stream's only one from here: unregistering ends it.
        drop(tx);
        let workers = self.workers.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    m = inbound.message() => m,
                    () = stop.cancelled() => break,
                };
                let kind = match message {
                    Ok(Some(m)) => m.kind,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::info!(worker = %conn.id, error = %e, "worker stream failed");
                        break;
                    }
                };
                match kind {
                    Some(pb::worker_message::Kind::Ack(a)) => {
                        let reply = Reply::Ack { output: a.output };
                        workers.answer(&conn, &a.delivery_id, reply);
                    }
                    Some(pb::worker_message::Kind::Nack(n)) => workers.answer(
                        &conn,
                        &n.delivery_id,
                        Reply::Nack {
                            retryable: n.retryable,
                            error: n.error,
                            output: n.output,
                        },
                    ),
                    Some(pb::worker_message::Kind::Credits(c)) => {
                        workers.set_credits(&conn, c.credits);
                    }
                    Some(pb::worker_message::Kind::Register(_)) | None => {}
                }
            }
            workers.unregister(&conn);
            tracing::info!(worker = %conn.id, "worker disconnected");
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
