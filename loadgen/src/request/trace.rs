//! A correlated run's side of each request: a fresh trace id per arrival in the configured header (W3C
//! `traceparent` by default) and the deadline header from the load's timeout, so that the runner can follow each
//! request to the dependency calls it caused.
//!
//! Not for recording the request (the recorder keeps its trace id with its times) nor for the wire (each
//! protocol puts the headers in its own way).

use std::time::Duration;

use faultline_units::trace::Correlate;

/// What every request of a correlated run carries.
#[derive(Debug, Clone)]
pub(crate) struct Tracing {
    correlate: Correlate,
    /// The high half of every trace id of this process: fresh per run, so runs never share an id.
    nonce: u64,
    /// The load's timeout in whole milliseconds, as the deadline header says it.
    pub(crate) deadline_ms: u64,
}

/// A bijection of `u64` (splitmix64's finaliser): distinct arrivals get distinct, well-spread ids.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Tracing {
    pub(crate) fn new(correlate: Correlate, timeout: Duration) -> Tracing {
        Tracing {
            correlate,
            nonce: rand::random::<u64>() | 1,
            deadline_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The trace id of arrival `index` (unique within the run: arrivals have distinct indices) and the span id of
    /// its request.
    pub(crate) fn ids(&self, index: u64) -> (u128, u64) {
        let low = mix(index ^ self.nonce.rotate_left(17));
        let trace = (u128::from(self.nonce) << 64) | u128::from(low);
        (trace, mix(low) | 1)
    }

    /// The identity header's name.
    pub(crate) fn header(&self) -> &str {
        &self.correlate.header
    }

    /// The deadline header's name.
    pub(crate) fn deadline_header(&self) -> &str {
        &self.correlate.deadline_header
    }

    /// The identity header's value for arrival `index`, and its trace id.
    pub(crate) fn value(&self, index: u64) -> (String, u128) {
        let (trace, span) = self.ids(index);
        (self.correlate.value(trace, span), trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arrival_gets_its_own_trace_id_in_a_valid_traceparent() {
        let t = Tracing::new(Correlate::default(), Duration::from_millis(250));
        let mut seen = std::collections::HashSet::new();
        for index in 0..10_000 {
            let (value, trace) = t.value(index);
            let (parsed, span) = faultline_units::trace::parse_traceparent(value.as_bytes())
                .expect("a valid traceparent");
            assert_eq!(parsed, trace);
            assert_ne!(span, 0);
            assert!(seen.insert(trace), "arrival {index} repeats a trace id");
        }
        assert_eq!(t.deadline_ms, 250);
    }
}
