//! Exclusion calendars (issue 19 item 9) over REST and gRPC: put and read by name, timers
//! that name them skip their dates in next runs and previews, a calendar change rewrites
//! those timers, and bad input is a problem naming its field.

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::assert_problem;
use chime_proto::v1 as pb;
use reqwest::Method;
use serde_json::{Value, json};

fn noon_from_dec_20(extra: Value) -> Value {
    let mut t = support::timer_json("cal", "noon");
    t["schedule"] = json!({"cron": "0 0 12 * * *"});
    t["start_at"] = json!("2030-12-20T00:00:00Z");
    for (k, v) in extra.as_object().unwrap() {
        t[k] = v.clone();
    }
    t
}

/// The days of December 2030 the runs fall on.
fn days(runs: &Value) -> Vec<u32> {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let at = r["utc"].as_str().unwrap();
            assert!(
                at.starts_with("2030-12-") && at.ends_with("T12:00:00.000Z"),
                "{at}"
            );
            at[8..10].parse().unwrap()
        })
        .collect()
}

async fn next5(gw: &support::TestGateway, id: i64) -> Value {
    let path = format!("/v1/timers/{id}/next?count=5");
    gw.send(Method::GET, &path, None).await.2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_skip_the_dates_of_the_calendars_they_name() {
    let gw = support::start().await;
    let (status, _, put) = gw
        .send(
            Method::PUT,
            "/v1/apps/cal/calendars/holidays",
            Some(json!({"dates": ["2030-12-24/2030-12-26"]})),
        )
        .await;
    assert_eq!(status, 201, "{put}");
    assert_eq!(put["dates"], json!(["2030-12-24/2030-12-26"]));
    assert_eq!(put["timers_updated"], 0);

    let (status, _, t) = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(noon_from_dec_20(json!({"exclude_calendars": ["holidays"]}))),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    assert_eq!(t["exclude_calendars"], json!(["holidays"]));
    let id = t["id"].as_i64().unwrap();
    assert_eq!(days(&next5(&gw, id).await["runs"]), [20, 21, 22, 23, 27]);
    // The preview takes the app's calendars too, and says the same.
    let (status, _, preview) = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(
                json!({"schedule": {"cron": "0 0 12 * * *"}, "from": "2030-12-20T00:00:00Z",
                        "count": 5, "app": "cal", "exclude_calendars": ["holidays"]}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(days(&preview["runs"]), [20, 21, 22, 23, 27]);

    // max_runs counts the runs that fire.
    let (_, _, limited) = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(noon_from_dec_20(
                json!({"name": "six", "max_runs": 6, "exclude_calendars": ["holidays"]}),
            )),
        )
        .await;
    let lid = limited["id"].as_i64().unwrap();
    let (_, _, six) = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{lid}/next?count=10"),
            None,
        )
        .await;
    assert_eq!(days(&six["runs"]), [20, 21, 22, 23, 27, 28]);

    // Changing the calendar rewrites the timers naming it.
    let (status, _, replaced) = gw
        .send(
            Method::PUT,
            "/v1/apps/cal/calendars/holidays",
            Some(json!({"dates": ["2030-12-21"]})),
        )
        .await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["timers_updated"], 2, "{replaced}");
    let (_, _, now) = gw
        .send(Method::GET, &format!("/v1/timers/{id}"), None)
        .await;
    assert_eq!(now["version"], 2, "{now}");
    assert_eq!(days(&next5(&gw, id).await["runs"]), [20, 22, 23, 24, 25]);
    // The same dates again: nothing to rewrite.
    let (_, _, same) = gw
        .send(
            Method::PUT,
            "/v1/apps/cal/calendars/holidays",
            Some(json!({"dates": ["2030-12-21"]})),
        )
        .await;
    assert_eq!(same["timers_updated"], 0, "{same}");

    // A patch replaces the list; [] removes them.
    let (status, _, open) = gw
        .send(
            Method::PATCH,
            &format!("/v1/timers/{id}"),
            Some(json!({"exclude_calendars": []})),
        )
        .await;
    assert_eq!(status, 200, "{open}");
    assert!(open.get("exclude_calendars").is_none(), "{open}");
    assert_eq!(days(&next5(&gw, id).await["runs"]), [20, 21, 22, 23, 24]);

    // Read back over REST and gRPC.
    let (status, _, got) = gw
        .send(Method::GET, "/v1/apps/cal/calendars/holidays", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(got["dates"], json!(["2030-12-21"]));
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let put = g
        .put_calendar(pb::PutCalendarRequest {
            app: "cal".into(),
            name: "audit".into(),
            dates: vec!["2031-03-31".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(put.created);
    let listed = g
        .list_calendars(pb::ListCalendarsRequest { app: "cal".into() })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = listed.calendars.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["audit", "holidays"]);
    let timer = g
        .get_timer(pb::GetTimerRequest { id: lid })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(timer.spec.unwrap().exclude_calendars, ["holidays"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calendars_are_problems_naming_their_field() {
    let gw = support::start().await;
    for (dates, why) in [
        (json!(["2030-02-30"]), "no such day"),
        (json!(["2030-12-31/2030-12-01"]), "ends before it starts"),
        (json!(["tomorrow"]), "not a date"),
        (json!(vec!["2030-01-01"; 367]), "too many"),
    ] {
        let resp = gw
            .send(
                Method::PUT,
                "/v1/apps/cal/calendars/bad",
                Some(json!({ "dates": dates })),
            )
            .await;
        assert_eq!(resp.0, 400, "{why}: {}", resp.2);
        assert_eq!(resp.2["field"], "dates", "{why}: {}", resp.2);
    }
    let resp = gw
        .send(
            Method::PUT,
            "/v1/apps/cal/calendars/has%20space",
            Some(json!({"dates": []})),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("name"));
    let resp = gw
        .send(Method::GET, "/v1/apps/cal/calendars/missing", None)
        .await;
    assert_eq!(resp.0, 404, "{}", resp.2);
    // A timer naming a calendar its app does not have.
    let resp = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(noon_from_dec_20(json!({"exclude_calendars": ["missing"]}))),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("exclude_calendars"));
    let nine: Vec<String> = (0..9).map(|i| format!("c{i}")).collect();
    let resp = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(noon_from_dec_20(json!({ "exclude_calendars": nine }))),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("exclude_calendars"));
    // A preview naming calendars must say whose.
    let resp = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(json!({"schedule": {"every": "1m"}, "exclude_calendars": ["holidays"]})),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("app"));
}
