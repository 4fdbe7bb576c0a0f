//! Tenant isolation on every route and method, walked from the router's own tables: the
//! REST paths of `/openapi.json` (built from the router, see `rest::routes`) and the gRPC
//! methods of the served descriptor. A route or method with no case here fails the test, so
//! nothing new ships without the check.
//!
//! Each is called with no token, a malformed one, another app's token, a read-only token
//! of the app and the right token: 401, 401, 403 or 404 (never revealing another app's
//! timer), 403 for writes (reads pass), and success.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;

use crate::support::{TestGateway, client_with};
use chime_domain::{Claim, OccurrenceStatus, Outcome, TaskKey, Timestamp};
use chime_proto::v1 as pb;
use chime_storage::OccurrenceStore;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

const APP: &str = "alpha";
const OTHER: &str = "beta";

/// The credentials every route is tried with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Nobody,
    Malformed,
    OtherApp,
    ReadOnly,
    Right,
}

const EVERYONE: [Who; 5] = [
    Who::Nobody,
    Who::Malformed,
    Who::OtherApp,
    Who::ReadOnly,
    Who::Right,
];

/// What a route acts on, which decides what a foreign token gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// One timer (or run) by id: another app's is 404.
    ById,
    /// A collection of the app named in the request: another app's is 403.
    InApp,
    /// The app's tokens and secret: admin scope, another app's is 403.
    Admin,
    /// No app's data (a schedule preview): any valid token may read it.
    AnyApp,
}

/// Tokens of the two apps.
struct Tokens {
    other: String,
    read_only: String,
    read_write: String,
    admin: String,
}

impl Tokens {
    async fn mint(gw: &TestGateway) -> Self {
        let mint = |app: &'static str, scopes: Value| async move {
            let (status, _, body) = gw
                .send(
                    reqwest::Method::POST,
                    &format!("/v1/apps/{app}/tokens"),
                    Some(json!({"name": "tenancy", "scopes": scopes})),
                )
                .await;
            assert_eq!(status, 201, "{body}");
            body["token"].as_str().unwrap().to_owned()
        };
        Self {
            other: mint(OTHER, json!(["read", "write", "admin"])).await,
            read_only: mint(APP, json!(["read"])).await,
            read_write: mint(APP, json!(["read", "write"])).await,
            admin: mint(APP, json!(["admin"])).await,
        }
    }

    /// The token `who` sends; `right` is the token the route needs.
    fn of<'a>(&'a self, who: Who, right: &'a str) -> Option<&'a str> {
        match who {
            Who::Nobody => None,
            Who::Malformed => Some("chime_0123456789abcdef_not-a-real-secret"),
            Who::OtherApp => Some(&self.other),
            Who::ReadOnly => Some(&self.read_only),
            Who::Right => Some(right),
        }
    }
}

/// A fresh timer of [`APP`] with one dead run, so every route has something to act on.
struct Fixture {
    id: i64,
    dead: TaskKey,
}

async fn fixture(gw: &TestGateway, n: usize) -> Fixture {
    let (status, _, cal) = gw
        .send(
            reqwest::Method::PUT,
            &format!("/v1/apps/{APP}/calendars/fixture"),
            Some(json!({"dates": ["2026-12-25"]})),
        )
        .await;
    assert!(status == 200 || status == 201, "{cal}");
    let (status, _, settings) = gw
        .send(
            reqwest::Method::PUT,
            &format!("/v1/apps/{APP}/notifications"),
            Some(json!({"url": "https://ops.example/chime"})),
        )
        .await;
    assert!(status == 200 || status == 201, "{settings}");
    let created = gw.create(APP, &format!("tenancy-{n}")).await;
    let id = created["id"].as_i64().unwrap();
    let (_, _, runs) = gw
        .send(
            reqwest::Method::GET,
            &format!("/v1/timers/{id}/runs?upcoming=true"),
            None,
        )
        .await;
    let dead: TaskKey = runs["runs"][0]["task_key"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let store = gw.db.store();
    let now = Timestamp::from_millis(dead.run_at.as_millis() + 1);
    let claimed = store
        .claim(
            &[dead],
            Claim {
                now,
                lease_until: now.add_millis(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    store
        .record_outcomes(&[Outcome::ended(
            dead,
            claimed[0].attempt,
            OccurrenceStatus::Dead,
            Some(now),
            Some("tenancy fixture".into()),
        )])
        .await
        .unwrap();
    Fixture { id, dead }
}

/// How each REST route is called: its target and body. Keyed by `METHOD path` exactly as
/// the OpenAPI document lists it.
fn rest_case(route: &str, n: usize, fx: &Fixture) -> Option<(Target, String, Option<Value>)> {
    let id = fx.id;
    let timer = || support::timer_json(APP, &format!("created-{n}"));
    let case = match route {
        "POST /v1/timers" => (Target::InApp, "/v1/timers".to_owned(), Some(timer())),
        "GET /v1/timers" => (Target::InApp, format!("/v1/timers?app={APP}"), None),
        "POST /v1/timers:batchCreate" => (
            Target::InApp,
            "/v1/timers:batchCreate".to_owned(),
            Some(json!({"requests": [{"timer": timer()}]})),
        ),
        "GET /v1/timers/{id}" | "DELETE /v1/timers/{id}" => {
            (Target::ById, format!("/v1/timers/{id}"), None)
        }
        "PATCH /v1/timers/{id}" => (
            Target::ById,
            format!("/v1/timers/{id}"),
            Some(json!({"name": format!("renamed-{n}")})),
        ),
        "POST /v1/timers/{id}/enable" => (Target::ById, format!("/v1/timers/{id}/enable"), None),
        "POST /v1/timers/{id}/disable" => (Target::ById, format!("/v1/timers/{id}/disable"), None),
        "POST /v1/timers/{id}/trigger" => (Target::ById, format!("/v1/timers/{id}/trigger"), None),
        "PUT /v1/apps/{app}/calendars/{name}" => (
            Target::InApp,
            format!("/v1/apps/{APP}/calendars/cal-{n}"),
            Some(json!({"dates": ["2026-12-24/2026-12-26"]})),
        ),
        "GET /v1/apps/{app}/calendars/{name}" => (
            Target::InApp,
            format!("/v1/apps/{APP}/calendars/fixture"),
            None,
        ),
        "GET /v1/apps/{app}/calendars" => {
            (Target::InApp, format!("/v1/apps/{APP}/calendars"), None)
        }
        "POST /v1/timers/{id}/backfill" => (
            Target::ById,
            format!("/v1/timers/{id}/backfill"),
            Some(json!({"from": "2020-01-01T00:00:00Z", "to": "2020-01-01T00:10:00Z"})),
        ),
        "PUT /v1/apps/{app}/timers/{name}" => (
            Target::InApp,
            format!("/v1/apps/{APP}/timers/declared-{n}"),
            Some(support::timer_json(APP, &format!("declared-{n}"))),
        ),
        "GET /v1/timers/{id}/next" => (Target::ById, format!("/v1/timers/{id}/next"), None),
        "POST /v1/schedules/preview" => (
            Target::AnyApp,
            "/v1/schedules/preview".to_owned(),
            Some(json!({"schedule": {"every": "1m"}})),
        ),
        "GET /v1/timers/{id}/runs" => (Target::ById, format!("/v1/timers/{id}/runs"), None),
        "GET /v1/runs/{task_key}" => (Target::ById, format!("/v1/runs/{}", fx.dead), None),
        "POST /v1/timers/{id}/redrive" => (Target::ById, format!("/v1/timers/{id}/redrive"), None),
        "GET /v1/dead-letters" => (Target::InApp, format!("/v1/dead-letters?app={APP}"), None),
        "GET /v1/activity" => (Target::InApp, format!("/v1/activity?app={APP}"), None),
        "POST /v1/dead-letters/{task_key}/redrive" => (
            Target::ById,
            format!("/v1/dead-letters/{}/redrive", fx.dead),
            None,
        ),
        "POST /v1/apps/{app}/tokens" => (
            Target::Admin,
            format!("/v1/apps/{APP}/tokens"),
            Some(json!({"name": "minted"})),
        ),
        "GET /v1/apps/{app}/tokens" => (Target::Admin, format!("/v1/apps/{APP}/tokens"), None),
        "DELETE /v1/apps/{app}/tokens/{id}" => {
            // Revokes the fixture's own admin-minted token; the walk mints one per call.
            return Some((Target::Admin, "{revoke}".into(), None));
        }
        "GET /v1/apps/{app}/signing-secret" => (
            Target::Admin,
            format!("/v1/apps/{APP}/signing-secret"),
            None,
        ),
        "PUT /v1/apps/{app}/notifications" => (
            Target::Admin,
            format!("/v1/apps/{APP}/notifications"),
            Some(json!({"url": "https://ops.example/chime", "on": ["dead"]})),
        ),
        "GET /v1/apps/{app}/notifications" => {
            (Target::Admin, format!("/v1/apps/{APP}/notifications"), None)
        }
        "POST /v1/apps/{app}/signing-secret/rotate" => (
            Target::Admin,
            format!("/v1/apps/{APP}/signing-secret/rotate"),
            None,
        ),
        _ => return None,
    };
    Some(case)
}

fn expected(who: Who, target: Target, write: bool) -> &'static [u16] {
    match (who, target) {
        (Who::Nobody | Who::Malformed, _) => &[401],
        (_, Target::AnyApp) => &[200],
        (Who::OtherApp, Target::ById) => &[404],
        (Who::OtherApp, _) => &[403],
        // A read-only token lacks write and admin.
        (Who::ReadOnly, Target::Admin) => &[403],
        (Who::ReadOnly, _) if write => &[403],
        (Who::ReadOnly | Who::Right, _) => &[200, 201, 202, 204],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rest_route_is_scoped_to_its_app() {
    let gw = support::start().await;
    let tokens = Tokens::mint(&gw).await;
    // Open: the document, probes and metrics need no token.
    for open in ["/openapi.json", "/healthz", "/readyz", "/metrics", "/docs/"] {
        let status = gw
            .anonymous
            .get(gw.url(open))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "{open}: {status}");
    }
    let doc: Value = gw
        .anonymous
        .get(gw.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                routes.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(routes.len() >= 18, "{routes:?}");

    let mut n = 0;
    for route in &routes {
        let (method, _) = route.split_once(' ').unwrap();
        let method: reqwest::Method = method.parse().unwrap();
        let write = method != reqwest::Method::GET;
        for who in EVERYONE {
            n += 1;
            let fx = fixture(&gw, n).await;
            let Some((target, mut path, body)) = rest_case(route, n, &fx) else {
                panic!("{route} has no tenancy case: add one to rest_case");
            };
            if path == "{revoke}" {
                let (_, _, minted) = gw
                    .send(
                        reqwest::Method::POST,
                        &format!("/v1/apps/{APP}/tokens"),
                        None,
                    )
                    .await;
                path = format!("/v1/apps/{APP}/tokens/{}", minted["id"].as_str().unwrap());
            }
            let right = if target == Target::Admin {
                &tokens.admin
            } else {
                &tokens.read_write
            };
            let client = client_with(tokens.of(who, right));
            let mut req = client.request(method.clone(), gw.url(&path));
            if let Some(body) = body {
                req = req.json(&body);
            }
            let answer = support::read(req.send().await.unwrap()).await;
            let want = expected(who, target, write);
            assert!(
                want.contains(&answer.0),
                "{route} as {who:?}: got {} {}, want {want:?}",
                answer.0,
                answer.2
            );
            if answer.0 >= 400 {
                assert_eq!(answer.1, "application/problem+json", "{route} as {who:?}");
            }
        }
    }

    // A listing without an app is narrowed to the caller's own.
    let own = client_with(Some(&tokens.other));
    let listed: Value = own
        .get(gw.url("/v1/timers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["timers"].as_array().unwrap().len(), 0, "{listed}");
}

#[tokio::test]
async fn refusals_say_how_to_authenticate_and_are_counted() {
    let gw = support::start().await;
    let before = failures(&gw).await;
    let answer = gw.anonymous.get(gw.url("/v1/timers")).send().await.unwrap();
    assert_eq!(answer.status(), 401);
    let challenge = answer.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    let answer = client_with(Some("chime_0123456789abcdef_x"))
        .get(gw.url("/v1/timers"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let after = failures(&gw).await;
    assert!(after >= before + 2.0, "{before} -> {after}");
}

/// `chime_gateway_auth_failures_total`, summed over reasons.
async fn failures(gw: &TestGateway) -> f64 {
    let text = gw
        .anonymous
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("chime_gateway_auth_failures_total"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn an_app_token_cannot_mint_for_another_app_and_revocation_takes_effect() {
    let gw = support::start().await;
    let tokens = Tokens::mint(&gw).await;
    let admin = client_with(Some(&tokens.admin));
    let foreign = admin
        .post(gw.url(&format!("/v1/apps/{OTHER}/tokens")))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    // Listing shows no secrets.
    let listed: Value = admin
        .get(gw.url(&format!("/v1/apps/{APP}/tokens")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = listed.to_string();
    assert!(
        !text.contains(&tokens.read_write) && !text.contains("hash"),
        "{text}"
    );
    // Another replica has just accepted the token, so it is in that replica's cache.
    let (replica, _stop) = gw.replica().await;
    let on_replica = || async {
        client_with(Some(&tokens.read_write))
            .get(format!("{replica}/v1/timers"))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(on_replica().await, 200);
    let rw_id = tokens.read_write.split('_').nth(1).unwrap();
    let revoked_at = std::time::Instant::now();
    let revoked = admin
        .delete(gw.url(&format!("/v1/apps/{APP}/tokens/{rw_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    let refused = client_with(Some(&tokens.read_write))
        .get(gw.url("/v1/timers"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    // Every replica refuses it within the cache TTL (1 s).
    while on_replica().await != 401 {
        assert!(
            revoked_at.elapsed() < std::time::Duration::from_secs(2),
            "the replica still accepts a revoked token"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Bad input to the token API is a problem, not a 500.
    for bad in [
        json!({"scopes": ["root"]}),
        json!({"expires_in": "forever"}),
        json!({"name": ""}),
        json!({"scopes": []}),
        json!({"unknown": 1}),
    ] {
        let answer = admin
            .post(gw.url(&format!("/v1/apps/{APP}/tokens")))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{bad}");
    }
}

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
