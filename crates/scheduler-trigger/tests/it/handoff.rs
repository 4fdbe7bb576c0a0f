//! The gRPC hand-off to executors (a fake executor over a real connection): what it retries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use chime_domain::{TaskKey, TimerId, Timestamp};
use chime_proto::v1::executor_service_server::{ExecutorService, ExecutorServiceServer};
use chime_proto::v1::{ExecuteRequest, ExecuteResponse, ForwardRequest, ForwardResponse};
use chime_scheduler::{Endpoints, GrpcExecutors, Handoff};
use tonic::{Request, Response, Status};

/// An executor whose backlog share is taken: it takes the keys on time and refuses the rest,
/// noting how many tasks each call carried.
#[derive(Default)]
struct BacklogFull {
    calls: Mutex<Vec<usize>>,
}

#[tonic::async_trait]
impl ExecutorService for BacklogFull {
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let request = request.into_inner();
        self.calls.lock().unwrap().push(request.tasks.len());
        Ok(Response::new(ExecuteResponse {
            accepted: request.on_time.unwrap_or(0),
            available: 100,
        }))
    }

    async fn forward(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<ForwardResponse>, Status> {
        Err(Status::unimplemented("not a worker executor"))
    }

    async fn list_workers(
        &self,
        _: Request<chime_proto::v1::ListWorkersRequest>,
    ) -> Result<Response<chime_proto::v1::ListWorkersResponse>, Status> {
        Err(Status::unimplemented("not a worker executor"))
    }
}

fn keys(n: i64) -> Vec<TaskKey> {
    (1..=n)
        .map(|i| TaskKey::new(TimerId::new(i).unwrap(), Timestamp::from_millis(i)))
        .collect()
}

#[tokio::test]
async fn a_refused_backlog_is_given_back_at_once_and_refused_keys_on_time_are_retried() {
    let executor = Arc::new(BacklogFull::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExecutorServiceServer::from_arc(executor.clone()))
            .serve_with_incoming(chime_proto::incoming(listener)),
    );
    let fleet = GrpcExecutors::new(Endpoints::Static(vec![url])).await;

    // Four on time and six of a backlog: the backlog's refusal is the shard's to retry,
    // after its own back-off; rounds here held up the keys on time merged into the call.
    assert_eq!(fleet.hand_off_ordered(&keys(10), 4).await, 4);
    assert_eq!(*executor.calls.lock().unwrap(), vec![10]);

    // Keys on time refused (the executor is full): offered again, in three rounds.
    executor.calls.lock().unwrap().clear();
    assert_eq!(fleet.hand_off(&keys(10)).await, 0);
    assert_eq!(executor.calls.lock().unwrap().len(), 3);
}
