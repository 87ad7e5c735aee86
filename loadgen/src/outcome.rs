//! Outcome classes: exactly one per request, the counts of each, and the classifying step of the request
//! pipeline: which class an answer falls in, by its HTTP status or its gRPC status and the scenario's fallback
//! rules, whatever protocol carried it.
//!
//! Not for timing: the recorder attaches latencies; this module only decides which class an answer falls in.

use faultline_units::GrpcCode;
use serde::{Deserialize, Serialize};

/// How a request ended. Every request the schedule issues ends in exactly one of these.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A response below 400 without the fallback marker.
    Ok,
    /// A response the service marked as degraded: the configured header, or one of the configured statuses.
    Fallback,
    /// 4xx: says nothing about the dependency's health, kept apart for that reason.
    ClientError,
    /// 5xx.
    ServerError,
    /// No complete response within the client timeout.
    Timeout,
    /// The connection could not be opened, or broke before the response was complete.
    ConnectError,
    /// Never sent: the cap on requests in flight was reached at its intended time.
    Dropped,
}

impl Outcome {
    /// Every class, in report order.
    pub const ALL: [Outcome; 7] = [
        Outcome::Ok,
        Outcome::Fallback,
        Outcome::ClientError,
        Outcome::ServerError,
        Outcome::Timeout,
        Outcome::ConnectError,
        Outcome::Dropped,
    ];

    /// The snake_case name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fallback => "fallback",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::Timeout => "timeout",
            Outcome::ConnectError => "connect_error",
            Outcome::Dropped => "dropped",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A count per outcome class.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ClassCounts {
    /// See [`Outcome::Ok`].
    pub ok: u64,
    /// See [`Outcome::Fallback`].
    pub fallback: u64,
    /// See [`Outcome::ClientError`].
    pub client_error: u64,
    /// See [`Outcome::ServerError`].
    pub server_error: u64,
    /// See [`Outcome::Timeout`].
    pub timeout: u64,
    /// See [`Outcome::ConnectError`].
    pub connect_error: u64,
    /// See [`Outcome::Dropped`].
    pub dropped: u64,
}

impl ClassCounts {
    /// The count of one class.
    pub fn get(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Ok => self.ok,
            Outcome::Fallback => self.fallback,
            Outcome::ClientError => self.client_error,
            Outcome::ServerError => self.server_error,
            Outcome::Timeout => self.timeout,
            Outcome::ConnectError => self.connect_error,
            Outcome::Dropped => self.dropped,
        }
    }

    /// Adds one to a class.
    pub fn add(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Ok => &mut self.ok,
            Outcome::Fallback => &mut self.fallback,
            Outcome::ClientError => &mut self.client_error,
            Outcome::ServerError => &mut self.server_error,
            Outcome::Timeout => &mut self.timeout,
            Outcome::ConnectError => &mut self.connect_error,
            Outcome::Dropped => &mut self.dropped,
        };
        *slot += 1;
    }

    /// The sum over every class, dropped included.
    pub fn total(&self) -> u64 {
        Outcome::ALL.iter().map(|&o| self.get(o)).sum()
    }

    /// The requests that got an answer or an error back, i.e. every class but `dropped`.
    pub fn completed(&self) -> u64 {
        self.total() - self.dropped
    }
}

impl std::ops::AddAssign for ClassCounts {
    /// Class by class: the counts of two shares of a load are the counts of their union.
    fn add_assign(&mut self, other: ClassCounts) {
        self.ok += other.ok;
        self.fallback += other.fallback;
        self.client_error += other.client_error;
        self.server_error += other.server_error;
        self.timeout += other.timeout;
        self.connect_error += other.connect_error;
        self.dropped += other.dropped;
    }
}

/// What the outcome needs from a complete HTTP response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The status code.
    pub(crate) status: u16,
    /// The response carried the configured fallback header.
    pub(crate) marked: bool,
}

/// Decides between ok, fallback, client and server error (and timeout, for gRPC's DEADLINE_EXCEEDED) for an
/// answer, from the spec's fallback rules. (The fallback header is looked for by the protocol while it reads the
/// answer: [`Answer::marked`].)
#[derive(Debug, Clone, Default)]
pub(crate) struct Classifier {
    /// `load.fallback_status`.
    pub(crate) fallback_status: Vec<u16>,
    /// `load.fallback_grpc_status`.
    pub(crate) fallback_grpc_status: Vec<GrpcCode>,
}

impl Classifier {
    /// The class of a complete response. The fallback marker wins over the status: a 503 the service marks as a
    /// fallback is the service degrading on purpose, which is what a scenario asks about.
    pub(crate) fn classify(&self, response: Answer) -> Outcome {
        let Answer { status, marked } = response;
        if marked || self.fallback_status.contains(&status) {
            Outcome::Fallback
        } else if status >= 500 {
            Outcome::ServerError
        } else if status >= 400 {
            Outcome::ClientError
        } else {
            Outcome::Ok
        }
    }

    /// The class of a gRPC answer: OK is `ok`; a status in `fallback_grpc_status` or the fallback header in the
    /// metadata is `fallback`; DEADLINE_EXCEEDED is `timeout`; INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
    /// PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION and OUT_OF_RANGE are `client_error`; every other
    /// status is `server_error`.
    pub(crate) fn classify_grpc(&self, code: GrpcCode, marked: bool) -> Outcome {
        if marked || self.fallback_grpc_status.contains(&code) {
            return Outcome::Fallback;
        }
        match code {
            GrpcCode::OK => Outcome::Ok,
            GrpcCode::DEADLINE_EXCEEDED => Outcome::Timeout,
            code if code.is_client_error() => Outcome::ClientError,
            _ => Outcome::ServerError,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(status: u16, header: Option<(&str, &str)>) -> Answer {
        Answer {
            status,
            marked: header.is_some(),
        }
    }

    #[test]
    fn each_response_falls_in_exactly_one_class_with_the_fallback_marker_first() {
        let c = Classifier {
            fallback_status: vec![503],
            ..Classifier::default()
        };
        assert_eq!(c.classify(parts(200, None)), Outcome::Ok);
        assert_eq!(c.classify(parts(304, None)), Outcome::Ok);
        assert_eq!(
            c.classify(parts(200, Some(("X-Fallback", "stale")))),
            Outcome::Fallback
        );
        assert_eq!(
            c.classify(parts(500, Some(("x-fallback", "default")))),
            Outcome::Fallback
        );
        assert_eq!(c.classify(parts(503, None)), Outcome::Fallback);
        assert_eq!(c.classify(parts(404, None)), Outcome::ClientError);
        assert_eq!(c.classify(parts(502, None)), Outcome::ServerError);
        assert_eq!(
            Classifier::default().classify(parts(503, None)),
            Outcome::ServerError
        );
    }

    #[test]
    fn each_grpc_status_falls_in_its_class() {
        let c = Classifier {
            fallback_grpc_status: vec![GrpcCode::UNAVAILABLE],
            ..Classifier::default()
        };
        assert_eq!(c.classify_grpc(GrpcCode::OK, false), Outcome::Ok);
        assert_eq!(c.classify_grpc(GrpcCode::OK, true), Outcome::Fallback);
        assert_eq!(
            c.classify_grpc(GrpcCode::UNAVAILABLE, false),
            Outcome::Fallback
        );
        assert_eq!(
            c.classify_grpc(GrpcCode::DEADLINE_EXCEEDED, false),
            Outcome::Timeout
        );
        for code in [
            GrpcCode::INVALID_ARGUMENT,
            GrpcCode::NOT_FOUND,
            GrpcCode::ALREADY_EXISTS,
            GrpcCode::PERMISSION_DENIED,
            GrpcCode::UNAUTHENTICATED,
            GrpcCode::FAILED_PRECONDITION,
            GrpcCode::OUT_OF_RANGE,
        ] {
            assert_eq!(c.classify_grpc(code, false), Outcome::ClientError, "{code}");
        }
        for code in [
            GrpcCode::RESOURCE_EXHAUSTED,
            GrpcCode::INTERNAL,
            GrpcCode::UNKNOWN,
            GrpcCode::CANCELLED,
            GrpcCode::UNIMPLEMENTED,
        ] {
            assert_eq!(c.classify_grpc(code, false), Outcome::ServerError, "{code}");
        }
    }

    #[test]
    fn counts_sum_every_class_and_completed_leaves_out_dropped() {
        let mut c = ClassCounts::default();
        for o in Outcome::ALL {
            c.add(o);
        }
        c.add(Outcome::Dropped);
        assert_eq!(c.total(), 8);
        assert_eq!(c.completed(), 6);
        assert_eq!(
            serde_json::to_string(&Outcome::ConnectError).unwrap(),
            "\"connect_error\""
        );
    }
}
