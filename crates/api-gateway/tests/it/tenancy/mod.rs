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

mod grpc_methods;
mod rest_routes;

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
