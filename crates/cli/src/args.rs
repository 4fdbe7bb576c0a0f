//! `chime timers …` arguments: the subcommands and their flags, and the flag values' gRPC
//! forms. What they do is in `client.rs`.

use chime_proto::v1 as pb;
use clap::{Args, Subcommand, ValueEnum};

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
    /// A timer's runs, newest first: status, attempt, lateness, HTTP status, error, and the
    /// first line of the output.
    Runs(RunsArgs),
    /// One run by its task key (`{timer_id}:{run_at_ms}`, as `runs` lists it), with its
    /// whole output.
    Run { task_key: String },
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
    /// Keep what the target answers (response body, worker output) as each run's output
    /// (default true); false for callees whose answers hold secrets.
    #[arg(long, value_name = "BOOL")]
    pub keep_output: Option<bool>,
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
    /// A timer of the same app started when a run succeeds (a chain); repeatable. On
    /// update, --then-success and --then-failure together replace the chain.
    #[arg(long = "then-success", value_name = "NAME")]
    pub then_success: Vec<String>,
    /// A timer of the same app started when a run ends dead or failed; repeatable.
    #[arg(long = "then-failure", value_name = "NAME")]
    pub then_failure: Vec<String>,
    /// On update: remove the chain.
    #[arg(long, conflicts_with_all = ["then_success", "then_failure"])]
    pub no_then: bool,
}

impl SpecArgs {
    /// The chain the flags give: `None` when they give none.
    pub fn then(&self) -> Option<pb::Then> {
        (self.no_then || !self.then_success.is_empty() || !self.then_failure.is_empty()).then(
            || pb::Then {
                on_success: self.then_success.clone(),
                on_failure: self.then_failure.clone(),
            },
        )
    }
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

pub(crate) fn overlap(o: Option<Overlap>) -> i32 {
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
