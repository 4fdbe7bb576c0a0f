//! The web console's files: served without a token (the page asks for one), with a strict
//! Content-Security-Policy and no framing; `config.json` tells the page whether to ask.
//! The console itself is driven in a real browser by tests/console (scripts/console-test.sh).

#![allow(clippy::unwrap_used)]

use crate::support;

#[tokio::test]
async fn console_files_are_public_and_locked_down() {
    let gw = support::start().await;
    for (path, content_type) in [
        ("/console", "text/html; charset=utf-8"),
        ("/console/", "text/html; charset=utf-8"),
        ("/console/app.js", "text/javascript; charset=utf-8"),
        ("/console/views.js", "text/javascript; charset=utf-8"),
        ("/console/app.css", "text/css; charset=utf-8"),
        ("/console/icon.svg", "image/svg+xml"),
    ] {
        let resp = gw.anonymous.get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert_eq!(h["content-type"], content_type, "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let config: serde_json::Value = gw
        .anonymous
        .get(gw.url("/console/config.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config, serde_json::json!({"auth": true}));
    let missing = gw
        .anonymous
        .get(gw.url("/console/x.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The API beside it still wants a token.
    let api = gw.anonymous.get(gw.url("/v1/timers")).send().await.unwrap();
    assert_eq!(api.status(), 401);
}
