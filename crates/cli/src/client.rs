//! `chime timers …`: the timer API over gRPC, for people and scripts.

use chime_domain::Timestamp;
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_client::TimerServiceClient;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::output::{self, Output};

#[derive(Debug, Subcommand)]
pub enum TimersCommand {
    /// Create a timer. Give exactly one schedule: --cron, --every, --at or --after.
    ///
    /// Example: chime timers create --app demo --name hello --every 2s
    ///            --url http://127.0.0.1:8080/v1/echo
    Create(CreateArgs),
    /// Show one timer, with its next fire times.
    Get { id: i64 },
    /// List timers, in id order.
    List(ListArgs),
    /// Change a timer. Only the flags given change; the rest is kept. The change is refused
    /// if the timer changed since it was read (or since --expected-version).
    Update(UpdateArgs),
    /// Delete a timer: it stops firing; its runs stay listed.
    Delete { id: i64 },
    /// Resume firing.
    Enable { id: i64 },
    /// Stop firing (occurrences already due are skipped), optionally saying why.
    Disable {
        id: i64,
        /// Shown on the timer until it is enabled again.
        #[arg(long)]
        reason: Option<String>,
    },
    /// A timer's next run times, marked where daylight saving moved them.
    Next {
        id: i64,
        #[arg(long, default_value_t = 10)]
        count: u32,
    },
    /// The run times a schedule would have, without creating a timer.
    Preview(PreviewArgs),
    /// Fire once now, outside the schedule.
    Trigger { id: i64 },
    /// Fire the run times of a past range now, at --rate a second; each is listed in the
    /// timer's runs marked as a backfill.
    ///
    /// Example: chime timers backfill 42 --from 2026-11-20T00:00:00Z --to 2026-11-23T00:00:00Z
    Backfill(BackfillArgs),
    /// A timer's runs, newest first: status, attempt, lateness, HTTP status, error.
    Runs(RunsArgs),
}

#[derive(Debug, Clone, Args, Default)]
pub struct ScheduleArgs {
    /// Cron expression; 6 fields means a leading seconds field ("*/5 * * * * *").
    #[arg(long, group = "schedule")]
    pub cron: Option<String>,
    /// IANA time zone the cron expression is read in (default UTC).
    #[arg(long, requires = "cron")]
    pub time_zone: Option<String>,
    /// A local time in a spring-forward gap fires at the first instant after it
    /// (next-instant, the default), later by the gap's length (shift), or not (skip).
    #[arg(long, value_enum, requires = "cron")]
    pub dst_gap: Option<Gap>,
    /// A local time that happens twice (clocks fall back) fires at the first instance
    /// (first, the default) or at both.
    #[arg(long, value_enum, requires = "cron")]
    pub dst_repeat: Option<Repeat>,
    /// Fixed interval: 30s, 5m, 1h30m.
    #[arg(long, group = "schedule")]
    pub every: Option<String>,
    /// Once, at an RFC 3339 instant: 2026-11-22T10:00:00Z.
    #[arg(long, group = "schedule")]
    pub at: Option<String>,
    /// Once, this long from now: 90s.
    #[arg(long, group = "schedule")]
    pub after: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Gap {
    NextInstant,
    Shift,
    Skip,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Repeat {
    First,
    Both,
}

/// A cron schedule's daylight-saving policy as the API carries it (unset: the defaults).
pub(crate) fn dst_policy(gap: Option<Gap>, repeat: Option<Repeat>) -> Option<pb::DstPolicy> {
    if gap.is_none() && repeat.is_none() {
        return None;
    }
    Some(pb::DstPolicy {
        gap: match gap {
            None | Some(Gap::NextInstant) => pb::GapPolicy::NextInstant,
            Some(Gap::Shift) => pb::GapPolicy::Shift,
            Some(Gap::Skip) => pb::GapPolicy::Skip,
        } as i32,
        repeat: match repeat {
            None | Some(Repeat::First) => pb::RepeatPolicy::First,
            Some(Repeat::Both) => pb::RepeatPolicy::Both,
        } as i32,
    })
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Misfire {
    FireOnce,
    FireAll,
    Skip,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Delivery {
    AtLeastOnce,
    AtMostOnce,
}

#[derive(Debug, Clone, Args, Default)]
pub struct SpecArgs {
    /// Fire no earlier than this RFC 3339 instant.
    #[arg(long)]
    pub start_at: Option<String>,
    /// Fire no later than this RFC 3339 instant.
    #[arg(long)]
    pub end_at: Option<String>,
    /// HTTP method of the callback (default POST).
    #[arg(long)]
    pub method: Option<String>,
    /// Callback header, repeatable: --header X-Job=invoice.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = header)]
    pub headers: Vec<(String, String)>,
    /// Callback request body.
    #[arg(long)]
    pub body: Option<String>,
    /// Callback timeout (default 5s).
    #[arg(long)]
    pub timeout: Option<String>,
    /// Attempts per occurrence, the first included.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    #[arg(long)]
    pub initial_backoff: Option<String>,
    #[arg(long)]
    pub max_backoff: Option<String>,
    /// What to do with occurrences missed while Chime could not fire them.
    #[arg(long, value_enum)]
    pub misfire: Option<Misfire>,
    #[arg(long, value_enum)]
    pub delivery: Option<Delivery>,
    /// No retry starts later than this after the scheduled time: 1h.
    #[arg(long)]
    pub retry_max_age: Option<String>,
    /// Label, repeatable: --label team=billing. On update, the labels given replace all.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = header)]
    pub labels: Vec<(String, String)>,
    /// Recurring timers: done after this many fire times (on update, 0 removes the limit).
    #[arg(long)]
    pub max_runs: Option<u32>,
    /// What happens once the timer is done.
    #[arg(long, value_enum)]
    pub on_complete: Option<Completion>,
    /// Skip occurrences older than this when they come to fire (after an outage): 10m.
    #[arg(long)]
    pub catch_up_window: Option<String>,
    /// While another occurrence of the timer is in flight or retrying: skip the new one,
    /// buffer-one (the first waits for it, later ones are skipped), or cancel-other (the new
    /// one starts and the other's callback is aborted).
    #[arg(long, value_enum)]
    pub overlap: Option<Overlap>,
    /// Flexible window: each occurrence fires at its own offset within it (5m).
    #[arg(long)]
    pub window: Option<String>,
    /// An exclusion calendar of the app (chime calendars put): no fire time on its dates;
    /// repeatable. On update, the ones given replace all.
    #[arg(long = "exclude-calendar", value_name = "NAME")]
    pub exclude_calendars: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct BackfillArgs {
    pub id: i64,
    /// RFC 3339: the first run time to include.
    #[arg(long)]
    pub from: String,
    /// RFC 3339, not after now: run times before it are included (1,000 at most).
    #[arg(long)]
    pub to: String,
    /// How the backfilled runs start beside the timer's other runs (default: the timer's).
    #[arg(long, value_enum)]
    pub overlap: Option<Overlap>,
    /// Runs started per second, 1 to 100 (default 10).
    #[arg(long)]
    pub rate: Option<u32>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Overlap {
    AllowAll,
    Skip,
    BufferOne,
    CancelOther,
}

fn overlap(o: Option<Overlap>) -> i32 {
    match o {
        None => pb::OverlapPolicy::Unspecified as i32,
        Some(Overlap::AllowAll) => pb::OverlapPolicy::AllowAll as i32,
        Some(Overlap::Skip) => pb::OverlapPolicy::Skip as i32,
        Some(Overlap::BufferOne) => pb::OverlapPolicy::BufferOne as i32,
        Some(Overlap::CancelOther) => pb::OverlapPolicy::CancelOther as i32,
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Completion {
    Keep,
    Delete,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    #[arg(long)]
    pub start_at: Option<String>,
    #[arg(long)]
    pub end_at: Option<String>,
    #[arg(long)]
    pub max_runs: Option<u32>,
    #[arg(long, default_value_t = 10)]
    pub count: u32,
    /// RFC 3339 instant to preview from (default now).
    #[arg(long)]
    pub from: Option<String>,
    /// With --exclude-calendar: whose calendars they are.
    #[arg(long)]
    pub app: Option<String>,
    /// Skip the dates of this calendar of --app; repeatable.
    #[arg(long = "exclude-calendar", value_name = "NAME", requires = "app")]
    pub exclude_calendars: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Namespace (tenant) the timer belongs to.
    #[arg(long)]
    pub app: String,
    /// Unique within the app.
    #[arg(long)]
    pub name: String,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// URL Chime calls at every occurrence.
    #[arg(long)]
    pub url: String,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Create it disabled.
    #[arg(long)]
    pub disabled: bool,
    /// Makes retrying the command safe: the same id returns the timer created first.
    #[arg(long)]
    pub request_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    pub id: i64,
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    #[arg(long)]
    pub url: Option<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Refuse the change unless the timer is at this version.
    #[arg(long)]
    pub expected_version: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub app: Option<String>,
    /// Only enabled (true) or disabled (false) timers.
    #[arg(long)]
    pub enabled: Option<bool>,
    /// Only timers in this state: enabled, paused or done.
    #[arg(long, value_enum)]
    pub state: Option<State>,
    /// Only timers whose name starts with this.
    #[arg(long)]
    pub name_prefix: Option<String>,
    /// Label selector: team=billing[,env=prod].
    #[arg(long)]
    pub label: Option<String>,
    #[arg(long, default_value_t = 100)]
    pub page_size: u32,
    /// The next_page_token a previous page printed.
    #[arg(long)]
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum State {
    Enabled,
    Paused,
    Done,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    pub id: i64,
    /// pending, running, succeeded, retrying, failed, dead or skipped.
    #[arg(long)]
    pub status: Option<String>,
    /// Also show occurrences materialized ahead and not due yet.
    #[arg(long)]
    pub upcoming: bool,
    #[arg(long, default_value_t = 20)]
    pub page_size: u32,
    #[arg(long)]
    pub page_token: Option<String>,
}

fn header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

pub(crate) fn timestamp(field: &str, s: &str) -> Result<prost_types::Timestamp, CliError> {
    let t = Timestamp::parse_rfc3339(s).map_err(|e| CliError::Usage(format!("--{field}: {e}")))?;
    let ms = t.as_millis();
    Ok(prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    })
}

/// Why a command failed; the process exits non-zero with its message.
#[derive(Debug)]
pub enum CliError {
    /// Bad flags the server never saw.
    Usage(String),
    /// Chime could not be reached.
    Unreachable(String),
    /// Chime refused or failed the request.
    Server(tonic::Status),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Unreachable(_) => 3,
            Self::Server(s) if s.code() == tonic::Code::NotFound => 4,
            Self::Server(_) => 1,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::Usage(m) | Self::Unreachable(m) => m.clone(),
            Self::Server(status) => {
                use tonic_types::StatusExt;
                let mut m = status.message().to_owned();
                if status.code() == tonic::Code::Unauthenticated {
                    m.push_str(": pass --token or set CHIME_TOKEN");
                }
                if let Some(bad) = status.get_details_bad_request() {
                    for v in bad.field_violations {
                        m.push_str(&format!("\n  {}: {}", v.field, v.description));
                    }
                }
                m
            }
        }
    }
}

impl From<tonic::Status> for CliError {
    fn from(s: tonic::Status) -> Self {
        // A transport failure surfaces as UNAVAILABLE with the connection error as source.
        if s.code() == tonic::Code::Unavailable && s.message().contains("transport") {
            return Self::Unreachable(format!("cannot reach Chime: {}", s.message()));
        }
        Self::Server(s)
    }
}

type Bounds = (
    Option<prost_types::Timestamp>,
    Option<prost_types::Timestamp>,
);

/// `--start-at` and `--end-at`.
fn bounds(spec: &SpecArgs) -> Result<Bounds, CliError> {
    let parse =
        |flag: &str, v: &Option<String>| v.as_deref().map(|s| timestamp(flag, s)).transpose();
    Ok((
        parse("start-at", &spec.start_at)?,
        parse("end-at", &spec.end_at)?,
    ))
}

fn schedule(s: &ScheduleArgs) -> Result<Option<pb::Schedule>, CliError> {
    use pb::schedule::Kind;
    let kind = if let Some(expr) = &s.cron {
        Kind::Cron(pb::CronSchedule {
            expression: expr.clone(),
            time_zone: s.time_zone.clone().unwrap_or_default(),
            dst: dst_policy(s.dst_gap, s.dst_repeat),
        })
    } else if let Some(every) = &s.every {
        Kind::Every(every.clone())
    } else if let Some(at) = &s.at {
        Kind::At(timestamp("at", at)?)
    } else if let Some(after) = &s.after {
        Kind::After(after.clone())
    } else {
        return Ok(None);
    };
    Ok(Some(pb::Schedule {
        kind: Some(kind),
        anchor: None,
    }))
}

/// Applies the flags given to `callback`.
fn apply_callback(callback: &mut pb::Callback, url: Option<&str>, spec: &SpecArgs) {
    if let Some(url) = url {
        callback.url = url.to_owned();
    }
    if let Some(m) = &spec.method {
        callback.method = m.clone();
    }
    for (k, v) in &spec.headers {
        callback.headers.insert(k.clone(), v.clone());
    }
    if let Some(b) = &spec.body {
        callback.body = Some(b.clone());
    }
    if let Some(t) = &spec.timeout {
        callback.timeout = t.clone();
    }
}

fn apply_retry(retry: &mut pb::RetryPolicy, spec: &SpecArgs) {
    if let Some(n) = spec.max_attempts {
        retry.max_attempts = n;
    }
    if let Some(b) = &spec.initial_backoff {
        retry.initial_backoff = b.clone();
    }
    if let Some(b) = &spec.max_backoff {
        retry.max_backoff = b.clone();
    }
    if let Some(a) = &spec.retry_max_age {
        retry.max_age = a.clone();
    }
}

fn on_complete(c: Option<Completion>) -> i32 {
    match c {
        None => pb::OnComplete::Unspecified as i32,
        Some(Completion::Keep) => pb::OnComplete::Keep as i32,
        Some(Completion::Delete) => pb::OnComplete::Delete as i32,
    }
}

fn misfire(m: Misfire) -> i32 {
    match m {
        Misfire::FireOnce => pb::MisfirePolicy::FireOnce as i32,
        Misfire::FireAll => pb::MisfirePolicy::FireAll as i32,
        Misfire::Skip => pb::MisfirePolicy::Skip as i32,
    }
}

fn delivery(d: Delivery) -> i32 {
    match d {
        Delivery::AtLeastOnce => pb::DeliveryMode::AtLeastOnce as i32,
        Delivery::AtMostOnce => pb::DeliveryMode::AtMostOnce as i32,
    }
}

/// A client of the timer API at `server`, sending `token` (when given) as its bearer token.
pub async fn connect(
    server: &str,
    token: Option<&str>,
) -> Result<chime_proto::AuthedTimerClient, CliError> {
    let bearer = chime_proto::Bearer::new(token)
        .ok_or_else(|| CliError::Usage("--token: not a valid token".into()))?;
    let endpoint = tonic::transport::Endpoint::from_shared(server.to_owned())
        .map_err(|e| CliError::Usage(format!("--server {server:?}: {e}")))?
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(30));
    endpoint
        .connect()
        .await
        .map(|channel| TimerServiceClient::with_interceptor(channel, bearer))
        .map_err(|e| CliError::Unreachable(format!("cannot reach Chime at {server}: {}", root(&e))))
}

fn root(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

pub async fn run(
    client: &mut chime_proto::AuthedTimerClient,
    command: TimersCommand,
    out: Output,
) -> Result<String, CliError> {
    Ok(match command {
        TimersCommand::Create(a) => {
            let schedule = schedule(&a.schedule)?.ok_or_else(|| {
                CliError::Usage("give a schedule: --cron, --every, --at or --after".into())
            })?;
            let mut callback = pb::Callback::default();
            apply_callback(&mut callback, Some(&a.url), &a.spec);
            let mut retry = pb::RetryPolicy::default();
            apply_retry(&mut retry, &a.spec);
            let spec = pb::TimerSpec {
                app: a.app,
                name: a.name,
                schedule: Some(schedule),
                start_at: bounds(&a.spec)?.0,
                end_at: bounds(&a.spec)?.1,
                callback: Some(callback),
                retry: Some(retry),
                misfire: a.spec.misfire.map(misfire).unwrap_or_default(),
                delivery: a.spec.delivery.map(delivery).unwrap_or_default(),
                labels: a.spec.labels.iter().cloned().collect(),
                max_runs: a.spec.max_runs,
                on_complete: on_complete(a.spec.on_complete),
                catch_up_window: a.spec.catch_up_window.clone().unwrap_or_default(),
                overlap: overlap(a.spec.overlap),
                window: a.spec.window.clone().unwrap_or_default(),
                exclude_calendars: a.spec.exclude_calendars.clone(),
            };
            let timer = client
                .create_timer(pb::CreateTimerRequest {
                    timer: Some(spec),
                    enabled: a.disabled.then_some(false),
                    request_id: a.request_id.unwrap_or_default(),
                })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::Get { id } => {
            let timer = client
                .get_timer(pb::GetTimerRequest { id })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::List(a) => {
            let page = client
                .list_timers(pb::ListTimersRequest {
                    app: a.app.unwrap_or_default(),
                    enabled: a.enabled,
                    state: match a.state {
                        None => pb::TimerState::Unspecified,
                        Some(State::Enabled) => pb::TimerState::Enabled,
                        Some(State::Paused) => pb::TimerState::Paused,
                        Some(State::Done) => pb::TimerState::Done,
                    } as i32,
                    name_prefix: a.name_prefix.unwrap_or_default(),
                    label: a.label.unwrap_or_default(),
                    page_size: a.page_size,
                    page_token: a.page_token.unwrap_or_default(),
                })
                .await?
                .into_inner();
            output::timers(&page.timers, &page.next_page_token, out)
        }
        TimersCommand::Update(a) => {
            let current = client
                .get_timer(pb::GetTimerRequest { id: a.id })
                .await?
                .into_inner();
            let spec = current.spec.unwrap_or_default();
            let mut callback = spec.callback.unwrap_or_default();
            apply_callback(&mut callback, a.url.as_deref(), &a.spec);
            let mut retry = spec.retry.unwrap_or_default();
            apply_retry(&mut retry, &a.spec);
            let timer = client
                .update_timer(pb::UpdateTimerRequest {
                    id: a.id,
                    // What was read is what is changed: a concurrent change fails the update.
                    expected_version: Some(a.expected_version.unwrap_or(current.version)),
                    name: a.name,
                    schedule: schedule(&a.schedule)?,
                    start_at: bounds(&a.spec)?.0,
                    end_at: bounds(&a.spec)?.1,
                    callback: Some(callback),
                    retry: Some(retry),
                    misfire: a.spec.misfire.map(misfire).unwrap_or_default(),
                    delivery: a.spec.delivery.map(delivery).unwrap_or_default(),
                    labels: (!a.spec.labels.is_empty()).then(|| pb::Labels {
                        labels: a.spec.labels.iter().cloned().collect(),
                    }),
                    max_runs: a.spec.max_runs,
                    on_complete: on_complete(a.spec.on_complete),
                    catch_up_window: a.spec.catch_up_window.clone(),
                    overlap: overlap(a.spec.overlap),
                    window: a.spec.window.clone(),
                    exclude_calendars: (!a.spec.exclude_calendars.is_empty()).then(|| {
                        pb::CalendarNames {
                            names: a.spec.exclude_calendars.clone(),
                        }
                    }),
                })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::Delete { id } => {
            client.delete_timer(pb::DeleteTimerRequest { id }).await?;
            output::done(
                &format!("deleted timer {id}"),
                json!({ "deleted": id }),
                out,
            )
        }
        TimersCommand::Enable { id } => {
            let timer = client
                .enable_timer(pb::EnableTimerRequest { id })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::Disable { id, reason } => {
            let timer = client
                .disable_timer(pb::DisableTimerRequest {
                    id,
                    reason: reason.unwrap_or_default(),
                })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::Next { id, count } => {
            let runs = client
                .next_runs(pb::NextRunsRequest { id, count })
                .await?
                .into_inner();
            output::run_times(&runs, out)
        }
        TimersCommand::Preview(a) => {
            let schedule = schedule(&a.schedule)?.ok_or_else(|| {
                CliError::Usage("give a schedule: --cron, --every, --at or --after".into())
            })?;
            let at = |flag: &str, v: &Option<String>| {
                v.as_deref().map(|s| timestamp(flag, s)).transpose()
            };
            let runs = client
                .preview_schedule(pb::PreviewScheduleRequest {
                    schedule: Some(schedule),
                    start_at: at("start-at", &a.start_at)?,
                    end_at: at("end-at", &a.end_at)?,
                    max_runs: a.max_runs,
                    count: a.count,
                    from: at("from", &a.from)?,
                    app: a.app.clone().unwrap_or_default(),
                    exclude_calendars: a.exclude_calendars.clone(),
                })
                .await?
                .into_inner();
            output::run_times(&runs, out)
        }
        TimersCommand::Trigger { id } => {
            let t = client
                .trigger_timer(pb::TriggerTimerRequest { id })
                .await?
                .into_inner();
            let run_at = t.run_at.map(output::rfc3339).unwrap_or_default();
            output::done(
                &format!("triggered {} (runs at {run_at})", t.task_key),
                json!({ "task_key": t.task_key, "run_at": run_at }),
                out,
            )
        }
        TimersCommand::Backfill(a) => {
            let b = client
                .backfill_timer(pb::BackfillTimerRequest {
                    id: a.id,
                    from: Some(timestamp("from", &a.from)?),
                    to: Some(timestamp("to", &a.to)?),
                    overlap: overlap(a.overlap),
                    rate: a.rate.unwrap_or(0),
                })
                .await?
                .into_inner();
            let first = b.first_start.map(output::rfc3339);
            let last = b.last_start.map(output::rfc3339);
            output::done(
                &format!(
                    "backfill of timer {}: {} runs added (the last starts at {}), {} had a run already",
                    a.id,
                    b.added,
                    last.as_deref().unwrap_or("-"),
                    b.existing
                ),
                json!({
                    "added": b.added,
                    "existing": b.existing,
                    "first_start": first,
                    "last_start": last,
                }),
                out,
            )
        }
        TimersCommand::Runs(a) => {
            let page = client
                .list_runs(pb::ListRunsRequest {
                    timer_id: a.id,
                    status: a.status.unwrap_or_default(),
                    upcoming: a.upcoming,
                    page_size: a.page_size,
                    page_token: a.page_token.unwrap_or_default(),
                })
                .await?
                .into_inner();
            output::runs(&page.runs, &page.next_page_token, out)
        }
    })
}
