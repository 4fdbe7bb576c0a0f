//! What both transports show of a timer, worked out once: the schedule by kind, the
//! callback and retry policy with durations in words, and the next runs in the timer's zone.
//! REST and gRPC only choose how to write instants (RFC 3339 or `google.protobuf.Timestamp`)
//! and copy the fields.

use chime_domain::{ScheduleKind, Timestamp, format_duration};

use crate::api::TimerView;

/// The schedule as it was given, with its resolved instant where it has one.
pub enum ScheduleShown {
    Cron {
        expression: String,
        time_zone: String,
        dst: chime_domain::DstPolicy,
    },
    /// `first`: the first fire time, which the interval counts from.
    Every {
        interval: String,
        first: Timestamp,
    },
    At {
        at: Timestamp,
    },
    /// `at`: the fire time the delay resolved to.
    After {
        delay: String,
        at: Timestamp,
    },
}

pub struct CallbackShown {
    pub url: Option<String>,
    pub worker: Option<chime_domain::WorkerInput>,
    pub nats: Option<chime_domain::NatsInput>,
    pub amqp: Option<chime_domain::AmqpInput>,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    pub timeout: String,
    pub keep_output: bool,
}

pub struct RetryShown {
    pub max_attempts: u32,
    pub initial_backoff: String,
    pub max_backoff: String,
    pub jitter: bool,
    pub max_age: Option<String>,
}

/// One next fire time, and how the timer's zone writes it.
pub struct NextRunShown {
    pub at: Timestamp,
    pub local: String,
}

impl TimerView {
    pub fn schedule_shown(&self) -> ScheduleShown {
        match self.timer.spec.schedule.kind() {
            ScheduleKind::Cron {
                expr,
                time_zone,
                dst,
            } => ScheduleShown::Cron {
                expression: expr.to_string(),
                time_zone: time_zone.name().to_owned(),
                dst: *dst,
            },
            ScheduleKind::Every { interval, first } => ScheduleShown::Every {
                interval: interval.to_string(),
                first: *first,
            },
            ScheduleKind::At { at } => ScheduleShown::At { at: *at },
            ScheduleKind::After { delay, at } => ScheduleShown::After {
                delay: format_duration(*delay),
                at: *at,
            },
        }
    }

    pub fn callback_shown(&self) -> CallbackShown {
        let cb = &self.timer.spec.callback;
        use chime_domain::Target;
        let (mut url, mut worker, mut nats, mut amqp) = (None, None, None, None);
        match &cb.target {
            Target::Http(u) => url = Some(u.to_string()),
            Target::Worker(w) => worker = Some(w.into()),
            Target::Nats(n) => nats = Some(n.into()),
            Target::Amqp(a) => amqp = Some(a.into()),
        }
        CallbackShown {
            url,
            worker,
            nats,
            amqp,
            method: cb.method.as_str().to_owned(),
            headers: cb
                .headers
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            body: cb.body.as_ref().map(|b| b.as_str().to_owned()),
            timeout: format_duration(cb.timeout.get()),
            keep_output: cb.keep_output,
        }
    }

    pub fn retry_shown(&self) -> RetryShown {
        let r = &self.timer.spec.retry;
        RetryShown {
            max_attempts: r.max_attempts(),
            initial_backoff: format_duration(r.initial_backoff()),
            max_backoff: format_duration(r.max_backoff()),
            jitter: r.jitter(),
            max_age: r.max_age().map(|a| a.to_string()),
        }
    }

    pub fn next_runs_shown(&self) -> Vec<NextRunShown> {
        let zone = self.timer.spec.schedule.time_zone();
        self.next_runs
            .iter()
            .map(|at| NextRunShown {
                at: *at,
                local: zone.format(*at),
            })
            .collect()
    }
}
