//! The activity overview (`GET /v1/activity`, gRPC `GetActivity`): the executors' per-minute
//! tallies summed over writers into a dense series, scoped to an app, with quantiles.

#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::assert_problem;
use chime_domain::{AppName, Clock, Counts, OccurrenceStatus, SystemClock, Tally, minute_of};
use chime_proto::v1 as pb;
use chime_storage::Activity;
use reqwest::Method;

fn tally(app: &str, minutes_ago: i64, succeeded: u64, dead: u64) -> Tally {
    let mut counts = Counts::default();
    for _ in 0..succeeded {
        counts.add(OccurrenceStatus::Succeeded, Some(3));
    }
    for _ in 0..dead {
        counts.add(OccurrenceStatus::Dead, Some(40));
    }
    let now = minute_of(SystemClock.now());
    Tally {
        app: AppName::parse(app).unwrap(),
        minute: chime_domain::Timestamp::from_millis(now.as_millis() - minutes_ago * 60_000),
        counts,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_is_a_dense_per_minute_series_of_the_executors_tallies() {
    let gw = support::start().await;
    let store = gw.db.store();
    store
        .write_activity("exec-1", &[tally("act", 0, 10, 0), tally("act", 2, 4, 1)])
        .await
        .unwrap();
    store
        .write_activity("exec-2", &[tally("act", 0, 5, 0), tally("other", 0, 7, 0)])
        .await
        .unwrap();
    // Older than the span asked for: not shown.
    store
        .write_activity("exec-1", &[tally("act", 30, 99, 0)])
        .await
        .unwrap();

    let (status, _, body) = gw
        .send(Method::GET, "/v1/activity?app=act&minutes=5", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let minutes = body["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 5, "one entry per minute: {body}");
    assert_eq!(body["app"], "act");
    let fired: Vec<u64> = minutes
        .iter()
        .map(|m| m["fired"].as_u64().unwrap())
        .collect();
    assert_eq!(fired, vec![0, 0, 5, 0, 15], "both writers summed: {body}");
    assert_eq!(minutes[2]["dead"], 1);
    assert_eq!(minutes[2]["failed"], 1);
    assert_eq!(minutes[2]["lateness_p99_ms"], 50);
    assert_eq!(minutes[4]["lateness_p50_ms"], 5);
    assert!(minutes[0]["lateness_p50_ms"].is_null(), "{body}");
    assert_eq!(body["total"]["fired"], 20);
    assert_eq!(body["total"]["succeeded"], 19);

    // Every app, for the admin: the other app's tallies join.
    let (_, _, all) = gw.send(Method::GET, "/v1/activity?minutes=5", None).await;
    assert_eq!(all["total"]["fired"], 27, "{all}");
    assert!(all.get("app").is_none(), "{all}");
    let (_, _, hour) = gw.send(Method::GET, "/v1/activity", None).await;
    assert_eq!(hour["minutes"].as_array().unwrap().len(), 60);
    assert_eq!(
        hour["total"]["fired"], 126,
        "30 minutes ago is inside the hour"
    );

    for bad in [
        "minutes=0",
        "minutes=1441",
        "minutes=x",
        "app=Not%20an%20app",
    ] {
        let resp = gw
            .send(Method::GET, &format!("/v1/activity?{bad}"), None)
            .await;
        assert_eq!(resp.0, 400, "{bad}: {}", resp.2);
        assert_eq!(resp.1, "application/problem+json", "{bad}");
    }
    let resp = gw.send(Method::GET, "/v1/activity?minutes=0", None).await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", Some("minutes"));

    let mut grpc = support::grpc_client(&gw, Some(support::BOOTSTRAP)).await;
    let got = grpc
        .get_activity(pb::GetActivityRequest {
            app: "act".into(),
            minutes: 5,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.minutes.len(), 5);
    let total = got.total.unwrap();
    assert_eq!((total.fired, total.dead), (20, 1));
    assert_eq!(
        got.minutes[4].counts.as_ref().unwrap().lateness_p50_ms,
        Some(5)
    );
}
