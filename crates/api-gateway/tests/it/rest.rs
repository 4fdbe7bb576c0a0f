//! Every REST route and its errors, over real PostgreSQL.

// Helpers outside #[test] functions panic on purpose: a bad fixture is a test bug.
#![allow(clippy::unwrap_used)]

use crate::support;

use crate::support::{assert_problem, read, timer_json};
use chime_storage::OccurrenceStore;
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test]
async fn create_get_list_update_delete() {
    let gw = support::start().await;
    let created = gw.create("billing", "nightly-invoice").await;
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["version"], 1);
    assert_eq!(created["schedule"]["time_zone"], "Europe/Berlin");
    assert_eq!(created["callback"]["headers"]["x-job"], "invoice");
    // next_runs: five times, 02:00 Berlin, shown in UTC and in the zone.
    let runs = created["next_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5);
    for r in runs {
        assert!(
            r["local"].as_str().unwrap().contains("T02:00:00.000+0"),
            "{r}"
        );
    }

    let resp = gw
        .client
        .post(gw.url("/v1/timers"))
        .json(&timer_json("billing", "second"))
        .send()
        .await
        .unwrap();
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let (status, _, second) = read(resp).await;
    assert_eq!(status, 201);
    assert_eq!(location, format!("/v1/timers/{}", second["id"]));

    let (status, _, got) = gw
        .send(Method::GET, &format!("/v1/timers/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(got, created);

    let (status, _, page) = gw
        .send(Method::GET, "/v1/timers?app=billing&page_size=1", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["timers"].as_array().unwrap().len(), 1);
    let token = page["next_page_token"].as_str().unwrap().to_owned();
    let (_, _, page2) = gw
        .send(
            Method::GET,
            &format!("/v1/timers?app=billing&page_size=1&page_token={token}"),
            None,
        )
        .await;
    assert_eq!(page2["timers"][0]["name"], "second");
    assert!(page2.get("next_page_token").is_none());

    let patch = json!({"expected_version": 1, "schedule": {"every": "30s"}, "name": "renamed"});
    let (status, _, updated) = gw
        .send(Method::PATCH, &format!("/v1/timers/{id}"), Some(patch))
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["name"], "renamed");
    assert_eq!(updated["schedule"]["every"], "30s");
    assert_eq!(
        updated["callback"], created["callback"],
        "unpatched fields keep their value"
    );

    let (status, _, body) = gw
        .send(Method::DELETE, &format!("/v1/timers/{id}"), None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(body, Value::Null);
    let gone = gw
        .send(Method::GET, &format!("/v1/timers/{id}"), None)
        .await;
    assert_problem(&gone, 404, "NOT_FOUND", None);
}

#[tokio::test]
async fn invalid_input_names_the_field() {
    let gw = support::start().await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"schedule": {"cron": "61 * * * *"}}), "schedule.cron"),
        (
            json!({"schedule": {"cron": "0 * * * *", "time_zone": "Mars/Olympus"}}),
            "schedule.time_zone",
        ),
        (json!({"schedule": {"every": "10ms"}}), "schedule.every"),
        (json!({"schedule": {}}), "schedule"),
        (json!({"callback": {"url": "ftp://x/y"}}), "callback.url"),
        (
            json!({"callback": {"url": "http://h/", "headers": {"Idempotency-Key": "x"}}}),
            "callback.headers.Idempotency-Key",
        ),
        (json!({"app": "Not Valid"}), "app"),
        (json!({"name": ""}), "name"),
        (json!({"retry": {"max_attempts": 0}}), "retry.max_attempts"),
        (json!({"start_at": "yesterday"}), "start_at"),
        (json!({"callback": {"url": 5}}), "callback.url"),
        (json!({"enabled": "yes"}), "enabled"),
        (json!({"surprise": true}), "surprise"),
    ];
    for (overrides, field) in cases {
        let mut body = timer_json("billing", "x");
        for (k, v) in overrides.as_object().unwrap() {
            body[k] = v.clone();
        }
        let resp = gw.send(Method::POST, "/v1/timers", Some(body)).await;
        assert_problem(&resp, 400, "INVALID_ARGUMENT", None);
        let got = resp.2["field"].as_str().unwrap_or_default().to_owned();
        assert!(
            got == field || got.starts_with(field),
            "expected field {field}, got {}",
            resp.2
        );
    }
    let mut missing = timer_json("billing", "x");
    missing.as_object_mut().unwrap().remove("callback");
    let resp = gw.send(Method::POST, "/v1/timers", Some(missing)).await;
    assert_problem(&resp, 400, "INVALID_ARGUMENT", None);
    assert!(
        resp.2["detail"].as_str().unwrap().contains("callback"),
        "{}",
        resp.2
    );
}

#[tokio::test]
async fn transport_errors_are_problems_too() {
    let gw = support::start().await;
    let malformed = gw
        .client
        .post(gw.url("/v1/timers"))
        .header("content-type", "application/json")
        .body("{\"app\": ")
        .send()
        .await
        .unwrap();
    assert_problem(&read(malformed).await, 400, "INVALID_ARGUMENT", None);

    let wrong_type = gw
        .client
        .post(gw.url("/v1/timers"))
        .header("content-type", "text/plain")
        .body(timer_json("a", "b").to_string())
        .send()
        .await
        .unwrap();
    assert_problem(&read(wrong_type).await, 415, "UNSUPPORTED_MEDIA_TYPE", None);

    let no_type = gw
        .client
        .patch(gw.url("/v1/timers/1"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_problem(&read(no_type).await, 415, "UNSUPPORTED_MEDIA_TYPE", None);

    let huge = gw
        .client
        .post(gw.url("/v1/timers"))
        .header("content-type", "application/json")
        .body(vec![b' '; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_problem(&read(huge).await, 413, "PAYLOAD_TOO_LARGE", None);

    // serde would read a struct from an array; the API must not.
    let t = gw.create("billing", "shape").await;
    let array = gw
        .send(
            Method::PATCH,
            &format!("/v1/timers/{}", t["id"]),
            Some(json!([null, null])),
        )
        .await;
    assert_problem(&array, 400, "INVALID_ARGUMENT", Some("body"));
    let mut nested = timer_json("billing", "nested");
    nested["schedule"] = json!(["0 * * * *"]);
    let nested = gw.send(Method::POST, "/v1/timers", Some(nested)).await;
    assert_problem(&nested, 400, "INVALID_ARGUMENT", Some("schedule"));

    let bad_id = gw.send(Method::GET, "/v1/timers/abc", None).await;
    assert_problem(&bad_id, 400, "INVALID_ARGUMENT", Some("id"));
    let bad_query = gw
        .send(Method::GET, "/v1/timers?page_size=many", None)
        .await;
    assert_problem(&bad_query, 400, "INVALID_ARGUMENT", Some("query"));
    let too_big = gw
        .send(Method::GET, "/v1/timers?page_size=5000", None)
        .await;
    assert_problem(&too_big, 400, "INVALID_ARGUMENT", Some("page_size"));
    let no_route = gw.send(Method::GET, "/v2/nothing", None).await;
    assert_problem(&no_route, 404, "NOT_FOUND", None);
    let wrong_method = gw.send(Method::PUT, "/v1/timers", None).await;
    assert_problem(&wrong_method, 405, "METHOD_NOT_ALLOWED", None);
}

#[tokio::test]
async fn conflicts_and_preconditions() {
    let gw = support::start().await;
    let t = gw.create("billing", "nightly").await;
    let id = t["id"].as_i64().unwrap();
    let dup = gw
        .send(
            Method::POST,
            "/v1/timers",
            Some(timer_json("billing", "nightly")),
        )
        .await;
    assert_problem(&dup, 409, "ALREADY_EXISTS", Some("name"));
    assert_eq!(dup.2["reason"], "NAME_TAKEN");

    let stale = gw
        .send(
            Method::PATCH,
            &format!("/v1/timers/{id}"),
            Some(json!({"expected_version": 7, "name": "n2"})),
        )
        .await;
    assert_problem(&stale, 409, "FAILED_PRECONDITION", Some("expected_version"));
    assert_eq!(stale.2["reason"], "VERSION_MISMATCH");
    let unknown = gw
        .send(
            Method::PATCH,
            "/v1/timers/424242",
            Some(json!({"name": "x"})),
        )
        .await;
    assert_problem(&unknown, 404, "NOT_FOUND", None);
    let unknown_delete = gw.send(Method::DELETE, "/v1/timers/424242", None).await;
    assert_problem(&unknown_delete, 404, "NOT_FOUND", None);
}

#[tokio::test]
async fn idempotency_key_returns_the_original_or_conflicts() {
    let gw = support::start().await;
    let post = |body: Value, key: &'static str| {
        gw.client
            .post(gw.url("/v1/timers"))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let (s1, _, first) = read(post(timer_json("billing", "once"), "k-1").await.unwrap()).await;
    let (s2, _, again) = read(post(timer_json("billing", "once"), "k-1").await.unwrap()).await;
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(first["id"], again["id"]);
    let other = read(
        post(timer_json("billing", "different"), "k-1")
            .await
            .unwrap(),
    )
    .await;
    assert_problem(&other, 409, "ALREADY_EXISTS", None);
    assert_eq!(other.2["reason"], "IDEMPOTENCY_KEY_REUSED");
}

#[tokio::test]
async fn enable_disable_trigger_and_runs() {
    let gw = support::start().await;
    let t = gw.create("billing", "nightly").await;
    let id = t["id"].as_i64().unwrap();

    let (status, _, off) = gw
        .send(Method::POST, &format!("/v1/timers/{id}/disable"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(off["enabled"], false);
    assert_eq!(off["version"], 2);
    assert!(off["next_runs"].as_array().unwrap().is_empty());
    let refused = gw
        .send(Method::POST, &format!("/v1/timers/{id}/trigger"), None)
        .await;
    assert_problem(&refused, 409, "FAILED_PRECONDITION", None);

    let (status, _, on) = gw
        .send(Method::POST, &format!("/v1/timers/{id}/enable"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(on["enabled"], true);
    let (status, _, trig) = gw
        .send(Method::POST, &format!("/v1/timers/{id}/trigger"), None)
        .await;
    assert_eq!(status, 202, "{trig}");
    let key = trig["task_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("{id}:")));

    let (status, _, runs) = gw
        .send(Method::GET, &format!("/v1/timers/{id}/runs"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(runs["runs"][0]["task_key"], key.as_str());
    assert_eq!(runs["runs"][0]["status"], "pending");
    assert_eq!(runs["runs"][0]["timer_version"], 3);
    // What is written ahead (the next nightly run, written with the timer, and this row
    // two days out) is listed only on request.
    let ahead = chime_domain::TaskKey::new(
        chime_domain::TimerId::new(id).unwrap(),
        chime_domain::Timestamp::from_millis(
            key.split(':').nth(1).unwrap().parse::<i64>().unwrap() + 2 * 86_400_000,
        ),
    );
    gw.db
        .store
        .insert_occurrences(&[chime_domain::NewOccurrence {
            key: ahead,
            timer_version: 3,
            bucket: chime_domain::Bucket::of(ahead.timer_id, Default::default()),
            due: None,
        }])
        .await
        .unwrap();
    let (_, _, history) = gw
        .send(Method::GET, &format!("/v1/timers/{id}/runs"), None)
        .await;
    assert_eq!(history["runs"].as_array().unwrap().len(), 1);
    let (_, _, all) = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{id}/runs?upcoming=true"),
            None,
        )
        .await;
    assert_eq!(all["runs"].as_array().unwrap().len(), 3);
    assert_eq!(all["runs"][0]["task_key"], ahead.to_string().as_str());
    let (_, _, none) = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{id}/runs?status=succeeded"),
            None,
        )
        .await;
    assert!(none["runs"].as_array().unwrap().is_empty());
    let bad = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{id}/runs?status=done"),
            None,
        )
        .await;
    assert_problem(&bad, 400, "INVALID_ARGUMENT", Some("status"));
    let tampered = gw
        .send(
            Method::GET,
            &format!("/v1/timers/{id}/runs?page_token=c1deadbeef"),
            None,
        )
        .await;
    assert_problem(&tampered, 400, "INVALID_ARGUMENT", Some("page_token"));
    let missing = gw.send(Method::GET, "/v1/timers/999999/runs", None).await;
    assert_problem(&missing, 404, "NOT_FOUND", None);
    for verb in ["enable", "disable", "trigger"] {
        let r = gw
            .send(Method::POST, &format!("/v1/timers/999999/{verb}"), None)
            .await;
        assert_problem(&r, 404, "NOT_FOUND", None);
    }
}

#[tokio::test]
async fn batch_create_is_all_or_nothing() {
    let gw = support::start().await;
    let item = |name: &str| json!({"timer": timer_json("billing", name)});
    let (status, _, created) = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": [item("a"), item("b")]})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["timers"].as_array().unwrap().len(), 2);
    let dup = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": [item("c"), item("a")]})),
        )
        .await;
    assert_problem(&dup, 409, "ALREADY_EXISTS", None);
    let (_, _, listed) = gw.send(Method::GET, "/v1/timers?app=billing", None).await;
    assert_eq!(
        listed["timers"].as_array().unwrap().len(),
        2,
        "c was not created"
    );
    let bad = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": [item("d"), {"timer": {"app": "billing"}}]})),
        )
        .await;
    assert_problem(&bad, 400, "INVALID_ARGUMENT", None);
    let too_many: Vec<Value> = (0..101).map(|i| item(&format!("t{i}"))).collect();
    let over = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": too_many})),
        )
        .await;
    assert_problem(&over, 400, "INVALID_ARGUMENT", Some("requests"));
    let empty = gw
        .send(
            Method::POST,
            "/v1/timers:batchCreate",
            Some(json!({"requests": []})),
        )
        .await;
    assert_problem(&empty, 400, "INVALID_ARGUMENT", Some("requests"));
}

#[tokio::test]
async fn health_readiness_openapi_and_docs() {
    let gw = support::start().await;
    let health = gw.client.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = gw.client.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let (status, _, spec) = gw.send(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, 200);
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = spec["paths"].as_object().unwrap();
    for p in [
        "/v1/timers",
        "/v1/timers:batchCreate",
        "/v1/timers/{id}",
        "/v1/timers/{id}/enable",
        "/v1/timers/{id}/disable",
        "/v1/timers/{id}/trigger",
        "/v1/timers/{id}/runs",
    ] {
        assert!(paths.contains_key(p), "{p} undocumented");
    }
    assert!(spec["paths"]["/v1/timers"]["post"]["responses"]["415"].is_object());
    let docs = gw.client.get(gw.url("/docs/")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.unwrap().contains("swagger"));
}

#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let gw = support::start().await;
    let given = gw
        .client
        .get(gw.url("/v1/timers"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "trace-me-42");
    // Generated when absent or unusable, on problems and unknown routes too.
    for (path, id) in [("/v1/timers/0", None), ("/nowhere", Some("has space"))] {
        let mut req = gw.client.get(gw.url(path));
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        let r = req.send().await.unwrap();
        assert!(r.status().is_client_error());
        let got = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert!(!got.is_empty() && got != "has space", "{got}");
    }
}

/// PostgreSQL refuses NUL in text: free text with control characters must be refused by the
/// API as the caller's mistake, never reach the database as a 500 or (as the fuzzer found) a 503.
#[tokio::test]
async fn control_characters_in_free_text_are_a_bad_request_not_a_storage_failure() {
    let gw = support::start().await;
    let listed = gw
        .send(Method::GET, "/v1/timers?name_prefix=%00%1Ax", None)
        .await;
    assert_problem(&listed, 400, "INVALID_ARGUMENT", Some("name_prefix"));

    let batch = json!({"requests": [{
        "timer": timer_json("billing", "keyed"),
        "idempotency_key": "k\u{0}",
    }]});
    let created = gw
        .send(Method::POST, "/v1/timers:batchCreate", Some(batch))
        .await;
    assert_eq!(created.0, 400, "{}", created.2);
    assert!(
        created.2["field"]
            .as_str()
            .unwrap()
            .ends_with("idempotency_key"),
        "{}",
        created.2
    );

    let token = json!({"name": "t\u{0}", "scopes": ["read"]});
    let minted = gw
        .send(Method::POST, "/v1/apps/billing/tokens", Some(token))
        .await;
    assert_problem(&minted, 400, "INVALID_ARGUMENT", Some("name"));

    // A plain prefix still lists.
    let fine = gw
        .send(Method::GET, "/v1/timers?name_prefix=nightly", None)
        .await;
    assert_eq!(fine.0, 200, "{}", fine.2);
}

/// A callback names one target: a URL, a worker group, or a broker the deployment allows.
#[tokio::test]
async fn callbacks_name_one_target_and_only_allowed_brokers() {
    let gw = support::start().await;
    let with_callback = |name: &str, callback: Value| {
        let mut body = timer_json("billing", name);
        body["callback"] = callback;
        body
    };
    let worker = with_callback(
        "to-workers",
        json!({"worker": {"group": "invoices"}, "body": "{}"}),
    );
    let created = gw.send(Method::POST, "/v1/timers", Some(worker)).await;
    assert_eq!(created.0, 201, "{}", created.2);
    assert_eq!(created.2["callback"]["worker"]["group"], "invoices");
    assert!(created.2["callback"].get("url").is_none(), "{}", created.2);

    let nats = with_callback(
        "to-nats",
        json!({"nats": {"url": support::ALLOWED_BROKER, "subject": "chime.fired"}}),
    );
    let created = gw.send(Method::POST, "/v1/timers", Some(nats)).await;
    assert_eq!(created.0, 201, "{}", created.2);
    assert_eq!(created.2["callback"]["nats"]["subject"], "chime.fired");

    let elsewhere = with_callback(
        "to-elsewhere",
        json!({"amqp": {"url": "amqp://u:secret@broker.example:5672/%2f", "routing_key": "q"}}),
    );
    let refused = gw.send(Method::POST, "/v1/timers", Some(elsewhere)).await;
    assert_problem(&refused, 400, "INVALID_ARGUMENT", Some("callback.amqp.url"));
    let detail = refused.2["detail"].as_str().unwrap();
    assert!(
        detail.contains("CHIME_BROKERS") && !detail.contains("secret"),
        "{detail}"
    );

    let two = with_callback(
        "two",
        json!({"url": "http://127.0.0.1:9/x", "worker": {"group": "g"}}),
    );
    let refused = gw.send(Method::POST, "/v1/timers", Some(two)).await;
    assert_problem(&refused, 400, "INVALID_ARGUMENT", Some("callback"));
}
