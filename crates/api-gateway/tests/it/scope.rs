//! The app scope of a request's context, applied by the service: what authentication will
//! rely on. Calls the service directly with scoped contexts, over a private PostgreSQL schema.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use chime_api_gateway::api::{
    CreateRequest, ListDeadLetters, ListRuns, ListTimers, RedriveTarget, TimerInput, TimerPatch,
};
use chime_api_gateway::{AppScope, ErrorCode, RequestContext, RequestId, TimerApi, TimerService};
use chime_domain::{AppName, Horizon, SystemClock};
use chime_storage::testkit;

fn scoped(app: &str) -> RequestContext {
    RequestContext {
        scope: AppScope::Only(AppName::parse(app.to_owned()).unwrap()),
        ..RequestContext::anonymous(RequestId::generate())
    }
}

fn create(app: &str, name: &str) -> CreateRequest {
    let timer: TimerInput = serde_json::from_value(support::timer_json(app, name)).unwrap();
    CreateRequest {
        timer,
        idempotency_key: None,
    }
}

#[tokio::test]
async fn a_scoped_caller_sees_and_changes_only_its_own_app() {
    let db = testkit::pg().await;
    let api = TimerService::new(
        db.store(),
        db.store(),
        None,
        Horizon::DEFAULT,
        Arc::new(SystemClock),
    );
    let (billing, mail) = (scoped("billing"), scoped("mail"));

    // Creating in another app is refused outright, in a batch too.
    let e = api
        .create_timer(&billing, create("mail", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.reason),
        (ErrorCode::PermissionDenied, "APP_FORBIDDEN")
    );
    let e = api
        .batch_create_timers(&billing, vec![create("billing", "a"), create("mail", "b")])
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);

    let own = api
        .create_timer(&billing, create("billing", "nightly"))
        .await
        .unwrap();
    let other = api
        .create_timer(&mail, create("mail", "digest"))
        .await
        .unwrap();
    let (own_id, other_id) = (own.timer.id, other.timer.id);

    // Listing without an app lists the caller's; naming another app is refused.
    let listed = api
        .list_timers(&billing, ListTimers::default())
        .await
        .unwrap();
    let ids: Vec<_> = listed.items.iter().map(|v| v.timer.id).collect();
    assert_eq!(ids, vec![own_id]);
    let asked_other = ListTimers {
        app: Some("mail".into()),
        ..ListTimers::default()
    };
    let e = api.list_timers(&billing, asked_other).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    let dead_other = ListDeadLetters {
        app: Some("mail".into()),
        ..ListDeadLetters::default()
    };
    let e = api
        .list_dead_letters(&billing, dead_other)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);

    // Another app's timer by id: not found, whatever the operation; it stays untouched.
    let not_found = |e: chime_api_gateway::ApiError| assert_eq!(e.code, ErrorCode::NotFound, "{e}");
    not_found(api.get_timer(&billing, other_id).await.unwrap_err());
    let rename = TimerPatch {
        name: Some("taken-over".into()),
        ..TimerPatch::default()
    };
    not_found(
        api.update_timer(&billing, other_id, rename)
            .await
            .unwrap_err(),
    );
    not_found(
        api.set_timer_enabled(&billing, other_id, false)
            .await
            .unwrap_err(),
    );
    not_found(api.trigger_timer(&billing, other_id).await.unwrap_err());
    let runs = ListRuns {
        timer_id: other_id,
        status: None,
        upcoming: true,
        page_size: None,
        page_token: None,
    };
    not_found(api.list_runs(&billing, runs).await.unwrap_err());
    let dead_of_other = ListDeadLetters {
        timer_id: Some(other_id),
        ..ListDeadLetters::default()
    };
    not_found(
        api.list_dead_letters(&billing, dead_of_other)
            .await
            .unwrap_err(),
    );
    not_found(
        api.redrive(&billing, RedriveTarget::Timer(other_id))
            .await
            .unwrap_err(),
    );
    let key = format!("{other_id}:{}", other.next_runs[0].as_millis());
    not_found(
        api.redrive(&billing, RedriveTarget::Run(key))
            .await
            .unwrap_err(),
    );
    not_found(api.delete_timer(&billing, other_id).await.unwrap_err());
    let untouched = api.get_timer(&mail, other_id).await.unwrap();
    assert_eq!(untouched.timer, other.timer);

    // Its own timer: every operation works.
    api.trigger_timer(&billing, own_id).await.unwrap();
    api.set_timer_enabled(&billing, own_id, false)
        .await
        .unwrap();
    api.delete_timer(&billing, own_id).await.unwrap();
}
