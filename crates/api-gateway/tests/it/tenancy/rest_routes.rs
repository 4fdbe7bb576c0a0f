//! Every REST route, as `/openapi.json` lists it, tried with each kind of credentials.

use super::*;

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
