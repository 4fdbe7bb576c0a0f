//! Per-app quotas through the real REST and gRPC stacks: a create beyond the rate is 429 with
//! `Retry-After` (gRPC RESOURCE_EXHAUSTED with RetryInfo), beyond the timer count 429 naming
//! the quota; other apps are not affected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use chime_api_gateway::QuotaSettings;
use chime_proto::v1 as pb;
use tonic_types::StatusExt;

#[tokio::test]
async fn creates_beyond_the_rate_or_the_count_are_refused_with_429() {
    let gw = support::start_with_quotas(QuotaSettings {
        max_timers: 4,
        creates_per_second: 0.5,
        create_burst: 3.0,
    })
    .await;
    for i in 0..3 {
        gw.create("billing", &format!("t{i}")).await;
    }
    let refused = gw
        .client
        .post(gw.url("/v1/timers"))
        .json(&support::timer_json("billing", "t3"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "2");
    let body = support::read(refused).await;
    support::assert_problem(&body, 429, "RESOURCE_EXHAUSTED", None);
    assert_eq!(body.2["reason"], "RATE_LIMITED");

    // gRPC says the same, with the wait in RetryInfo.
    let mut c = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let status = c
        .create_timer(pb::CreateTimerRequest {
            timer: Some(support::grpc_spec("billing", "g")),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.get_details_retry_info().is_some(), "{status:?}");

    // Another app has its own allowance; its count is its own too.
    for i in 0..3 {
        gw.create("mail", &format!("m{i}")).await;
    }
    // Four timers at most: "mail" has three, a batch of two is refused whole.
    let batch = serde_json::json!({"requests": [
        {"timer": support::timer_json("mail", "m3")},
        {"timer": support::timer_json("mail", "m4")}]});
    let (status, _, body) = gw
        .send(reqwest::Method::POST, "/v1/timers:batchCreate", Some(batch))
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason"], "TIMER_QUOTA", "{body}");
}
