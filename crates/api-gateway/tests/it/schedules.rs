//! Issue 19 over REST and gRPC: labels and search, run limits, pause notes, catch-up and
//! retry age limits, and run-time previews with daylight-saving marks.

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::assert_problem;
use chime_proto::v1 as pb;
use reqwest::Method;
use serde_json::{Value, json};

fn every_minute(app: &str, name: &str, extra: Value) -> Value {
    let mut t = support::timer_json(app, name);
    t["schedule"] = json!({"every": "1m"});
    for (k, v) in extra.as_object().unwrap() {
        t[k] = v.clone();
    }
    t
}

async fn create(gw: &support::TestGateway, body: Value) -> Value {
    let (status, _, created) = gw.send(Method::POST, "/v1/timers", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    created
}

fn ids(list: &Value) -> Vec<i64> {
    list["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_fields_are_stored_shown_and_changed() {
    let gw = support::start().await;
    let t = create(
        &gw,
        every_minute(
            "sch",
            "limited",
            json!({
                "labels": {"team": "billing", "tier": "gold.1"},
                "max_runs": 3,
                "on_complete": "delete",
                "catch_up_window": "10m",
                "retry": {"max_attempts": 5, "max_age": "1h"},
                "overlap": "skip",
            }),
        ),
    )
    .await;
    assert_eq!(t["labels"], json!({"team": "billing", "tier": "gold.1"}));
    assert_eq!(t["max_runs"], 3);
    assert_eq!(t["remaining_runs"], 3);
    assert_eq!(t["on_complete"], "delete");
    assert_eq!(t["catch_up_window"], "10m");
    assert_eq!(t["retry"]["max_age"], "1h");
    assert_eq!(t["overlap"], "skip");
    assert_eq!(t["state"], "enabled");
    assert_eq!(t["next_runs"].as_array().unwrap().len(), 3, "{t}");

    // A patch that leaves the limit alone keeps it; 0 removes it.
    let id = t["id"].as_i64().unwrap();
    let path = format!("/v1/timers/{id}");
    let (_, _, same) = gw
        .send(
            Method::PATCH,
            &path,
            Some(json!({"labels": {"team": "ops"}})),
        )
        .await;
    assert_eq!(same["max_runs"], 3, "{same}");
    assert_eq!(same["labels"], json!({"team": "ops"}));
    let (_, _, buffered) = gw
        .send(Method::PATCH, &path, Some(json!({"overlap": "buffer_one"})))
        .await;
    assert_eq!(buffered["overlap"], "buffer_one", "{buffered}");
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let seen = g
        .get_timer(pb::GetTimerRequest { id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        seen.spec.unwrap().overlap,
        pb::OverlapPolicy::BufferOne as i32
    );
    let (status, _, cancelling) = gw
        .send(
            Method::PATCH,
            &path,
            Some(json!({"overlap": "cancel_other"})),
        )
        .await;
    assert_eq!(status, 200, "{cancelling}");
    assert_eq!(cancelling["overlap"], "cancel_other");
    let (status, _, problem) = gw
        .send(Method::PATCH, &path, Some(json!({"overlap": "terminate"})))
        .await;
    assert_eq!(status, 400, "{problem}");
    let (_, _, open) = gw
        .send(
            Method::PATCH,
            &path,
            Some(json!({"max_runs": 0, "catch_up_window": ""})),
        )
        .await;
    assert!(open.get("max_runs").is_none(), "{open}");
    assert!(open.get("catch_up_window").is_none(), "{open}");
    assert_eq!(open["next_runs"].as_array().unwrap().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_problems_naming_their_field() {
    let gw = support::start().await;
    let cases = [
        (json!({"max_runs": 0}), "max_runs"),
        (json!({"max_runs": 10_001}), "max_runs"),
        (json!({"labels": {"bad key": "x"}}), "labels"),
        (json!({"labels": {"team": "has space"}}), "labels"),
        (json!({"catch_up_window": "0s"}), "catch_up_window"),
        (json!({"catch_up_window": "soon"}), "catch_up_window"),
        (json!({"retry": {"max_age": "400d"}}), "retry.max_age"),
        (json!({"window": "0s"}), "window"),
        (json!({"window": "2d"}), "window"),
    ];
    for (extra, field) in cases {
        let resp = gw
            .send(
                Method::POST,
                "/v1/timers",
                Some(every_minute("sch", "bad", extra.clone())),
            )
            .await;
        assert_problem(&resp, 400, "INVALID_ARGUMENT", Some(field));
    }
    let mut once = support::timer_json("sch", "once");
    once["schedule"] = json!({"after": "1m"});
    once["max_runs"] = json!(2);
    let resp = gw.send(Method::POST, "/v1/timers", Some(once)).await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("max_runs"));
    let resp = gw
        .send(Method::GET, "/v1/timers?state=sleeping", None)
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("state"));
    let resp = gw.send(Method::GET, "/v1/timers?label=team", None).await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("label"));
    let t = gw.create("sch", "pausable").await;
    let long = "x".repeat(501);
    let resp = gw
        .send(
            Method::POST,
            &format!("/v1/timers/{}/disable", t["id"]),
            Some(json!({"reason": long})),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("reason"));
    for bad in [
        json!({"count": 0}),
        json!({"count": 1001}),
        json!({"from": "yesterday"}),
    ] {
        let mut body = json!({"schedule": {"every": "1m"}});
        for (k, v) in bad.as_object().unwrap() {
            body[k] = v.clone();
        }
        let resp = gw
            .send(Method::POST, "/v1/schedules/preview", Some(body))
            .await;
        assert_eq!(resp.0, 400, "{}", resp.2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_notes_show_until_resumed_and_listings_filter() {
    let gw = support::start().await;
    let a = create(
        &gw,
        every_minute("find", "nightly-a", json!({"labels": {"team": "billing"}})),
    )
    .await;
    let b = create(
        &gw,
        every_minute("find", "nightly-b", json!({"labels": {"team": "payroll"}})),
    )
    .await;
    let c = create(
        &gw,
        every_minute("find", "hourly", json!({"labels": {"team": "billing"}})),
    )
    .await;
    let id = |t: &Value| t["id"].as_i64().unwrap();

    let (status, _, paused) = gw
        .send(
            Method::POST,
            &format!("/v1/timers/{}/disable", id(&c)),
            Some(json!({"reason": "billing freeze until Monday"})),
        )
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["state"], "paused");
    assert_eq!(paused["paused"]["reason"], "billing freeze until Monday");
    assert_eq!(paused["paused"]["by"], "bootstrap");
    assert!(paused["paused"]["at"].as_str().unwrap().ends_with('Z'));

    let list = |q: &str| {
        let gw = &gw;
        let q = q.to_owned();
        async move {
            let (status, _, body) = gw
                .send(Method::GET, &format!("/v1/timers?app=find&{q}"), None)
                .await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };
    let shown = list("state=paused").await;
    assert_eq!(ids(&shown), vec![id(&c)]);
    assert_eq!(
        shown["timers"][0]["paused"]["reason"],
        "billing freeze until Monday"
    );
    assert_eq!(ids(&list("state=enabled").await), vec![id(&a), id(&b)]);
    assert!(ids(&list("state=done").await).is_empty());
    assert_eq!(
        ids(&list("name_prefix=nightly-").await),
        vec![id(&a), id(&b)]
    );
    assert_eq!(
        ids(&list("label=team%3Dbilling").await),
        vec![id(&a), id(&c)]
    );
    assert_eq!(
        ids(&list("label=team%3Dbilling&state=enabled").await),
        vec![id(&a)]
    );

    // Disabling without a body still works; enabling clears the note.
    let (status, _, _) = gw
        .send(
            Method::POST,
            &format!("/v1/timers/{}/disable", id(&a)),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (_, _, resumed) = gw
        .send(Method::POST, &format!("/v1/timers/{}/enable", id(&c)), None)
        .await;
    assert_eq!(resumed["state"], "enabled");
    assert!(resumed.get("paused").is_none(), "{resumed}");

    // gRPC: the same note and filters.
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let t = g
        .disable_timer(pb::DisableTimerRequest {
            id: id(&b),
            reason: "payroll audit".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.state, pb::TimerState::Paused as i32);
    assert_eq!(t.paused.unwrap().reason, "payroll audit");
    let listed = g
        .list_timers(pb::ListTimersRequest {
            app: "find".into(),
            state: pb::TimerState::Paused as i32,
            label: "team=payroll".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.timers.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![id(&b)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_mark_daylight_saving_gaps_and_repeats() {
    let gw = support::start().await;
    let (status, _, body) = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(json!({
                "schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
                "from": "2026-03-27T12:00:00Z",
                "count": 3,
            })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let runs = body["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[1]["utc"], "2026-03-29T01:00:00.000Z");
    assert_eq!(runs[1]["local"], "2026-03-29T03:00:00.000+02:00");
    assert_eq!(runs[1]["dst"], "gap");
    assert!(runs[0].get("dst").is_none() && runs[2].get("dst").is_none());

    let (_, _, fall) = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(json!({
                "schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
                "from": "2026-10-24T12:00:00Z",
                "count": 1,
            })),
        )
        .await;
    assert_eq!(fall["runs"][0]["dst"], "repeated", "{fall}");

    // A dst policy moves the gap's run: shifted by the gap, or skipped.
    let (_, _, shifted) = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(json!({
                "schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin",
                             "dst": {"gap": "shift"}},
                "from": "2026-03-28T12:00:00Z",
                "count": 1,
            })),
        )
        .await;
    assert_eq!(
        shifted["runs"][0]["local"], "2026-03-29T03:30:00.000+02:00",
        "{shifted}"
    );
    let mut t = support::timer_json("prev", "skips-gaps");
    t["schedule"] = json!({"cron": "30 2 * * *", "time_zone": "Europe/Berlin",
                           "dst": {"gap": "skip", "repeat": "both"}});
    let created = create(&gw, t).await;
    assert_eq!(
        created["schedule"]["dst"],
        json!({"gap": "skip", "repeat": "both"})
    );
    let mut bad = support::timer_json("prev", "bad-dst");
    bad["schedule"] = json!({"every": "1m", "dst": {"gap": "skip"}});
    let resp = gw.send(Method::POST, "/v1/timers", Some(bad)).await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("schedule.dst"));

    // max_runs bounds the preview too.
    let (_, _, limited) = gw
        .send(
            Method::POST,
            "/v1/schedules/preview",
            Some(json!({"schedule": {"every": "1h"}, "max_runs": 2, "count": 10})),
        )
        .await;
    assert_eq!(limited["runs"].as_array().unwrap().len(), 2, "{limited}");

    // A timer's next runs, over REST and gRPC.
    let t = gw.create("prev", "nightly").await;
    let (status, _, next) = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{}/next?count=7", t["id"]),
            None,
        )
        .await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(next["runs"].as_array().unwrap().len(), 7);
    assert_eq!(next["runs"][0]["utc"], t["next_runs"][0]["utc"]);
    let mut g = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let runs = g
        .next_runs(pb::NextRunsRequest {
            id: t["id"].as_i64().unwrap(),
            count: 4,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(runs.runs.len(), 4);
    let preview = g
        .preview_schedule(pb::PreviewScheduleRequest {
            schedule: Some(pb::Schedule {
                kind: Some(pb::schedule::Kind::Cron(pb::CronSchedule {
                    expression: "30 2 * * *".into(),
                    time_zone: "America/New_York".into(),
                    ..Default::default()
                })),
                anchor: None,
            }),
            from: Some(prost_types::Timestamp {
                seconds: 1_772_841_600, // 2026-03-07T00:00:00Z
                nanos: 0,
            }),
            count: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let notes: Vec<i32> = preview.runs.iter().map(|r| r.dst).collect();
    assert_eq!(
        notes,
        vec![
            pb::DstNote::None as i32,
            pb::DstNote::Gap as i32,
            pb::DstNote::None as i32
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_a_timer_by_name_is_idempotent_and_reports_changes() {
    let gw = support::start().await;
    let path = "/v1/apps/decl/timers/heartbeat";
    let mut declared = every_minute("decl", "heartbeat", json!({"labels": {"team": "ops"}}));
    declared.as_object_mut().unwrap().remove("enabled");
    let (status, _, first) = gw.send(Method::PUT, path, Some(declared.clone())).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["result"], "created");
    let version = first["timer"]["version"].as_i64().unwrap();
    let anchor = first["timer"]["schedule"]["at"].clone();

    // The same declaration later: nothing changes, though `every` would anchor anew.
    let (status, _, again) = gw.send(Method::PUT, path, Some(declared.clone())).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["result"], "unchanged");
    assert_eq!(again["changes"], json!([]));
    assert_eq!(again["timer"]["version"], version);

    // A dry run reports the change and changes nothing.
    let mut changed = declared.clone();
    changed["callback"]["url"] = json!("http://billing.internal/v2/run");
    let (_, _, dry) = gw
        .send(
            Method::PUT,
            &format!("{path}?dry_run=true"),
            Some(changed.clone()),
        )
        .await;
    assert_eq!(dry["result"], "updated");
    assert_eq!(dry["changes"], json!(["callback"]));
    assert_eq!(dry["timer"]["version"], version);

    let (status, _, updated) = gw.send(Method::PUT, path, Some(changed.clone())).await;
    assert_eq!(status, 200);
    assert_eq!(updated["result"], "updated");
    assert_eq!(updated["timer"]["version"], version + 1);
    assert_eq!(
        updated["timer"]["callback"]["url"],
        "http://billing.internal/v2/run"
    );
    assert_eq!(
        updated["timer"]["schedule"]["at"], anchor,
        "the every keeps its phase"
    );

    // A paused timer stays paused unless the declaration says `enabled`.
    let id = first["timer"]["id"].as_i64().unwrap();
    gw.send(Method::POST, &format!("/v1/timers/{id}/disable"), None)
        .await;
    let (_, _, still) = gw.send(Method::PUT, path, Some(changed.clone())).await;
    assert_eq!(still["result"], "unchanged", "{still}");
    changed["enabled"] = json!(true);
    let (_, _, resumed) = gw.send(Method::PUT, path, Some(changed)).await;
    assert_eq!(resumed["changes"], json!(["enabled"]));
    assert_eq!(resumed["timer"]["state"], "enabled");

    let resp = gw
        .send(
            Method::PUT,
            "/v1/apps/other/timers/heartbeat",
            Some(declared.clone()),
        )
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("app"));
    let resp = gw
        .send(Method::PUT, "/v1/apps/decl/timers/other", Some(declared))
        .await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("name"));
}
