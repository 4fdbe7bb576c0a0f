//! `ExecutorService` over gRPC, and the server around an [`Executor`].

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{TaskKey, TimerId, Timestamp};
use chime_proto::v1::executor_service_server::{ExecutorService, ExecutorServiceServer};
use chime_proto::v1::{ExecuteRequest, ExecuteResponse, ForwardRequest, ForwardResponse};
use chime_runtime::admin::Readiness;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::Executor;
use crate::targets::Signer;
use crate::workers::Workers;
use crate::workers::peers::serve_forward;
use crate::workers::stream::WorkerGrpc;
use chime_proto::v1::worker_service_server::WorkerServiceServer;

pub struct ExecutorGrpc {
    executor: Arc<Executor>,
    /// Workers connected here, for peers' forwarded deliveries, and what checks them.
    workers: Option<(Arc<Workers>, Option<Arc<Signer>>)>,
}

#[tonic::async_trait]
impl ExecutorService for ExecutorGrpc {
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        // The scheduler's hand-off span is the parent (traceparent in the metadata).
        let span = tracing::info_span!(
            "execute",
            keys = request.get_ref().tasks.len(),
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        chime_runtime::adopt_context(&span, request.metadata());
        chime_runtime::record_ids(&span);
        let request = request.into_inner();
        let on_time = request.on_time.map(|n| n as usize);
        let keys = request
            .tasks
            .into_iter()
            .map(|t| {
                TimerId::new(t.timer_id)
                    .map(|id| TaskKey::new(id, Timestamp::from_millis(t.run_at_ms)))
                    .map_err(|e| Status::invalid_argument(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let offered = self
            .executor
            .offer_in(&keys, on_time, span)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(ExecuteResponse {
            accepted: u32::try_from(offered.accepted).unwrap_or(u32::MAX),
            available: u32::try_from(offered.available).unwrap_or(u32::MAX),
        }))
    }

    async fn forward(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<ForwardResponse>, Status> {
        let answer = match &self.workers {
            Some((workers, signer)) => {
                serve_forward(workers, signer.as_ref(), request.into_inner()).await?
            }
            None => {
                let mut none = ForwardResponse::default();
                none.set_result(chime_proto::v1::forward_response::Result::NoWorker);
                none
            }
        };
        Ok(Response::new(answer))
    }

    async fn list_workers(
        &self,
        request: Request<chime_proto::v1::ListWorkersRequest>,
    ) -> Result<Response<chime_proto::v1::ListWorkersResponse>, Status> {
        let listed = match &self.workers {
            Some((workers, _)) => {
                crate::workers::peers::serve_list_workers(workers, request.into_inner())
            }
            None => Default::default(),
        };
        Ok(Response::new(listed))
    }
}

/// Serves `ExecutorService` on `grpc` (and the admin endpoints) until `shutdown`; then stops
/// taking work, drains accepted keys within `grace`, and stops the servers.
pub async fn serve(
    executor: Arc<Executor>,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    shutdown: CancellationToken,
    grace: Duration,
    tls: Option<chime_runtime::Tls>,
) -> anyhow::Result<()> {
    serve_with_workers(executor, None, grpc, admin, readiness, shutdown, grace, tls).await
}

/// [`serve`], also serving `WorkerService` (registered workers) when `workers` is given.
#[allow(clippy::too_many_arguments)]
pub async fn serve_with_workers(
    executor: Arc<Executor>,
    workers: Option<WorkerGrpc>,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    shutdown: CancellationToken,
    grace: Duration,
    tls: Option<chime_runtime::Tls>,
) -> anyhow::Result<()> {
    chime_runtime::describe_metrics(crate::METRICS);
    let (health, introspection) =
        chime_proto::introspection(&["chime/v1/executor.proto", "chime/v1/worker.proto"])?;
    health
        .set_serving::<ExecutorServiceServer<ExecutorGrpc>>()
        .await;
    let servers_stop = CancellationToken::new();
    let workers_stop = workers.as_ref().map(WorkerGrpc::stop_token);
    let server = chime_runtime::grpc_server(tls.as_ref())?
        .add_routes(introspection)
        .add_service(ExecutorServiceServer::new(ExecutorGrpc {
            executor: executor.clone(),
            workers: workers.as_ref().map(|w| (w.workers(), w.signer())),
        }))
        .add_optional_service(workers.map(WorkerServiceServer::new))
        .serve_with_incoming_shutdown(
            chime_proto::incoming(grpc),
            servers_stop.clone().cancelled_owned(),
        );
    let admin = chime_runtime::admin::serve_admin(admin, readiness, servers_stop.clone());
    let drain = async {
        shutdown.cancelled().await;
        health
            .set_not_serving::<ExecutorServiceServer<ExecutorGrpc>>()
            .await;
        tracing::info!(in_flight = executor.in_flight(), "draining");
        let left = executor.drain(grace).await;
        if let Some(stop) = &workers_stop {
            stop.cancel();
        }
        if left > 0 {
            tracing::warn!(
                left,
                "grace period over; unfinished keys are left to the sweeper"
            );
        }
        servers_stop.cancel();
    };
    let (g, a, ()) = tokio::join!(server, admin, drain);
    g?;
    a?;
    tracing::info!("executor stopped");
    Ok(())
}
