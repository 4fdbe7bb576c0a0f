//! `chime apply`: one app's timers kept as files (YAML or JSON) in Git, synced to Chime.
//! Each timer is sent to `ApplyTimer` (create, or change to match); the server says what
//! differs, so the diff printed is exactly what applying does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chime_domain::{
    CallbackInput, DeliveryMode, GapPolicy, MisfirePolicy, OnComplete, OverlapPolicy, RepeatPolicy,
    RetryPolicyInput, ScheduleInput,
};
use chime_proto::v1 as pb;
use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::client::{CliError, Gap, Repeat, dst_policy, timestamp};
use crate::output::{self, Output};

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A timer file, or a directory of them (*.yaml, *.yml, *.json; not recursive). A file
    /// holds one timer, a list of timers, or {"timers": [...]}, in the fields of
    /// POST /v1/timers.
    #[arg(short = 'f', long = "file")]
    pub path: PathBuf,
    /// The app the files declare timers of; a timer naming another app is an error.
    #[arg(long)]
    pub app: String,
    /// Also delete the app's timers that no file declares.
    #[arg(long)]
    pub prune: bool,
    /// Only show what would change.
    #[arg(long)]
    pub dry_run: bool,
}

/// One timer as a file declares it: the create body, `app` optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    #[serde(default)]
    app: Option<String>,
    name: String,
    schedule: ScheduleInput,
    #[serde(default)]
    start_at: Option<String>,
    #[serde(default)]
    end_at: Option<String>,
    callback: CallbackInput,
    #[serde(default)]
    retry: Option<RetryPolicyInput>,
    #[serde(default)]
    misfire: Option<MisfirePolicy>,
    #[serde(default)]
    delivery: Option<DeliveryMode>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    max_runs: Option<u32>,
    #[serde(default)]
    on_complete: Option<OnComplete>,
    #[serde(default)]
    catch_up_window: Option<String>,
    #[serde(default)]
    overlap: Option<OverlapPolicy>,
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    exclude_calendars: Vec<String>,
    #[serde(default)]
    then: Option<DeclaredThen>,
}

/// A declared timer's chain.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredThen {
    #[serde(default)]
    on_success: Vec<String>,
    #[serde(default)]
    on_failure: Vec<String>,
}

/// The declared timers in the order they are applied: by name, except that a timer comes
/// after the declared timers its chain names, so a new chain's steps exist when it is
/// written. A cycle keeps name order; the server refuses it.
fn in_chain_order(mut wanted: BTreeMap<String, Declared>) -> Vec<(String, Declared)> {
    fn visit(
        name: &str,
        wanted: &mut BTreeMap<String, Declared>,
        visiting: &mut BTreeSet<String>,
        out: &mut Vec<(String, Declared)>,
    ) {
        if !wanted.contains_key(name) || !visiting.insert(name.to_owned()) {
            return;
        }
        let steps: Vec<String> = wanted[name]
            .then
            .iter()
            .flat_map(|t| t.on_success.iter().chain(&t.on_failure))
            .cloned()
            .collect();
        for step in steps {
            visit(&step, wanted, visiting, out);
        }
        if let Some(d) = wanted.remove(name) {
            out.push((name.to_owned(), d));
        }
    }
    let mut out = Vec::with_capacity(wanted.len());
    let mut visiting = BTreeSet::new();
    let names: Vec<String> = wanted.keys().cloned().collect();
    for name in names {
        visit(&name, &mut wanted, &mut visiting, &mut out);
    }
    out
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileForm {
    Wrapped { timers: Vec<Value> },
    Many(Vec<Value>),
    One(Value),
}

/// The files `path` names, in name order.
fn files(path: &Path) -> Result<Vec<PathBuf>, CliError> {
    let usage = |e: std::io::Error| CliError::Usage(format!("-f {}: {e}", path.display()));
    if !path.is_dir() {
        std::fs::metadata(path).map_err(usage)?;
        return Ok(vec![path.to_owned()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(usage)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Every timer the files declare, by name; a name declared twice is an error.
fn declared(path: &Path, app: &str) -> Result<BTreeMap<String, Declared>, CliError> {
    let mut out = BTreeMap::new();
    for file in files(path)? {
        let bad = |m: String| CliError::Usage(format!("{}: {m}", file.display()));
        let text = std::fs::read_to_string(&file).map_err(|e| bad(e.to_string()))?;
        // YAML is a superset of JSON: one parser reads both.
        let form: FileForm = serde_norway::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let items = match form {
            FileForm::Wrapped { timers } | FileForm::Many(timers) => timers,
            FileForm::One(v) => vec![v],
        };
        for item in items {
            let d: Declared = serde_json::from_value(item).map_err(|e| bad(e.to_string()))?;
            if d.app.as_deref().is_some_and(|a| a != app) {
                return Err(bad(format!(
                    "timer {:?} is of app {:?}, not --app {app:?}",
                    d.name,
                    d.app.unwrap_or_default()
                )));
            }
            if out.contains_key(&d.name) {
                return Err(bad(format!("timer {:?} is declared twice", d.name)));
            }
            out.insert(d.name.clone(), d);
        }
    }
    Ok(out)
}

fn misfire(m: MisfirePolicy) -> pb::MisfirePolicy {
    match m {
        MisfirePolicy::FireOnce => pb::MisfirePolicy::FireOnce,
        MisfirePolicy::FireAll => pb::MisfirePolicy::FireAll,
        MisfirePolicy::Skip => pb::MisfirePolicy::Skip,
    }
}

fn delivery(d: DeliveryMode) -> pb::DeliveryMode {
    match d {
        DeliveryMode::AtLeastOnce => pb::DeliveryMode::AtLeastOnce,
        DeliveryMode::AtMostOnce => pb::DeliveryMode::AtMostOnce,
    }
}

/// The declaration as the gRPC request carries it.
fn request(app: &str, d: Declared, dry_run: bool) -> Result<pb::ApplyTimerRequest, CliError> {
    use pb::schedule::Kind;
    let at = |flag: &str, v: &Option<String>| v.as_deref().map(|s| timestamp(flag, s)).transpose();
    let s = &d.schedule;
    let kind = if let Some(expr) = &s.cron {
        Kind::Cron(pb::CronSchedule {
            expression: expr.clone(),
            time_zone: s.time_zone.clone().unwrap_or_default(),
            dst: s.dst.map(|d| {
                let gap = match d.gap {
                    GapPolicy::NextInstant => Gap::NextInstant,
                    GapPolicy::Shift => Gap::Shift,
                    GapPolicy::Skip => Gap::Skip,
                };
                let repeat = match d.repeat {
                    RepeatPolicy::First => Repeat::First,
                    RepeatPolicy::Both => Repeat::Both,
                };
                dst_policy(Some(gap), Some(repeat)).unwrap_or_default()
            }),
        })
    } else if let Some(every) = &s.every {
        Kind::Every(every.clone())
    } else if let Some(when) = &s.at {
        Kind::At(timestamp("schedule.at", when)?)
    } else if let Some(after) = &s.after {
        Kind::After(after.clone())
    } else {
        return Err(CliError::Usage(format!(
            "timer {:?}: give a schedule (cron, every, at or after)",
            d.name
        )));
    };
    let retry = d.retry.unwrap_or_default();
    Ok(pb::ApplyTimerRequest {
        timer: Some(pb::TimerSpec {
            app: app.to_owned(),
            name: d.name.clone(),
            schedule: Some(pb::Schedule {
                kind: Some(kind),
                anchor: None,
            }),
            start_at: at("start_at", &d.start_at)?,
            end_at: at("end_at", &d.end_at)?,
            callback: Some(pb::Callback {
                url: d.callback.url.unwrap_or_default(),
                worker: d.callback.worker.map(Into::into),
                nats: d.callback.nats.map(Into::into),
                amqp: d.callback.amqp.map(Into::into),
                method: d.callback.method.unwrap_or_default(),
                headers: d.callback.headers.into_iter().collect(),
                body: d.callback.body,
                timeout: d.callback.timeout.unwrap_or_default(),
                keep_output: d.callback.keep_output,
            }),
            retry: Some(pb::RetryPolicy {
                max_attempts: retry.max_attempts.unwrap_or(0),
                initial_backoff: retry.initial_backoff.unwrap_or_default(),
                max_backoff: retry.max_backoff.unwrap_or_default(),
                jitter: retry.jitter,
                max_age: retry.max_age.unwrap_or_default(),
            }),
            misfire: d.misfire.map(misfire).unwrap_or_default() as i32,
            delivery: d.delivery.map(delivery).unwrap_or_default() as i32,
            labels: d.labels.into_iter().collect(),
            max_runs: d.max_runs,
            on_complete: match d.on_complete {
                None => pb::OnComplete::Unspecified,
                Some(OnComplete::Keep) => pb::OnComplete::Keep,
                Some(OnComplete::Delete) => pb::OnComplete::Delete,
            } as i32,
            catch_up_window: d.catch_up_window.unwrap_or_default(),
            overlap: match d.overlap {
                None => pb::OverlapPolicy::Unspecified,
                Some(OverlapPolicy::AllowAll) => pb::OverlapPolicy::AllowAll,
                Some(OverlapPolicy::Skip) => pb::OverlapPolicy::Skip,
                Some(OverlapPolicy::BufferOne) => pb::OverlapPolicy::BufferOne,
                Some(OverlapPolicy::CancelOther) => pb::OverlapPolicy::CancelOther,
            } as i32,
            window: d.window.unwrap_or_default(),
            exclude_calendars: d.exclude_calendars,
            then: d.then.map(|t| pb::Then {
                on_success: t.on_success,
                on_failure: t.on_failure,
            }),
        }),
        enabled: d.enabled,
        dry_run,
    })
}

/// Every live timer of `app`: name → id.
async fn existing(
    client: &mut chime_proto::AuthedTimerClient,
    app: &str,
) -> Result<BTreeMap<String, i64>, CliError> {
    let mut out = BTreeMap::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_timers(pb::ListTimersRequest {
                app: app.to_owned(),
                page_size: 1000,
                page_token: token,
                ..Default::default()
            })
            .await?
            .into_inner();
        for t in page.timers {
            out.insert(t.spec.unwrap_or_default().name, t.id);
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        token = page.next_page_token;
    }
}

/// Applies the files: one line per timer that changes (`+` created, `~` changed with the
/// fields, `-` pruned), then a summary.
pub async fn run(
    client: &mut chime_proto::AuthedTimerClient,
    args: ApplyArgs,
    out: Output,
) -> Result<String, CliError> {
    let wanted = declared(&args.path, &args.app)?;
    let names: BTreeSet<String> = wanted.keys().cloned().collect();
    let mut lines = Vec::new();
    let mut report = Vec::new();
    let (mut created, mut updated, mut unchanged, mut deleted) = (0, 0, 0, 0);
    for (name, d) in in_chain_order(wanted) {
        let applied = client
            .apply_timer(request(&args.app, d, args.dry_run)?)
            .await?
            .into_inner();
        match applied.result.as_str() {
            "created" => {
                created += 1;
                lines.push(format!("+ {name}"));
            }
            "updated" => {
                updated += 1;
                lines.push(format!("~ {name}: {}", applied.changes.join(", ")));
            }
            _ => unchanged += 1,
        }
        report.push(json!({"name": name, "result": applied.result, "changes": applied.changes}));
    }
    if args.prune {
        for (name, id) in existing(client, &args.app).await? {
            if names.contains(&name) {
                continue;
            }
            if !args.dry_run {
                client.delete_timer(pb::DeleteTimerRequest { id }).await?;
            }
            deleted += 1;
            lines.push(format!("- {name}"));
            report.push(json!({"name": name, "result": "deleted", "changes": []}));
        }
    }
    let verb = if args.dry_run { "would be " } else { "" };
    lines.push(format!(
        "{created} {verb}created, {updated} {verb}changed, {unchanged} unchanged, {deleted} {verb}deleted"
    ));
    Ok(output::done(
        &lines.join("\n"),
        json!({"dry_run": args.dry_run, "timers": report}),
        out,
    ))
}
