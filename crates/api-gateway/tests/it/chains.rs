//! Chains (issue 42 item 2) over REST and gRPC: `then` written and read back, a name the
//! app lacks refused, a cycle refused as `CHAIN_CYCLE` whichever write would close it.
//! Starting the steps is tested end to end (tests/chains.rs at the root).

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::{assert_problem, timer_json};
use chime_proto::v1 as pb;
use reqwest::Method;
use serde_json::{Value, json};

fn chained(app: &str, name: &str, then: Value) -> Value {
    let mut body = timer_json(app, name);
    body["then"] = then;
    body
}

/// A 400 problem of reason `CHAIN_CYCLE` naming `then`.
fn assert_cycle(resp: &(u16, String, Value)) {
    assert_problem(resp, 400, "INVALID_ARGUMENT", Some("then"));
    assert_eq!(resp.2["reason"], "CHAIN_CYCLE", "{}", resp.2);
}

/// A timer's id as its path has it.
fn id(timer: &Value) -> String {
    match &timer["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_are_written_checked_and_read_back() {
    let gw = support::start().await;
    let app = "etl";
    let load = gw.create(app, "load").await;
    gw.create(app, "page-oncall").await;
    // Another app's timer is not a step of this one.
    gw.create("other", "audit").await;

    let (status, _, extract) = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(chained(
                app,
                "extract",
                json!({"on_success": ["load"], "on_failure": ["page-oncall"]}),
            )),
        )
        .await;
    assert_eq!(status, 201, "{extract}");
    assert_eq!(
        extract["then"],
        json!({"on_success": ["load"], "on_failure": ["page-oncall"]})
    );
    let plain = gw.create(app, "plain").await;
    assert!(plain.get("then").is_none(), "{plain}");

    for (then, field) in [
        (json!({"on_success": ["audit"]}), "then"),
        (json!({"on_success": ["nope"]}), "then"),
        (json!({"on_success": ["load", "load"]}), "then.on_success"),
        (json!({"on_failure": [""]}), "then.on_failure"),
        (json!({"on_done": ["load"]}), "then"),
    ] {
        let refused = gw
            .send(
                Method::POST,
                "/v1/timers",
                Some(chained(app, "bad", then.clone())),
            )
            .await;
        assert_eq!(refused.0, 400, "{then}: {}", refused.2);
        assert_eq!(refused.1, "application/problem+json");
        if field != "then" || then.get("on_done").is_none() {
            assert_eq!(refused.2["field"], field, "{then}: {}", refused.2);
        }
    }

    // load → extract would close extract → load → extract.
    let load_path = format!("/v1/timers/{}", id(&load));
    let cycle = gw
        .send(
            Method::PATCH,
            &load_path,
            Some(json!({"then": {"on_failure": ["extract"]}})),
        )
        .await;
    assert_cycle(&cycle);
    // A timer naming itself, through apply.
    let apply = gw
        .send(
            Method::PUT,
            "/v1/apps/etl/timers/loop",
            Some(chained(app, "loop", json!({"on_success": ["loop"]}))),
        )
        .await;
    assert_cycle(&apply);
    let applied = gw
        .send(
            Method::PUT,
            "/v1/apps/etl/timers/loop",
            Some(chained(app, "loop", json!({"on_success": ["load"]}))),
        )
        .await;
    assert_eq!(applied.0, 201, "{}", applied.2);
    // loop → load → plain, then plain → loop would close it, three timers deep.
    let step = gw
        .send(
            Method::PATCH,
            &load_path,
            Some(json!({"then": {"on_success": ["plain"]}})),
        )
        .await;
    assert_eq!(step.0, 200, "{}", step.2);
    let deeper = gw
        .send(
            Method::PATCH,
            &format!("/v1/timers/{}", id(&plain)),
            Some(json!({"then": {"on_success": ["loop"]}})),
        )
        .await;
    assert_cycle(&deeper);
    // `{}` removes a chain; an update that leaves it alone is not checked again.
    let removed = gw
        .send(Method::PATCH, &load_path, Some(json!({"then": {}})))
        .await;
    assert_eq!(removed.0, 200, "{}", removed.2);
    assert!(removed.2.get("then").is_none(), "{}", removed.2);

    // gRPC: the same field, both ways.
    let mut client = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let mut spec = support::grpc_spec(app, "grpc-chained");
    spec.then = Some(pb::Then {
        on_success: vec!["load".into()],
        on_failure: vec![],
    });
    let made = client
        .create_timer(pb::CreateTimerRequest {
            timer: Some(spec),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(made.spec.unwrap().then.unwrap().on_success, vec!["load"]);
    let mut looping = support::grpc_spec(app, "grpc-loop");
    looping.then = Some(pb::Then {
        on_success: vec!["grpc-loop".into()],
        on_failure: vec![],
    });
    let refused = client
        .create_timer(pb::CreateTimerRequest {
            timer: Some(looping),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("comes back to it"),
        "{refused:?}"
    );
}
