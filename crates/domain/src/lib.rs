//! Chime's domain model. No I/O lives here: every function is a pure computation over values,
//! and every type that crosses a boundary (REST, gRPC, storage) can only hold valid values.

mod access;
mod activity;
mod backlog;
mod calendar;
mod callback;
mod chain;
mod clock;
mod duration;
mod error;
mod horizon;
mod ids;
pub mod misfire;
mod network;
mod notify;
mod occurrence;
mod ownership;
mod page;
mod policy;
mod schedule;
mod target;
mod timer;
mod unwritten;

pub use access::{
    ApiToken, MAX_TOKEN_NAME_CHARS, Scope, Scopes, SigningSecret, TokenId, webhook_signature,
};
pub use activity::{Counts, LATENESS_BOUNDS_MS, LATENESS_BUCKETS, Tally, minute_of};
pub use backlog::{BACKLOG_AFTER, BACKLOG_HELD_FOR, BURST_KEYS, Backlog, in_backlog};
pub use calendar::{Calendar, CalendarName, DateRange, Exclusions, parse_dates};
pub use callback::{
    Callback, CallbackBody, CallbackHeaders, CallbackInput, CallbackTimeout, CallbackUrl,
    HttpMethod,
};
pub use chain::{ChainOn, ChainStep, StepRecord, StepStatus, Then};
pub use clock::{Clock, ManualClock, Sleep, SystemClock, Ticker, Timestamp, TimestampError};
pub use duration::{DurationError, format_duration, parse_duration};
pub use error::{ValidationError, plain_text};
pub use horizon::{EXHAUSTED, Horizon, Plan};
pub use ids::{AppName, Bucket, BucketCount, ShardKey, TaskKey, TimerId, TimerName};
pub use network::{Blocked, Cidr, CidrError, NetworkPolicy};
pub use notify::{
    DEFAULT_FAILING_AFTER, MAX_FAILING_AFTER, NotificationEvent, NotificationSettings, NotifyOn,
    SentNotification, run_ending,
};
pub use occurrence::{
    Claim, ClaimedOccurrence, EarlySkip, EarlySkipKind, NewOccurrence, Occurrence,
    OccurrenceStatus, Outcome, Shard, ShardStatus, StoppedTimer,
};
pub use ownership::Ownership;
pub use page::{Page, PageSize, PageToken};
pub use policy::{DeliveryMode, MaxAge, MisfirePolicy, RetryPolicy, RetryPolicyInput, Window};
pub use schedule::{
    CronExpr, DstNote, DstPolicy, GapPolicy, Interval, RepeatPolicy, RunLimit, Schedule,
    ScheduleInput, ScheduleKind, TimeZone,
};
pub use target::{
    AmqpInput, AmqpTarget, BrokerUrl, NatsInput, NatsTarget, Route, Target, TargetKind,
    WorkerInput, WorkerTarget, worker_group,
};
pub use timer::{
    Labels, NewTimer, OnComplete, OverlapPolicy, PauseNote, Timer, TimerSpec, TimerState,
};
pub use unwritten::{UNWRITTEN_MAX_INTERVAL, UnwrittenRun};

/// Documented limits on user input. They bound memory and storage per timer.
pub mod limits {
    /// Longest app (tenant namespace) name, in bytes.
    pub const MAX_APP_LEN: usize = 64;
    /// Longest timer name, in characters.
    pub const MAX_NAME_CHARS: usize = 128;
    /// Longest callback URL, in bytes.
    pub const MAX_URL_LEN: usize = 2048;
    /// Most headers on one callback.
    pub const MAX_HEADERS: usize = 32;
    /// Longest header value, in bytes.
    pub const MAX_HEADER_VALUE_LEN: usize = 4096;
    /// Largest callback body, in bytes.
    pub const MAX_BODY_BYTES: usize = 64 * 1024;
    /// How far in the past a one-shot `at` may lie and still be accepted (it fires at once).
    pub const MAX_AT_PAST_MS: i64 = 60_000;
    /// Furthest a one-shot may lie in the future (10 years).
    pub const MAX_FUTURE_MS: i64 = 10 * 366 * 24 * 3_600_000;
    /// Shortest recurring interval.
    pub const MIN_INTERVAL_MS: i64 = 1_000;
    /// Shortest and longest callback timeout.
    pub const MIN_CALLBACK_TIMEOUT_MS: i64 = 100;
    pub const MAX_CALLBACK_TIMEOUT_MS: i64 = 300_000;
    /// Most attempts a retry policy may ask for.
    pub const MAX_ATTEMPTS: u32 = 25;
    /// Largest page a listing returns.
    pub const MAX_PAGE_SIZE: u32 = 1000;
    /// Page size when none is asked for.
    pub const DEFAULT_PAGE_SIZE: u32 = 100;
    /// Largest `max_runs`: the last run is worked out by walking the schedule that far.
    pub const MAX_RUNS: u32 = 10_000;
    /// Most labels on one timer, and the longest key and value.
    pub const MAX_LABELS: usize = 16;
    pub const MAX_LABEL_LEN: usize = 63;
    /// Longest pause reason, in characters.
    pub const MAX_PAUSE_REASON_CHARS: usize = 500;
    /// Longest `catch_up_window` and `retry.max_age`.
    pub const MAX_AGE_MS: i64 = 366 * 24 * 3_600_000;
    /// Most run times one preview returns.
    pub const MAX_PREVIEW: usize = 1000;
    /// Most fire times one backfill request adds.
    pub const MAX_BACKFILL_RUNS: usize = 1000;
    /// Most dates or date ranges in one exclusion calendar, and the longest calendar name.
    pub const MAX_CALENDAR_ENTRIES: usize = 366;
    pub const MAX_CALENDAR_NAME_LEN: usize = 64;
    /// Most exclusion calendars one timer lists.
    pub const MAX_EXCLUDE_CALENDARS: usize = 8;
    /// Most exclusion calendars one app has.
    pub const MAX_CALENDARS_PER_APP: usize = 100;
    /// Fastest a backfill starts its runs (per second), and its default pace.
    pub const MAX_BACKFILL_RATE: u32 = 100;
    pub const DEFAULT_BACKFILL_RATE: u32 = 10;
    /// Most timers one list of a chain (`then.on_success`, `then.on_failure`) names.
    pub const MAX_CHAIN_STEPS: usize = 16;
    /// Most timers a chain reaches, followed from one timer: the cycle check reads each.
    pub const MAX_CHAIN_REACH: usize = 100;
}
