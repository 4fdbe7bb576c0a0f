//! `MigratorService` over gRPC, and the server that runs it beside the periodic step.

use std::sync::Arc;

use chime_domain::{TimerId, Timestamp};
use chime_proto::v1::migrator_service_server::{MigratorService, MigratorServiceServer};
use chime_proto::v1::{MigrateTimerRequest, MigrateTimerResponse, MigrateTimersRequest};
use chime_runtime::admin::Readiness;
use chime_storage::StoreError;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::Migrator;

pub struct MigratorGrpc(pub Arc<Migrator>);

#[tonic::async_trait]
impl MigratorService for MigratorGrpc {
    async fn migrate_timer(
        &self,
        request: Request<MigrateTimerRequest>,
    ) -> Result<Response<MigrateTimerResponse>, Status> {
        let r = request.into_inner();
        let id = TimerId::new(r.timer_id).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let triggered = r.triggered_run_at_ms.map(Timestamp::from_millis);
        let done = self
            .0
            .migrate_timer(id, triggered)
            .await
            .map_err(status_of)?;
        Ok(Response::new(MigrateTimerResponse {
            materialized: done.written,
        }))
    }

    async fn migrate_timers(
        &self,
        request: Request<MigrateTimersRequest>,
    ) -> Result<Response<MigrateTimerResponse>, Status> {
        let r = request.into_inner();
        if r.timer_ids.len() > MAX_TIMERS_PER_CALL {
            return Err(Status::invalid_argument(format!(
                "timer_ids: at most {MAX_TIMERS_PER_CALL} per call"
            )));
        }
        let ids = r
            .timer_ids
            .into_iter()
            .map(TimerId::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::invalid_argument(format!("timer_ids: {e}")))?;
        let done = self.0.migrate_timers(&ids).await.map_err(status_of)?;
        Ok(Response::new(MigrateTimerResponse {
            materialized: done.written,
        }))
    }
}

/// Bounds one `MigrateTimers` call's read and write.
pub const MAX_TIMERS_PER_CALL: usize = 1_000;

fn status_of(e: StoreError) -> Status {
    match e {
        StoreError::TimerNotFound(_) => Status::not_found(e.to_string()),
        StoreError::Invalid(_) => Status::invalid_argument(e.to_string()),
        StoreError::NameTaken { .. } | StoreError::IdempotencyKeyReused { .. } => {
            Status::already_exists(e.to_string())
        }
        StoreError::VersionConflict { .. } => Status::failed_precondition(e.to_string()),
        StoreError::Unavailable(_) => Status::unavailable(e.to_string()),
        StoreError::Internal(_) => Status::internal(e.to_string()),
    }
}

/// Runs the periodic step, `MigrateTimer` on `grpc` and the admin endpoints until
/// `shutdown`.
pub async fn serve(
    migrator: Arc<Migrator>,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    shutdown: CancellationToken,
    tls: Option<chime_runtime::Tls>,
) -> anyhow::Result<()> {
    chime_runtime::describe_metrics(crate::METRICS);
    let (health, introspection) = chime_proto::introspection(&["chime/v1/migrator.proto"])?;
    health
        .set_serving::<MigratorServiceServer<MigratorGrpc>>()
        .await;
    let server = chime_runtime::grpc_server(tls.as_ref())?
        .add_routes(introspection)
        .add_service(MigratorServiceServer::new(MigratorGrpc(migrator.clone())))
        .serve_with_incoming_shutdown(
            chime_proto::incoming(grpc),
            shutdown.clone().cancelled_owned(),
        );
    let admin = chime_runtime::admin::serve_admin(admin, readiness, shutdown.clone());
    let (g, a, ()) = tokio::join!(server, admin, migrator.run(shutdown.clone()));
    g?;
    a?;
    tracing::info!("migrator stopped");
    Ok(())
}
