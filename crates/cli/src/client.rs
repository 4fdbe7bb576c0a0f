//! `chime timers …`: the timer API over gRPC, for people and scripts.

use chime_domain::Timestamp;
use chime_proto::v1 as pb;
use chime_proto::v1::timer_service_client::TimerServiceClient;
use serde_json::json;

pub use crate::args::*;
use crate::output::{self, Output};

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
    if let Some(keep) = spec.keep_output {
        callback.keep_output = Some(keep);
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
        TimersCommand::Create(a) => create(client, a, out).await?,
        TimersCommand::Get { id } => {
            let timer = client
                .get_timer(pb::GetTimerRequest { id })
                .await?
                .into_inner();
            output::timer(&timer, out)
        }
        TimersCommand::List(a) => list(client, a, out).await?,
        TimersCommand::Update(a) => update(client, a, out).await?,
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
        TimersCommand::Preview(a) => preview(client, a, out).await?,
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
        TimersCommand::Backfill(a) => backfill(client, a, out).await?,
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
        TimersCommand::Run { task_key } => {
            let run = client
                .get_run(pb::GetRunRequest { task_key })
                .await?
                .into_inner();
            output::run(&run, out)
        }
    })
}

async fn create(
    client: &mut chime_proto::AuthedTimerClient,
    a: CreateArgs,
    out: Output,
) -> Result<String, CliError> {
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
        then: a.spec.then(),
    };
    let timer = client
        .create_timer(pb::CreateTimerRequest {
            timer: Some(spec),
            enabled: a.disabled.then_some(false),
            request_id: a.request_id.unwrap_or_default(),
        })
        .await?
        .into_inner();
    Ok(output::timer(&timer, out))
}

async fn list(
    client: &mut chime_proto::AuthedTimerClient,
    a: ListArgs,
    out: Output,
) -> Result<String, CliError> {
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
    Ok(output::timers(&page.timers, &page.next_page_token, out))
}

async fn update(
    client: &mut chime_proto::AuthedTimerClient,
    a: UpdateArgs,
    out: Output,
) -> Result<String, CliError> {
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
            exclude_calendars: (!a.spec.exclude_calendars.is_empty()).then(|| pb::CalendarNames {
                names: a.spec.exclude_calendars.clone(),
            }),
            then: a.spec.then(),
        })
        .await?
        .into_inner();
    Ok(output::timer(&timer, out))
}

async fn preview(
    client: &mut chime_proto::AuthedTimerClient,
    a: PreviewArgs,
    out: Output,
) -> Result<String, CliError> {
    let schedule = schedule(&a.schedule)?.ok_or_else(|| {
        CliError::Usage("give a schedule: --cron, --every, --at or --after".into())
    })?;
    let at = |flag: &str, v: &Option<String>| v.as_deref().map(|s| timestamp(flag, s)).transpose();
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
    Ok(output::run_times(&runs, out))
}

async fn backfill(
    client: &mut chime_proto::AuthedTimerClient,
    a: BackfillArgs,
    out: Output,
) -> Result<String, CliError> {
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
    Ok(output::done(
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
    ))
}
