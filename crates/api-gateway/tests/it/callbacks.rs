//! The SSRF policy at create and update: a callback whose address is an IP the policy blocks
//! is refused with 400 naming the rule; host names pass (the executors judge what they resolve
//! to); widening the policy lets a range in.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use chime_api_gateway::api::{CreateRequest, TimerInput, TimerPatch};
use chime_api_gateway::{ErrorCode, RequestContext, RequestId, TimerApi, TimerService};
use chime_domain::{Horizon, NetworkPolicy, SystemClock};
use chime_storage::testkit;

fn calling(name: &str, url: &str) -> CreateRequest {
    let mut json = support::timer_json("billing", name);
    json["callback"]["url"] = url.into();
    let timer: TimerInput = serde_json::from_value(json).unwrap();
    CreateRequest {
        timer,
        idempotency_key: None,
    }
}

#[tokio::test]
async fn callbacks_to_blocked_addresses_are_refused_at_create_and_update() {
    let db = testkit::pg().await;
    let service = |networks: NetworkPolicy| {
        TimerService::new(
            db.store(),
            db.store(),
            None,
            Horizon::DEFAULT,
            Arc::new(SystemClock),
        )
        .with_networks(networks)
        .with_notifications(db.store())
    };
    let strict = service(NetworkPolicy::default());
    let ctx = RequestContext::anonymous(RequestId::generate());
    for (i, url) in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8080/",
        "http://2130706433/",
        "http://[::ffff:10.0.0.1]/",
        "http://192.168.1.10/hook",
    ]
    .iter()
    .enumerate()
    {
        let e = strict
            .create_timer(&ctx, calling(&format!("t{i}"), url))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{url}");
        assert_eq!(e.field.as_deref(), Some("callback.url"), "{url}");
        assert!(
            e.message.contains("callbacks may not reach"),
            "{url}: {}",
            e.message
        );
    }
    // Failure notifications go where callbacks may.
    let input = chime_api_gateway::notifications::NotificationsInput {
        url: "http://169.254.169.254/hook".into(),
        ..Default::default()
    };
    let e = strict
        .put_notifications(&ctx, "ops".into(), input)
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("url"), "{e:?}");
    assert!(
        e.message.contains("callbacks may not reach"),
        "{}",
        e.message
    );
    // A host name passes here; public addresses too.
    let ok = strict
        .create_timer(&ctx, calling("named", "http://billing.internal/run"))
        .await
        .unwrap();
    strict
        .create_timer(&ctx, calling("public", "http://93.184.216.34/"))
        .await
        .unwrap();
    // Changing a callback to a blocked address is refused like creating one.
    let patch: TimerPatch =
        serde_json::from_value(serde_json::json!({"callback": {"url": "http://10.0.0.5/"}}))
            .unwrap();
    let e = strict
        .update_timer(&ctx, ok.timer.id, patch.clone())
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("callback.url"));
    // Widened, the same range is accepted.
    let widened = service(NetworkPolicy::new(
        vec!["10.0.0.0/8".parse().unwrap()],
        Vec::new(),
    ));
    widened
        .update_timer(&ctx, ok.timer.id, patch)
        .await
        .unwrap();
}
