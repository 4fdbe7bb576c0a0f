//! Failure-notification settings (issue 42 item 5) over REST and gRPC: put, read back with
//! what was sent, and bad input refused as a problem naming its field (a URL the network
//! policy refuses: callbacks.rs). Delivery is tested
//! end to end (tests/notifications.rs at the root), with real executors and a receiver.

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::assert_problem;
use chime_proto::v1 as pb;
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_put_read_back_and_checked() {
    let gw = support::start().await;
    let path = "/v1/apps/ops/notifications";
    assert_problem(
        &gw.send(Method::GET, path, None).await,
        404,
        "NOT_FOUND",
        None,
    );

    let put = gw
        .send(
            Method::PUT,
            path,
            Some(json!({"url": "https://ops.example/chime", "failing_after": 2})),
        )
        .await;
    assert_eq!(put.0, 201, "{}", put.2);
    assert_eq!(put.2["on"], json!(["dead", "failing", "recovered"]));
    assert_eq!(put.2["failing_after"], 2);
    assert_eq!(put.2["recent"], json!([]));
    let again = gw
        .send(
            Method::PUT,
            path,
            Some(json!({"url": "https://ops.example/other", "on": ["recovered", "dead"]})),
        )
        .await;
    assert_eq!(again.0, 200, "{}", again.2);
    let read = gw.send(Method::GET, path, None).await;
    assert_eq!(read.0, 200);
    assert_eq!(read.2["url"], "https://ops.example/other");
    assert_eq!(read.2["on"], json!(["dead", "recovered"]));
    assert_eq!(read.2["failing_after"], 3, "the default");

    for (body, field) in [
        (json!({"url": "ftp://ops.example/"}), "url"),
        (json!({"url": "https://ops.example/", "on": ["late"]}), "on"),
        (
            json!({"url": "https://ops.example/", "failing_after": 0}),
            "failing_after",
        ),
    ] {
        let answer = gw.send(Method::PUT, path, Some(body.clone())).await;
        assert_problem(&answer, 400, "INVALID_ARGUMENT", Some(field));
    }
    let unknown = gw
        .send(
            Method::PUT,
            path,
            Some(json!({"url": "https://x.example/", "to": 1})),
        )
        .await;
    assert_eq!(unknown.0, 400, "{}", unknown.2);

    // gRPC: the same settings.
    let mut c = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let got = c
        .get_notifications(pb::GetNotificationsRequest { app: "ops".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.url, "https://ops.example/other");
    assert_eq!(got.on, vec!["dead", "recovered"]);
    let put = c
        .put_notifications(pb::PutNotificationsRequest {
            app: "ops".into(),
            url: "https://ops.example/grpc".into(),
            on: Some(pb::NotifyEvents {
                names: vec!["failing".into()],
            }),
            failing_after: Some(5),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!put.created);
    let s = put.settings.unwrap();
    assert_eq!((s.on, s.failing_after), (vec!["failing".to_owned()], 5));
    let bad = c
        .put_notifications(pb::PutNotificationsRequest {
            app: "ops".into(),
            url: "https://ops.example/".into(),
            on: None,
            failing_after: Some(1001),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
}
