//! Rendering answers as a table for people or JSON for scripts (`--output`).

use chime_proto::v1 as pb;
use clap::ValueEnum;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

pub fn rfc3339(t: prost_types::Timestamp) -> String {
    let ms = t.seconds * 1000 + i64::from(t.nanos) / 1_000_000;
    chime_domain::Timestamp::from_millis(ms).to_rfc3339()
}

fn ts(t: &Option<prost_types::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(t)))
}

fn schedule_text(s: &Option<pb::Schedule>) -> String {
    use pb::schedule::Kind;
    match s.as_ref().and_then(|s| s.kind.as_ref()) {
        Some(Kind::Cron(c)) if c.time_zone.is_empty() || c.time_zone == "UTC" => {
            format!("cron {}", c.expression)
        }
        Some(Kind::Cron(c)) => format!("cron {} ({})", c.expression, c.time_zone),
        Some(Kind::Every(e)) => format!("every {e}"),
        Some(Kind::At(t)) => format!("at {}", rfc3339(*t)),
        Some(Kind::After(a)) => format!("after {a}"),
        None => "-".into(),
    }
}

/// A worker target as the API shows it: the route and broadcast only when set.
fn worker_json(w: &pb::WorkerTarget) -> Value {
    let mut v = json!({"group": w.group});
    if !w.route.is_empty() && w.route != "least_busy" {
        v["route"] = json!(w.route);
    }
    if w.broadcast {
        v["broadcast"] = json!(true);
    }
    v
}

fn timer_json(t: &pb::Timer) -> Value {
    let spec = t.spec.clone().unwrap_or_default();
    let cb = spec.callback.unwrap_or_default();
    let retry = spec.retry.unwrap_or_default();
    json!({
        "id": t.id,
        "app": spec.app,
        "name": spec.name,
        "schedule": schedule_text(&spec.schedule),
        "start_at": ts(&spec.start_at),
        "end_at": ts(&spec.end_at),
        "callback": {
            "url": (!cb.url.is_empty()).then_some(&cb.url),
            "worker": cb.worker.as_ref().map(worker_json),
            "nats": cb.nats.as_ref().map(|n| json!({"url": n.url, "subject": n.subject})),
            "amqp": cb.amqp.as_ref().map(|a| json!({
                "url": a.url, "exchange": a.exchange, "routing_key": a.routing_key,
            })),
            "method": cb.method, "headers": cb.headers,
            "body": cb.body, "timeout": cb.timeout,
        },
        "retry": {
            "max_attempts": retry.max_attempts,
            "initial_backoff": retry.initial_backoff,
            "max_backoff": retry.max_backoff,
            "max_age": (!retry.max_age.is_empty()).then_some(&retry.max_age),
        },
        "enabled": t.enabled,
        "state": state_text(t.state),
        "paused": t.paused.as_ref().map(|p| json!({"reason": p.reason, "at": ts(&p.at), "by": (!p.by.is_empty()).then_some(&p.by)})),
        "labels": spec.labels,
        "max_runs": spec.max_runs,
        "remaining_runs": t.remaining_runs,
        "catch_up_window": (!spec.catch_up_window.is_empty()).then_some(&spec.catch_up_window),
        "window": (!spec.window.is_empty()).then_some(&spec.window),
        "exclude_calendars": spec.exclude_calendars,
        "then": spec.then.as_ref().map(|t| json!({"on_success": t.on_success, "on_failure": t.on_failure})),
        "overlap": match pb::OverlapPolicy::try_from(spec.overlap) {
            Ok(pb::OverlapPolicy::Skip) => "skip",
            Ok(pb::OverlapPolicy::BufferOne) => "buffer_one",
            Ok(pb::OverlapPolicy::CancelOther) => "cancel_other",
            _ => "allow_all",
        },
        "version": t.version,
        "created_at": ts(&t.created_at),
        "updated_at": ts(&t.updated_at),
        "next_runs": t.next_runs.iter().map(|n| json!({"at": ts(&n.at), "local": n.local})).collect::<Vec<_>>(),
    })
}

fn run_json(r: &pb::Run) -> Value {
    json!({
        "task_key": r.task_key,
        "timer_version": r.timer_version,
        "status": r.status,
        "attempt": r.attempt,
        "run_at": ts(&r.run_at),
        "next_attempt_at": ts(&r.next_attempt_at),
        "fired_at": ts(&r.fired_at),
        "lateness_ms": r.lateness_ms,
        "http_status": r.http_status,
        "error": (!r.error.is_empty()).then_some(&r.error),
        "output": (!r.output.is_empty()).then_some(&r.output),
        "backfill": (!r.backfill.is_empty()).then_some(&r.backfill),
        "parent_run": (!r.parent_run.is_empty()).then_some(&r.parent_run),
        "shards": r.shards.iter().map(|s| json!({
            "index": s.index,
            "status": s.status,
            "attempt": s.attempt,
            "worker": (!s.worker.is_empty()).then_some(&s.worker),
            "error": (!s.error.is_empty()).then_some(&s.error),
        })).collect::<Vec<_>>(),
        "chain": r.chain.iter().map(|s| json!({
            "timer": s.timer,
            "on": s.on,
            "status": s.status,
            "run": (!s.run.is_empty()).then_some(&s.run),
            "reason": (!s.reason.is_empty()).then_some(&s.reason),
            "at": ts(&s.at),
        })).collect::<Vec<_>>(),
    })
}

pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

fn next_page(token: &str) -> String {
    if token.is_empty() {
        String::new()
    } else {
        format!("\nmore: --page-token {token}")
    }
}

pub fn timer(t: &pb::Timer, out: Output) -> String {
    let v = timer_json(t);
    if out == Output::Json {
        return pretty(&v);
    }
    let mut lines = vec![
        format!("id:        {}", t.id),
        format!(
            "app/name:  {}/{}",
            v["app"].as_str().unwrap_or(""),
            v["name"].as_str().unwrap_or("")
        ),
        format!("schedule:  {}", v["schedule"].as_str().unwrap_or("")),
        format!("callback:  {}", target_text(&v["callback"])),
        format!("state:     {}", state_text(t.state)),
        format!("version:   {}", t.version),
    ];
    if let Some(p) = &t.paused {
        lines.push(format!(
            "paused:    {} ({})",
            p.reason,
            p.at.map(rfc3339).unwrap_or_default()
        ));
    }
    if let Some(obj) = v["labels"].as_object().filter(|o| !o.is_empty()) {
        let pairs: Vec<String> = obj
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        lines.push(format!("labels:    {}", pairs.join(",")));
    }
    if let Some(spec) = t.spec.as_ref().filter(|s| !s.exclude_calendars.is_empty()) {
        lines.push(format!("excludes:  {}", spec.exclude_calendars.join(",")));
    }
    if let Some(then) = t.spec.as_ref().and_then(|s| s.then.as_ref()) {
        if !then.on_success.is_empty() {
            lines.push(format!("then ok:   {}", then.on_success.join(",")));
        }
        if !then.on_failure.is_empty() {
            lines.push(format!("then fail: {}", then.on_failure.join(",")));
        }
    }
    if let Some(left) = t.remaining_runs {
        lines.push(format!("runs left: {left}"));
    }
    for (i, n) in t.next_runs.iter().enumerate() {
        let at = n.at.map(rfc3339).unwrap_or_default();
        let label = if i == 0 { "next runs:" } else { "" };
        lines.push(format!("{label:<10} {at}  {}", n.local));
    }
    lines.join("\n")
}

pub fn timers(ts: &[pb::Timer], token: &str, out: Output) -> String {
    if out == Output::Json {
        return pretty(&json!({
            "timers": ts.iter().map(timer_json).collect::<Vec<_>>(),
            "next_page_token": (!token.is_empty()).then_some(token),
        }));
    }
    let rows: Vec<Vec<String>> = ts
        .iter()
        .map(|t| {
            let spec = t.spec.clone().unwrap_or_default();
            vec![
                t.id.to_string(),
                spec.app,
                spec.name,
                schedule_text(&spec.schedule),
                state_text(t.state).into(),
                t.version.to_string(),
                t.next_runs
                    .first()
                    .and_then(|n| n.at)
                    .map(rfc3339)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(
        &[
            "ID", "APP", "NAME", "SCHEDULE", "STATE", "VERSION", "NEXT RUN",
        ],
        &rows,
    ) + &next_page(token)
}

pub fn runs(rs: &[pb::Run], token: &str, out: Output) -> String {
    if out == Output::Json {
        return pretty(&json!({
            "runs": rs.iter().map(run_json).collect::<Vec<_>>(),
            "next_page_token": (!token.is_empty()).then_some(token),
        }));
    }
    let rows: Vec<Vec<String>> = rs
        .iter()
        .map(|r| {
            vec![
                r.run_at.map(rfc3339).unwrap_or_default(),
                if r.backfill.is_empty() {
                    r.status.clone()
                } else {
                    format!("{} (backfill)", r.status)
                },
                r.attempt.to_string(),
                r.lateness_ms.map_or("-".into(), |l| format!("{l} ms")),
                r.http_status.map_or("-".into(), |s| s.to_string()),
                r.error.clone(),
                first_line(&r.output, 40),
            ]
        })
        .collect();
    table(
        &[
            "RUN AT", "STATUS", "ATTEMPT", "LATENESS", "HTTP", "ERROR", "OUTPUT",
        ],
        &rows,
    ) + &next_page(token)
}

/// The first non-empty line of `text`, cut to `chars` with an ellipsis.
fn first_line(text: &str, chars: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= chars {
        return line.to_owned();
    }
    line.chars()
        .take(chars.saturating_sub(1))
        .collect::<String>()
        + "…"
}

/// One run, every field, and its whole output after them.
pub fn run(r: &pb::Run, out: Output) -> String {
    if out == Output::Json {
        return pretty(&run_json(r));
    }
    let field = |name: &str, value: String| format!("{name:<16}{value}\n");
    let mut text = field("task_key", r.task_key.clone())
        + &field("status", r.status.clone())
        + &field("attempt", r.attempt.to_string())
        + &field("run_at", r.run_at.map(rfc3339).unwrap_or_default())
        + &field("fired_at", r.fired_at.map(rfc3339).unwrap_or("-".into()))
        + &field(
            "lateness",
            r.lateness_ms.map_or("-".into(), |l| format!("{l} ms")),
        )
        + &field(
            "http_status",
            r.http_status.map_or("-".into(), |s| s.to_string()),
        );
    if !r.error.is_empty() {
        text += &field("error", r.error.clone());
    }
    if !r.backfill.is_empty() {
        text += &field("backfill", r.backfill.clone());
    }
    if !r.parent_run.is_empty() {
        text += &field("parent_run", r.parent_run.clone());
    }
    for s in &r.shards {
        let by = if s.worker.is_empty() { "-" } else { &s.worker };
        let what = if s.error.is_empty() {
            format!("{} (attempt {}, {by})", s.status, s.attempt)
        } else {
            format!("{} (attempt {}, {by}): {}", s.status, s.attempt, s.error)
        };
        text += &field("shard", format!("{}: {what}", s.index));
    }
    for s in &r.chain {
        let what = if s.run.is_empty() {
            format!("{} ({})", s.status, s.reason)
        } else {
            format!("{} {}", s.status, s.run)
        };
        text += &field("chain", format!("{} {}: {what}", s.on, s.timer));
    }
    if r.output.is_empty() {
        text += &field("output", "-".into());
    } else {
        text += "output:\n";
        text += &r.output;
        if !r.output.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

fn state_text(raw: i32) -> &'static str {
    match pb::TimerState::try_from(raw) {
        Ok(pb::TimerState::Enabled) => "enabled",
        Ok(pb::TimerState::Paused) => "paused",
        Ok(pb::TimerState::Done) => "done",
        _ => "-",
    }
}

/// Run times of a preview: UTC, local, and a daylight-saving mark.
pub fn run_times(runs: &pb::RunTimes, out: Output) -> String {
    let dst = |raw: i32| match pb::DstNote::try_from(raw) {
        Ok(pb::DstNote::Gap) => Some("gap"),
        Ok(pb::DstNote::Repeated) => Some("repeated"),
        _ => None,
    };
    if out == Output::Json {
        return pretty(&json!({
            "runs": runs.runs.iter().map(|r| json!({
                "utc": ts(&r.at), "local": r.local, "dst": dst(r.dst),
            })).collect::<Vec<_>>(),
        }));
    }
    let rows: Vec<Vec<String>> = runs
        .runs
        .iter()
        .map(|r| {
            vec![
                r.at.map(rfc3339).unwrap_or_default(),
                r.local.clone(),
                dst(r.dst).unwrap_or("").to_owned(),
            ]
        })
        .collect();
    table(&["UTC", "LOCAL", "DST"], &rows)
}

pub fn done(text: &str, v: Value, out: Output) -> String {
    match out {
        Output::Table => text.to_owned(),
        Output::Json => pretty(&v),
    }
}

/// A callback's target in words: `POST http://…`, `worker group g`, `nats … subject s`.
fn target_text(cb: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    if let Some(w) = cb.get("worker").filter(|w| !w.is_null()) {
        let how = if w["broadcast"] == true {
            ", broadcast".to_owned()
        } else if let Some(route) = w["route"].as_str() {
            format!(", route {route}")
        } else {
            String::new()
        };
        format!("worker group {}{how}", s(&w["group"]))
    } else if let Some(n) = cb.get("nats").filter(|n| !n.is_null()) {
        format!("nats {} subject {}", s(&n["url"]), s(&n["subject"]))
    } else if let Some(a) = cb.get("amqp").filter(|a| !a.is_null()) {
        format!("amqp {} routing key {}", s(&a["url"]), s(&a["routing_key"]))
    } else {
        format!("{} {}", s(&cb["method"]), s(&cb["url"]))
    }
}
