//! Every gRPC method and its errors (with google.rpc details), health and reflection, over
//! real PostgreSQL.

// Helpers outside #[test] functions panic on purpose: a bad fixture is a test bug.
#![allow(clippy::unwrap_used)]

use crate::support;

use chime_proto::v1 as pb;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// A client sending the bootstrap token.
async fn client(gw: &support::TestGateway) -> chime_proto::AuthedTimerClient {
    support::grpc_client(gw, Some(support::BOOTSTRAP)).await
}

fn spec(app: &str, name: &str) -> pb::TimerSpec {
    pb::TimerSpec {
        app: app.into(),
        name: name.into(),
        schedule: Some(pb::Schedule {
            kind: Some(pb::schedule::Kind::Cron(pb::CronSchedule {
                expression: "*/10 * * * * *".into(),
                time_zone: "Europe/Berlin".into(),
                ..Default::default()
            })),
            anchor: None,
        }),
        callback: Some(pb::Callback {
            url: "http://127.0.0.1:9/cb".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn create(app: &str, name: &str, request_id: &str) -> pb::CreateTimerRequest {
    pb::CreateTimerRequest {
        timer: Some(spec(app, name)),
        enabled: None,
        request_id: request_id.into(),
    }
}

#[tokio::test]
async fn every_method_round_trips() {
    let gw = support::start().await;
    let mut c = client(&gw).await;

    let t = c
        .create_timer(create("billing", "a", "req-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.version, 1);
    assert!(t.enabled);
    assert_eq!(t.next_runs.len(), 5);
    assert!(
        t.next_runs[0].local.ends_with("+01:00"),
        "{:?}",
        t.next_runs[0]
    );
    let again = c
        .create_timer(create("billing", "a", "req-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.id, t.id, "request_id makes create idempotent");

    let batch = c
        .batch_create_timers(pb::BatchCreateTimersRequest {
            requests: vec![create("billing", "b", ""), create("billing", "c", "")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch.timers.len(), 2);

    let got = c
        .get_timer(pb::GetTimerRequest { id: t.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.spec, t.spec);

    let page = c
        .list_timers(pb::ListTimersRequest {
            app: "billing".into(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.timers.len(), 2);
    assert!(!page.next_page_token.is_empty());
    let rest = c
        .list_timers(pb::ListTimersRequest {
            app: "billing".into(),
            page_size: 2,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.timers.len(), 1);
    assert!(rest.next_page_token.is_empty());

    let updated = c
        .update_timer(pb::UpdateTimerRequest {
            id: t.id,
            expected_version: Some(1),
            name: Some("a2".into()),
            schedule: Some(pb::Schedule {
                kind: Some(pb::schedule::Kind::Every("30s".into())),
                anchor: None,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.version, 2);
    let updated_spec = updated.spec.unwrap();
    assert_eq!(updated_spec.name, "a2");
    assert_eq!(
        updated_spec.schedule.unwrap().kind,
        Some(pb::schedule::Kind::Every("30s".into()))
    );

    let off = c
        .disable_timer(pb::DisableTimerRequest {
            id: t.id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!off.enabled);
    let on = c
        .enable_timer(pb::EnableTimerRequest { id: t.id })
        .await
        .unwrap()
        .into_inner();
    assert!(on.enabled);
    let trig = c
        .trigger_timer(pb::TriggerTimerRequest { id: t.id })
        .await
        .unwrap()
        .into_inner();
    assert!(trig.task_key.starts_with(&format!("{}:", t.id)));

    let runs = c
        .list_runs(pb::ListRunsRequest {
            timer_id: t.id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(runs.runs.len(), 1);
    assert_eq!(runs.runs[0].task_key, trig.task_key);
    assert_eq!(runs.runs[0].status, "pending");

    c.delete_timer(pb::DeleteTimerRequest { id: t.id })
        .await
        .unwrap();
    let gone = c
        .get_timer(pb::GetTimerRequest { id: t.id })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

#[tokio::test]
async fn errors_carry_canonical_codes_and_details() {
    let gw = support::start().await;
    let mut c = client(&gw).await;

    let mut bad = create("billing", "x", "");
    if let Some(s) = bad.timer.as_mut() {
        s.schedule = Some(pb::Schedule {
            kind: Some(pb::schedule::Kind::Cron(pb::CronSchedule {
                expression: "61 * * * *".into(),
                time_zone: String::new(),
                ..Default::default()
            })),
            anchor: None,
        });
    }
    let err = c.create_timer(bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let details = err.get_error_details();
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(violation.field, "schedule.cron");
    let info = details.error_info().unwrap();
    assert_eq!(info.reason, "INVALID_FIELD");
    assert_eq!(info.domain, "chime.v1");

    let mut zone = create("billing", "x", "");
    if let Some(pb::schedule::Kind::Cron(cron)) = zone
        .timer
        .as_mut()
        .and_then(|s| s.schedule.as_mut())
        .and_then(|s| s.kind.as_mut())
    {
        cron.time_zone = "Mars/Olympus".into();
    }
    let err = c.create_timer(zone).await.unwrap_err();
    assert_eq!(
        err.get_error_details()
            .bad_request()
            .unwrap()
            .field_violations[0]
            .field,
        "schedule.time_zone"
    );

    let no_spec = c
        .create_timer(pb::CreateTimerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(no_spec.code(), Code::InvalidArgument);
    let mut no_url = create("billing", "x", "");
    if let Some(s) = no_url.timer.as_mut() {
        s.callback = None;
    }
    let err = c.create_timer(no_url).await.unwrap_err();
    assert_eq!(
        err.get_error_details()
            .bad_request()
            .unwrap()
            .field_violations[0]
            .field,
        "callback.url"
    );

    let t = c
        .create_timer(create("billing", "taken", "rid"))
        .await
        .unwrap()
        .into_inner();
    let dup = c
        .create_timer(create("billing", "taken", ""))
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);
    assert_eq!(
        dup.get_error_details().error_info().unwrap().reason,
        "NAME_TAKEN"
    );
    let reused = c
        .create_timer(create("billing", "other", "rid"))
        .await
        .unwrap_err();
    assert_eq!(reused.code(), Code::AlreadyExists);
    assert_eq!(
        reused.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_REUSED"
    );

    let stale = c
        .update_timer(pb::UpdateTimerRequest {
            id: t.id,
            expected_version: Some(9),
            name: Some("y".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition);
    assert_eq!(
        stale.get_error_details().error_info().unwrap().reason,
        "VERSION_MISMATCH"
    );

    let missing = c
        .get_timer(pb::GetTimerRequest { id: 987_654 })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let zero = c
        .get_timer(pb::GetTimerRequest { id: 0 })
        .await
        .unwrap_err();
    assert_eq!(zero.code(), Code::InvalidArgument);
    let bad_status = c
        .list_runs(pb::ListRunsRequest {
            timer_id: t.id,
            status: "done".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_status.code(), Code::InvalidArgument);
    let bad_token = c
        .list_timers(pb::ListTimersRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        bad_token
            .get_error_details()
            .bad_request()
            .unwrap()
            .field_violations[0]
            .field,
        "page_token"
    );
    let over = c
        .batch_create_timers(pb::BatchCreateTimersRequest {
            requests: (0..101)
                .map(|i| create("billing", &format!("n{i}"), ""))
                .collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(over.code(), Code::InvalidArgument);
    c.disable_timer(pb::DisableTimerRequest {
        id: t.id,
        ..Default::default()
    })
    .await
    .unwrap();
    let disabled = c
        .trigger_timer(pb::TriggerTimerRequest { id: t.id })
        .await
        .unwrap_err();
    assert_eq!(disabled.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn health_and_reflection_v1_and_v1alpha() {
    use futures::StreamExt;
    let gw = support::start().await;
    let channel = Channel::from_shared(gw.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "chime.v1.TimerService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    {
        use tonic_reflection::pb::v1::{
            ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        };
        let mut r = ServerReflectionClient::new(channel.clone());
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = r
            .server_reflection_info(futures::stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let Some(Ok(resp)) = stream.next().await else {
            panic!("no reflection answer")
        };
        let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
            panic!("unexpected answer")
        };
        let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"chime.v1.TimerService"), "{names:?}");
        assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
        assert!(
            !names.contains(&"chime.v1.ExecutorService"),
            "not served here: {names:?}"
        );
    }
    {
        use tonic_reflection::pb::v1alpha::{
            ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        };
        let mut r = ServerReflectionClient::new(channel);
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = r
            .server_reflection_info(futures::stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let Some(Ok(resp)) = stream.next().await else {
            panic!("no reflection answer")
        };
        let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
            panic!("unexpected answer")
        };
        assert!(
            list.service
                .iter()
                .any(|s| s.name == "chime.v1.TimerService")
        );
    }
}

#[tokio::test]
async fn dead_letter_methods() {
    let gw = support::start().await;
    let mut c = client(&gw).await;
    let t = c
        .create_timer(create("billing", "dl", ""))
        .await
        .unwrap()
        .into_inner();
    let none = c
        .list_dead_letters(pb::ListDeadLettersRequest {
            app: "billing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.runs.is_empty() && none.next_page_token.is_empty());
    let redriven = c
        .redrive_timer(pb::RedriveTimerRequest { timer_id: t.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(redriven.redriven, 0);
    let bad = c
        .redrive_run(pb::RedriveRunRequest {
            task_key: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let missing = c
        .redrive_run(pb::RedriveRunRequest {
            task_key: format!("{}:1", t.id),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let unknown = c
        .redrive_timer(pb::RedriveTimerRequest { timer_id: 987_654 })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

#[tokio::test]
async fn answers_carry_the_request_id() {
    let gw = support::start().await;
    let mut c = client(&gw).await;
    let mut req = tonic::Request::new(pb::ListTimersRequest::default());
    req.metadata_mut()
        .insert("x-request-id", "grpc-trace-7".parse().unwrap());
    let answer = c.list_timers(req).await.unwrap();
    assert_eq!(
        answer.metadata().get("x-request-id").unwrap(),
        "grpc-trace-7"
    );
    // An error answer names a generated one.
    let status = c
        .get_timer(pb::GetTimerRequest { id: 999_999_999 })
        .await
        .unwrap_err();
    assert!(!status.metadata().get("x-request-id").unwrap().is_empty());
}
