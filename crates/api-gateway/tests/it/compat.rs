//! The REST API only adds: every operation, parameter, request and response body, schema
//! property and enum value of a released version is still in today's `/openapi.json`, with
//! the same type. A release's surface is checked in as text
//! (`crates/api-gateway/releases/<version>.surface`, written by `make api-release`); the
//! gRPC half of the same rule is `chime-proto`'s `compat`.
//!
//! Not caught: an optional request property made required (the line of a property does not
//! say which side sends it). Review says that one.

use std::collections::BTreeSet;
use std::path::PathBuf;

use reqwest::Method;
use serde_json::Value;

use crate::support;

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// A schema's type in one token: a reference's name, `string|null`, `array<RunTime>`,
/// `map<string>`, `oneOf(A,null)`, `enum(a,b)`. Descriptions and examples are left out:
/// rewording the docs changes no client.
fn sig(s: &Value) -> String {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or(r).to_owned();
    }
    for combo in ["oneOf", "anyOf", "allOf"] {
        if let Some(parts) = s.get(combo).and_then(Value::as_array) {
            let mut inner: Vec<String> = parts.iter().map(sig).collect();
            inner.sort();
            return format!("{combo}({})", inner.join(","));
        }
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        let mut v: Vec<String> = values.iter().map(Value::to_string).collect();
        v.sort();
        return format!("enum({})", v.join(","));
    }
    let mut types: Vec<String> = match s.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => vec!["any".to_owned()],
    };
    for t in &mut types {
        match t.as_str() {
            "array" => *t = format!("array<{}>", s.get("items").map_or("any".into(), sig)),
            "object" => {
                if let Some(extra) = s.get("additionalProperties").filter(|v| v.is_object()) {
                    *t = format!("map<{}>", sig(extra));
                }
            }
            _ => {
                if let Some(f) = s.get("format").and_then(Value::as_str) {
                    *t = format!("{t}:{f}");
                }
            }
        }
    }
    types.join("|")
}

fn body_lines(what: &str, content: Option<&Value>, lines: &mut BTreeSet<String>) {
    for (media, body) in content.and_then(Value::as_object).into_iter().flatten() {
        let schema = body.get("schema").map_or("none".into(), sig);
        lines.insert(format!("{what} {media} {schema}"));
    }
}

fn schema_lines(name: &str, s: &Value, lines: &mut BTreeSet<String>) {
    for (prop, p) in s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        lines.insert(format!("property {name}.{prop} {}", sig(p)));
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        for v in values {
            lines.insert(format!("enum {name} {v}"));
        }
    }
    for part in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match part.get("$ref") {
            Some(_) => {
                lines.insert(format!("extends {name} {}", sig(part)));
            }
            None => schema_lines(name, part, lines),
        }
    }
}

/// One line per operation, parameter, body, response, schema property and enum value.
pub fn surface(doc: &Value) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let at = format!("{} {path}", method.to_uppercase());
            lines.insert(format!("op {at}"));
            for p in op["parameters"].as_array().into_iter().flatten() {
                lines.insert(format!(
                    "param {at} {} {} {} required={}",
                    p["in"].as_str().unwrap_or("?"),
                    p["name"].as_str().unwrap_or("?"),
                    p.get("schema").map_or("any".into(), sig),
                    p["required"].as_bool().unwrap_or(false),
                ));
            }
            body_lines(
                &format!("request {at}"),
                op.pointer("/requestBody/content"),
                &mut lines,
            );
            for (status, r) in op["responses"].as_object().into_iter().flatten() {
                lines.insert(format!("response {at} {status}"));
                body_lines(
                    &format!("response {at} {status}"),
                    r.get("content"),
                    &mut lines,
                );
            }
        }
    }
    for (name, s) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        schema_lines(name, s, &mut lines);
    }
    lines
}

fn releases() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("releases")
}

async fn today() -> BTreeSet<String> {
    let gw = support::start().await;
    let (status, _, doc) = gw.send(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, 200);
    surface(&doc)
}

#[tokio::test]
async fn nothing_released_is_removed_or_retyped() {
    match chime_proto::compat::only_adds(&releases(), &today().await) {
        Ok(checked) => assert!(
            checked > 0,
            "no release surface in crates/api-gateway/releases"
        ),
        Err(gone) => panic!("REST: {gone}"),
    }
}

#[tokio::test]
async fn a_removed_property_or_a_retyped_one_is_caught() {
    let gw = support::start().await;
    let (_, _, mut doc) = gw.send(Method::GET, "/openapi.json", None).await;
    let before = surface(&doc);
    let props = doc
        .pointer_mut("/components/schemas/TimerBody/properties")
        .and_then(Value::as_object_mut)
        .expect("TimerBody's properties");
    props.remove("name").expect("TimerBody.name");
    props.insert("id".into(), serde_json::json!({"type": "string"}));
    let after = surface(&doc);
    let lost: Vec<&String> = before.difference(&after).collect();
    assert!(
        lost.iter()
            .any(|l| l.starts_with("property TimerBody.name "))
    );
    assert!(lost.iter().any(|l| l.starts_with("property TimerBody.id ")));
}

/// `make api-release VERSION=x.y.z` writes the release's surface with this, from today's
/// document or, with `CHIME_RELEASE_OPENAPI`, from a release's saved `/openapi.json`.
#[tokio::test]
#[ignore = "writes crates/api-gateway/releases/$CHIME_RELEASE.surface; run by make api-release"]
async fn write_release_surface() {
    let version = std::env::var("CHIME_RELEASE").expect("CHIME_RELEASE=x.y.z");
    let lines = match std::env::var("CHIME_RELEASE_OPENAPI") {
        Ok(file) => {
            surface(&serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap())
        }
        Err(_) => today().await,
    };
    let mut text = lines.into_iter().collect::<Vec<_>>().join("\n");
    text.push('\n');
    std::fs::create_dir_all(releases()).unwrap();
    std::fs::write(releases().join(format!("{version}.surface")), text).unwrap();
}
