//! The callback targets between their request form (`chime_domain`) and their messages, so
//! the gateway and the CLI translate them alike.

use chime_domain::{AmqpInput, NatsInput, WorkerInput};

use crate::v1;

impl From<WorkerInput> for v1::WorkerTarget {
    fn from(w: WorkerInput) -> Self {
        Self {
            group: w.group,
            route: w.route.unwrap_or_default(),
            broadcast: w.broadcast.unwrap_or(false),
        }
    }
}

impl From<v1::WorkerTarget> for WorkerInput {
    fn from(w: v1::WorkerTarget) -> Self {
        Self {
            group: w.group,
            route: (!w.route.is_empty()).then_some(w.route),
            broadcast: w.broadcast.then_some(true),
        }
    }
}

impl From<NatsInput> for v1::NatsTarget {
    fn from(n: NatsInput) -> Self {
        Self {
            url: n.url,
            subject: n.subject,
        }
    }
}

impl From<v1::NatsTarget> for NatsInput {
    fn from(n: v1::NatsTarget) -> Self {
        Self {
            url: n.url,
            subject: n.subject,
        }
    }
}

impl From<AmqpInput> for v1::AmqpTarget {
    fn from(a: AmqpInput) -> Self {
        Self {
            url: a.url,
            exchange: a.exchange,
            routing_key: a.routing_key,
        }
    }
}

impl From<v1::AmqpTarget> for AmqpInput {
    fn from(a: v1::AmqpTarget) -> Self {
        Self {
            url: a.url,
            exchange: a.exchange,
            routing_key: a.routing_key,
        }
    }
}
