//! `ExecutorService` over gRPC, and the server around an [`Executor`].

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{TaskKey, TimerId, Timestamp};
use chime_proto::v1::executor_service_server::{ExecutorService, ExecutorServiceServer};
use chime_proto::v1::{ExecuteRequest, ExecuteResponse};
use chime_runtime::admin::Readiness;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::Executor;

pub struct ExecutorGrpc(pub Arc<Executor>);

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
        let keys = request
            .into_inner()
            .tasks
            .into_iter()
            .map(|t| {
                TimerId::new(t.timer_id)
                    .map(|id| TaskKey::new(id, Timestamp::from_millis(t.run_at_ms)))
                    .map_err(|e| Status::invalid_argument(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let offered = self
            .0
            .offer_in(&keys, span)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(ExecuteResponse {
            accepted: u32::try_from(offered.accepted).unwrap_or(u32::MAX),
            available: u32::try_from(offered.available).unwrap_or(u32::MAX),
        }))
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
    chime_runtime::describe_metrics(crate::METRICS);
    let (health, introspection) = chime_proto::introspection(&["chime/v1/executor.proto"])?;
    health
        .set_serving::<ExecutorServiceServer<ExecutorGrpc>>()
        .await;
    let servers_stop = CancellationToken::new();
    let server = chime_runtime::grpc_server(tls.as_ref())?
        .add_routes(introspection)
        .add_service(ExecutorServiceServer::new(ExecutorGrpc(executor.clone())))
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
