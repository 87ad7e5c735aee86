//! The join on synthetic recordings: every call with a trace id of the run is attributed to exactly one request,
//! the others are counted apart, and the files hold one line each.

use std::time::Duration;

use faultd::recorder::{CallEnd, TracedCall};
use faultline_units::Dur;
use loadgen::{Outcome, RequestTrace};

use super::files::{calls_csv, requests_csv};
use super::Join;

fn ms(v: f64) -> Dur {
    Dur(Duration::from_secs_f64(v / 1000.0))
}

/// A request due at `at` ms, sent then, that ended `took` ms later.
pub(crate) fn request(trace: u128, at: f64, took: f64, class: Outcome) -> RequestTrace {
    RequestTrace {
        trace,
        intended: ms(at),
        sent: Some(ms(at)),
        ended: ms(at + took),
        class,
    }
}

/// A call on `route` from `at` ms to `end` ms that carried `trace` and a deadline of `deadline` ms.
pub(crate) fn call(
    route: &str,
    trace: Option<u128>,
    at: f64,
    end: f64,
    how: CallEnd,
    deadline: Option<f64>,
) -> TracedCall {
    TracedCall {
        route: route.into(),
        trace,
        parent: trace.map(|_| 7),
        arrival: ms(at),
        ended: ms(end),
        end: how,
        status: (how == CallEnd::Answered).then_some(200),
        grpc_status: None,
        deadline: deadline.map(ms),
    }
}

#[test]
fn every_traced_call_of_the_run_goes_to_exactly_one_request_and_the_rest_are_counted_apart() {
    let requests: Vec<RequestTrace> = (1..=50u128)
        .map(|t| request(t, t as f64 * 10.0, 30.0, Outcome::Ok))
        .collect();
    let mut calls = Vec::new();
    for t in 1..=50u128 {
        // Request t caused t % 4 calls, out of order.
        for k in (0..t % 4).rev() {
            let at = t as f64 * 10.0 + k as f64 * 5.0;
            calls.push(call(
                "pricing",
                Some(t),
                at,
                at + 2.0,
                CallEnd::Answered,
                None,
            ));
        }
    }
    let caused = calls.len() as u64;
    calls.push(call("pricing", None, 5.0, 6.0, CallEnd::Answered, None));
    calls.push(call(
        "pricing",
        Some(999),
        5.0,
        6.0,
        CallEnd::Answered,
        None,
    ));
    let join = Join::new(&requests, &calls, Duration::from_secs(1));
    assert_eq!(join.requests.len(), requests.len());
    assert_eq!(join.attributed(), caused);
    assert_eq!((join.untraced, join.foreign), (1, 1));
    assert_eq!(join.attributed() + join.untraced + join.foreign, join.calls);
    for f in &join.requests {
        assert_eq!(f.calls.len() as u128, f.request.trace % 4);
        assert!(f.calls.iter().all(|c| c.trace == Some(f.request.trace)));
        assert!(f.calls.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
    assert_eq!(join.busiest(Some("pricing"), 3)[0].calls.len(), 3);
    assert_eq!(requests_csv(&join).lines().count(), 1 + requests.len());
    assert_eq!(calls_csv(&join).lines().count(), 1 + calls.len());
}
