//! What a caller's request hands on to every dependency call it causes: its W3C trace context (`traceparent`:
//! the same trace id, a new span id per call, so the calls can be joined to the request that caused them) and its
//! deadline (`x-request-timeout`, the remaining budget in whole milliseconds).
//!
//! Not for the OpenTelemetry SDK: the demo records no spans, it only passes the context on, and `traceparent` is
//! four fixed-width hex fields, read with the parser loadgen and faultd share (`faultline_units::trace`) rather
//! than with a tracing stack in the build. Not for enforcing the deadline either: the timeout layer caps each
//! attempt at it, the retry and hedge layers send nothing once it has passed, and the clients write it on the
//! wire.

use std::fmt::Write as _;
use std::time::Duration;

use axum::http::HeaderMap;
use faultline_units::trace;
use tokio::time::Instant;

pub use faultline_units::trace::TRACEPARENT;

/// The deadline header read from the caller and sent to the dependency: the remaining budget in whole
/// milliseconds (what loadgen sends when the load has a `timeout:`).
pub const DEADLINE_HEADER: &str = trace::DEFAULT_DEADLINE_HEADER;

/// A parsed `traceparent`: `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id, shared by every call of one request.
    pub trace_id: u128,
    /// The span id of the sender.
    pub span_id: u64,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Reads a `traceparent` value as loadgen and faultd do (`faultline_units::trace`): versions other than `00`
    /// by their first four fields, as the specification asks of a reader; `ff`, upper-case hex and all-zero ids are
    /// refused.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let (trace_id, span_id) = trace::parse_traceparent(value.as_bytes())?;
        let flags = u8::from_str_radix(value.trim().get(53..55)?, 16).ok()?;
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The context of one call made on this trace's behalf: the same trace id and flags, a new random span id.
    pub fn child(&self) -> TraceParent {
        TraceParent {
            span_id: rand::random::<u64>().max(1),
            ..*self
        }
    }

    /// The header value, version `00`.
    pub fn header(&self) -> String {
        let mut out = String::with_capacity(55);
        let _ = write!(
            out,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        );
        out
    }
}

/// The caller's context, carried by each dependency call of its request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallContext {
    /// The caller's trace context, if it sent a valid one.
    pub trace: Option<TraceParent>,
    /// When the caller stops waiting (its deadline header, counted from the request's arrival); `None` when it
    /// sent none, or with the `no_deadline_propagation` mistake, which ignores it.
    pub deadline: Option<Instant>,
    /// When the attempt under way stops: the earlier of its own timeout and the caller's deadline, set by the
    /// timeout layer and sent to the dependency as the call's deadline.
    pub attempt_deadline: Option<Instant>,
    /// Whether the call's deadline is sent to the dependency (off with `no_deadline_propagation`).
    pub send_deadline: bool,
}

impl CallContext {
    /// The context of a request that arrived at `arrival` with `headers`; `propagate_deadline` is off with the
    /// `no_deadline_propagation` mistake (the deadline is neither honoured nor sent on).
    pub fn from_headers(headers: &HeaderMap, arrival: Instant, propagate_deadline: bool) -> Self {
        let trace = headers
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(TraceParent::parse);
        let budget = headers
            .get(DEADLINE_HEADER)
            .and_then(|v| trace::parse_deadline_ms(v.as_bytes()));
        CallContext {
            trace,
            deadline: budget.filter(|_| propagate_deadline).map(|b| arrival + b),
            attempt_deadline: None,
            send_deadline: propagate_deadline,
        }
    }

    /// The caller's remaining budget at `now` (zero once it has passed), if it gave one.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// Whether the caller has given up by `at`: no call should start then, it would be work for nobody.
    pub fn given_up_by(&self, at: Instant) -> bool {
        self.deadline.is_some_and(|d| at >= d)
    }

    /// The deadline to send with the attempt under way at `now`, if any: what is left of it, rounded down to the
    /// millisecond for the HTTP header so that it never exceeds the caller's remaining budget.
    pub fn call_budget(&self, now: Instant) -> Option<Duration> {
        self.attempt_deadline
            .filter(|_| self.send_deadline)
            .map(|d| d.saturating_duration_since(now))
    }

    /// The `traceparent` for one new call: the caller's trace id with a new span id.
    pub fn child_traceparent(&self) -> Option<String> {
        self.trace.map(|t| t.child().header())
    }
}

/// The deadline header's value for `budget`: whole milliseconds, rounded down.
pub fn deadline_header(budget: Duration) -> String {
    budget.as_millis().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_is_read_and_written_back_unchanged() {
        let t = TraceParent::parse(SAMPLE).unwrap();
        assert_eq!(t.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(t.span_id, 0x00f067aa0ba902b7);
        assert_eq!(t.flags, 1);
        assert_eq!(t.header(), SAMPLE);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        let future = format!("01-{}-later", &SAMPLE[3..]);
        assert!(
            TraceParent::parse(&future).is_some(),
            "a later version keeps its first four fields"
        );
    }

    #[test]
    fn each_child_keeps_the_trace_id_and_gets_a_new_span_id() {
        let t = TraceParent::parse(SAMPLE).unwrap();
        let (a, b) = (t.child(), t.child());
        assert_eq!((a.trace_id, b.trace_id), (t.trace_id, t.trace_id));
        assert_eq!((a.flags, b.flags), (1, 1));
        assert!(a.span_id != t.span_id && a.span_id != b.span_id);
        assert_eq!(TraceParent::parse(&a.header()), Some(a));
    }

    fn headers(deadline_ms: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, HeaderValue::from_static(SAMPLE));
        h.insert(DEADLINE_HEADER, HeaderValue::from_str(deadline_ms).unwrap());
        h
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_from_arrival_and_the_budget_shrinks_as_time_passes() {
        let arrival = Instant::now();
        let c = CallContext::from_headers(&headers("250"), arrival, true);
        assert_eq!(c.deadline, Some(arrival + Duration::from_millis(250)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            c.remaining(Instant::now()),
            Some(Duration::from_millis(150))
        );
        assert!(!c.given_up_by(Instant::now()));
        tokio::time::advance(Duration::from_millis(150)).await;
        assert!(c.given_up_by(Instant::now()));
        assert_eq!(c.remaining(Instant::now()), Some(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn the_sent_budget_is_the_attempts_own_rounded_down_and_none_without_propagation() {
        let now = Instant::now();
        let mut c = CallContext::from_headers(&headers("250"), now, true);
        c.attempt_deadline = Some(now + Duration::from_micros(99_900));
        let budget = c.call_budget(now).unwrap();
        assert_eq!(deadline_header(budget), "99");
        let mut mistaken = CallContext::from_headers(&headers("250"), now, false);
        assert_eq!(mistaken.deadline, None, "the caller's deadline is ignored");
        mistaken.attempt_deadline = Some(now + Duration::from_millis(250));
        assert_eq!(mistaken.call_budget(now), None, "and nothing is sent");
        assert!(
            mistaken.trace.is_some(),
            "the trace id is passed on whatever the mistake"
        );
    }

    #[test]
    fn a_bad_deadline_or_trace_header_is_ignored() {
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, HeaderValue::from_static("garbage"));
        h.insert(DEADLINE_HEADER, HeaderValue::from_static("-5"));
        let c = CallContext::from_headers(&h, Instant::now(), true);
        assert_eq!((c.trace, c.deadline), (None, None));
        assert_eq!(c.child_traceparent(), None);
    }
}
