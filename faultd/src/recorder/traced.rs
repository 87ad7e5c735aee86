//! Each call, one by one, when the configuration asks to correlate (`correlate:`): the trace id the caller
//! propagated (from `traceparent`, or a bare hex id in the configured header), its parent span, its arrival and
//! end on the run's clock, how it ended, and the deadline it was given (`grpc-timeout`, or the configured header
//! in whole milliseconds). The runner joins these calls with loadgen's requests by trace id.
//!
//! Not for the counts per bucket (the recorder's cells) nor for deciding anything: faultd honours no deadline it
//! reads here beyond what gRPC already does.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName};
use faultline_units::trace::{parse_deadline_ms, Correlate};
use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::Outcome;
use crate::invalid::Invalid;

/// The headers a correlating faultd reads on every call, parsed once per configuration.
#[derive(Debug, Clone)]
pub struct CallKeys {
    correlate: Correlate,
    header: HeaderName,
    deadline: HeaderName,
}

impl CallKeys {
    /// The keys of a `correlate:` section; an error names the header that is not a valid header name.
    pub fn compile(correlate: &Correlate) -> Result<CallKeys, Invalid> {
        let name = |field: &str, value: &str| {
            HeaderName::try_from(value.to_ascii_lowercase())
                .map_err(|_| Invalid::new(field, format!("{value:?} is not a valid header name")))
        };
        Ok(CallKeys {
            header: name("header", &correlate.header)?,
            deadline: name("deadline_header", &correlate.deadline_header)?,
            correlate: correlate.clone(),
        })
    }

    /// What a call's headers say of its request: its trace id and parent span, if it carries one, and its
    /// deadline (`grpc_timeout` for a gRPC call, else the deadline header).
    pub fn read(&self, headers: &HeaderMap, grpc_timeout: Option<Duration>) -> CallKey {
        let (trace, parent) = headers
            .get(&self.header)
            .and_then(|v| self.correlate.parse(v.as_bytes()))
            .map_or((None, None), |(t, s)| (Some(t), s));
        let deadline = grpc_timeout.or_else(|| {
            headers
                .get(&self.deadline)
                .and_then(|v| parse_deadline_ms(v.as_bytes()))
        });
        CallKey {
            trace,
            parent,
            deadline,
        }
    }
}

/// What a call carried of the request that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallKey {
    pub trace: Option<u128>,
    pub parent: Option<u64>,
    pub deadline: Option<Duration>,
}

/// How a traced call ended, in a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallEnd {
    /// Answered in full (its status beside it).
    Answered,
    Reset,
    /// Hung until its caller left.
    Hang,
    Empty,
    Malformed,
    Truncated,
    /// Its caller left before the answer.
    Abandoned,
}

impl CallEnd {
    /// Whether the caller left before faultd had answered.
    pub fn caller_left(self) -> bool {
        matches!(self, CallEnd::Abandoned | CallEnd::Hang)
    }
}

/// One call of a correlating faultd, times from the run's origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedCall {
    /// The route it took.
    pub route: String,
    /// The trace id it carried; `None` for a call that carried none (a service that does not propagate).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_hex_id"
    )]
    pub trace: Option<u128>,
    /// The span id of its caller, from `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    pub arrival: Dur,
    /// Its answer, or the moment its caller left.
    pub ended: Dur,
    pub end: CallEnd,
    /// The HTTP status of an answered call (200 for gRPC, whose status is `grpc_status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<u8>,
    /// The deadline the caller gave it: `grpc-timeout`, or the deadline header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
}

mod optional_hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Option<u128>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => faultline_units::trace::hex_id::serialize(id, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
        #[derive(Deserialize)]
        struct Id(#[serde(with = "faultline_units::trace::hex_id")] u128);
        Ok(Option::<Id>::deserialize(d)?.map(|Id(id)| id))
    }
}

/// The calls recorded so far, in the order they ended.
#[derive(Default)]
pub(super) struct TracedCalls {
    calls: Mutex<Vec<TracedCall>>,
}

impl TracedCalls {
    pub(super) fn push(&self, call: TracedCall) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
    }

    pub(super) fn all(&self) -> Vec<TracedCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn clear(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// A call's end as a traced call records it: its word, and the HTTP status of an answer.
pub(super) fn end_of(outcome: Outcome) -> (CallEnd, Option<u16>) {
    match outcome {
        Outcome::Completed(status) => (CallEnd::Answered, Some(status)),
        Outcome::Reset => (CallEnd::Reset, None),
        Outcome::Hang => (CallEnd::Hang, None),
        Outcome::Empty => (CallEnd::Empty, None),
        Outcome::Malformed => (CallEnd::Malformed, None),
        Outcome::Truncated => (CallEnd::Truncated, None),
        Outcome::Abandoned => (CallEnd::Abandoned, None),
    }
}
