//! Every gRPC method of the served descriptor tried with each kind of credentials.

use super::*;

/// Calls one gRPC method of the timer service on `fx` as the test's client.
async fn call_grpc(
    c: &mut chime_proto::AuthedTimerClient,
    method: &str,
    fx: &Fixture,
    n: usize,
) -> Result<(), tonic::Status> {
    let spec = |name: String| pb::CreateTimerRequest {
        timer: Some(support::grpc_spec(APP, &name)),
        ..Default::default()
    };
    let id = fx.id;
    match method {
        "CreateTimer" => c.create_timer(spec(format!("g-{n}"))).await.map(drop),
        "BatchCreateTimers" => c
            .batch_create_timers(pb::BatchCreateTimersRequest {
                requests: vec![spec(format!("gb-{n}"))],
            })
            .await
            .map(drop),
        "GetTimer" => c.get_timer(pb::GetTimerRequest { id }).await.map(drop),
        "ListTimers" => c
            .list_timers(pb::ListTimersRequest {
                app: APP.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "UpdateTimer" => c
            .update_timer(pb::UpdateTimerRequest {
                id,
                name: Some(format!("gr-{n}")),
                ..Default::default()
            })
            .await
            .map(drop),
        "DeleteTimer" => c
            .delete_timer(pb::DeleteTimerRequest { id })
            .await
            .map(drop),
        "EnableTimer" => c
            .enable_timer(pb::EnableTimerRequest { id })
            .await
            .map(drop),
        "DisableTimer" => c
            .disable_timer(pb::DisableTimerRequest {
                id,
                ..Default::default()
            })
            .await
            .map(drop),
        "TriggerTimer" => c
            .trigger_timer(pb::TriggerTimerRequest { id })
            .await
            .map(drop),
        "ListRuns" => c
            .list_runs(pb::ListRunsRequest {
                timer_id: id,
                ..Default::default()
            })
            .await
            .map(drop),
        "ListDeadLetters" => c
            .list_dead_letters(pb::ListDeadLettersRequest {
                app: APP.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "GetActivity" => c
            .get_activity(pb::GetActivityRequest {
                app: APP.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "GetRun" => c
            .get_run(pb::GetRunRequest {
                task_key: fx.dead.to_string(),
            })
            .await
            .map(drop),
        "RedriveRun" => c
            .redrive_run(pb::RedriveRunRequest {
                task_key: fx.dead.to_string(),
            })
            .await
            .map(drop),
        "RedriveTimer" => c
            .redrive_timer(pb::RedriveTimerRequest { timer_id: id })
            .await
            .map(drop),
        "ApplyTimer" => c
            .apply_timer(pb::ApplyTimerRequest {
                timer: Some(support::grpc_spec(APP, &format!("ga-{n}"))),
                ..Default::default()
            })
            .await
            .map(drop),
        "NextRuns" => c
            .next_runs(pb::NextRunsRequest { id, count: 3 })
            .await
            .map(drop),
        "PutCalendar" => c
            .put_calendar(pb::PutCalendarRequest {
                app: APP.into(),
                name: format!("gcal-{n}"),
                dates: vec!["2026-12-25".into()],
            })
            .await
            .map(drop),
        "GetCalendar" => c
            .get_calendar(pb::GetCalendarRequest {
                app: APP.into(),
                name: "fixture".into(),
            })
            .await
            .map(drop),
        "ListCalendars" => c
            .list_calendars(pb::ListCalendarsRequest { app: APP.into() })
            .await
            .map(drop),
        "BackfillTimer" => c
            .backfill_timer(pb::BackfillTimerRequest {
                id,
                from: Some(prost_types::Timestamp {
                    seconds: 1_577_836_800,
                    nanos: 0,
                }),
                to: Some(prost_types::Timestamp {
                    seconds: 1_577_837_400,
                    nanos: 0,
                }),
                ..Default::default()
            })
            .await
            .map(drop),
        "PutNotifications" => c
            .put_notifications(pb::PutNotificationsRequest {
                app: APP.into(),
                url: "https://ops.example/chime".into(),
                on: None,
                failing_after: Some(2),
            })
            .await
            .map(drop),
        "GetNotifications" => c
            .get_notifications(pb::GetNotificationsRequest { app: APP.into() })
            .await
            .map(drop),
        "PreviewSchedule" => c
            .preview_schedule(pb::PreviewScheduleRequest {
                schedule: Some(pb::Schedule {
                    kind: Some(pb::schedule::Kind::Every("1m".into())),
                    anchor: None,
                }),
                ..Default::default()
            })
            .await
            .map(drop),
        other => panic!("TimerService/{other} has no tenancy case: add one to call_grpc"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grpc_method_is_scoped_to_its_app() {
    let gw = support::start().await;
    let tokens = Tokens::mint(&gw).await;
    let set = chime_proto::descriptors_of(&["chime/v1/timer.proto"]).unwrap();
    let methods: Vec<String> = set
        .file
        .iter()
        .flat_map(|f| &f.service)
        .filter(|s| s.name() == "TimerService")
        .flat_map(|s| &s.method)
        .map(|m| m.name().to_owned())
        .collect();
    assert!(methods.len() >= 13, "{methods:?}");
    let channel = Channel::from_shared(gw.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut n = 10_000;
    for method in &methods {
        let write = !(method.starts_with("Get")
            || method.starts_with("List")
            || matches!(method.as_str(), "NextRuns" | "PreviewSchedule"));
        // A preview reads no app's data: any valid token may ask.
        let any_app = method == "PreviewSchedule";
        let by_id = !matches!(
            method.as_str(),
            "CreateTimer"
                | "BatchCreateTimers"
                | "ListTimers"
                | "ListDeadLetters"
                | "GetActivity"
                | "ApplyTimer"
                | "PreviewSchedule"
                | "PutCalendar"
                | "GetCalendar"
                | "ListCalendars"
                | "PutNotifications"
                | "GetNotifications"
        );
        // The app's notification settings: admin scope.
        let admin = method.ends_with("Notifications");
        for who in EVERYONE {
            n += 1;
            let fx = fixture(&gw, n).await;
            let right = if admin {
                &tokens.admin
            } else {
                &tokens.read_write
            };
            let mut c = support::grpc_client_on(channel.clone(), tokens.of(who, right));
            let got = call_grpc(&mut c, method, &fx, n).await;
            let want = match (who, by_id) {
                (Who::Nobody | Who::Malformed, _) => Some(Code::Unauthenticated),
                _ if any_app => None,
                (Who::OtherApp, true) => Some(Code::NotFound),
                (Who::OtherApp, false) => Some(Code::PermissionDenied),
                (Who::ReadOnly, _) if write || admin => Some(Code::PermissionDenied),
                _ => None,
            };
            assert_eq!(
                got.as_ref().err().map(tonic::Status::code),
                want,
                "{method} as {who:?}: {got:?}"
            );
        }
    }
    // Health and reflection stay open.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
}
