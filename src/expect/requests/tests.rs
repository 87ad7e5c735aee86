//! The requests family on synthetic joins: each expectation passes, fails and is inconclusive where it must, and
//! its verdict carries the distribution and the worst requests.

use std::sync::Arc;
use std::time::Duration;

use faultd::recorder::{CallEnd, TracedCall};
use loadgen::{Outcome as Class, RequestTrace};

use crate::correlate::tests::{call, request};
use crate::correlate::Join;
use crate::expect::tests::verdict;
use crate::expect::{Outcome, Verdict};
use crate::record::{PhaseSpan, RunRecord};

const TIMEOUT_MS: f64 = 1000.0;

fn s(v: f64) -> Duration {
    Duration::from_secs_f64(v)
}

/// A record of a 30 s run (healthy, brownout, recovered) whose join is `requests` with `calls`.
fn record(requests: &[RequestTrace], calls: &[TracedCall]) -> RunRecord {
    let mut r = RunRecord::empty(Duration::from_millis(100));
    r.duration = s(30.0);
    r.phases = [
        ("healthy", 0.0, 10.0),
        ("brownout", 10.0, 20.0),
        ("recovered", 20.0, 30.0),
    ]
    .iter()
    .map(|(name, start, end)| PhaseSpan {
        name: name.to_string(),
        start: s(*start),
        end: s(*end),
    })
    .collect();
    r.requests = Some(Arc::new(Join::new(
        requests,
        calls,
        Duration::from_secs_f64(TIMEOUT_MS / 1000.0),
    )));
    r
}

/// Request `trace` due at `at` ms (in the brownout) that took `took` ms, whose calls at pricing start at the
/// offsets `starts` (ms from `at`), each held `held` ms and answered.
fn retried(
    trace: u128,
    at: f64,
    took: f64,
    starts: &[f64],
    held: f64,
) -> (RequestTrace, Vec<TracedCall>) {
    let calls = starts
        .iter()
        .map(|o| {
            call(
                "pricing",
                Some(trace),
                at + o,
                at + o + held,
                CallEnd::Answered,
                Some((TIMEOUT_MS - o).max(0.0)),
            )
        })
        .collect();
    (request(trace, at, took, Class::Ok), calls)
}

fn run(cases: Vec<(RequestTrace, Vec<TracedCall>)>) -> RunRecord {
    let requests: Vec<RequestTrace> = cases.iter().map(|c| c.0).collect();
    let calls: Vec<TracedCall> = cases.into_iter().flat_map(|c| c.1).collect();
    record(&requests, &calls)
}

fn judged(spec: &str, r: &RunRecord) -> Verdict {
    verdict(spec, r)
}

fn assert_outcome(v: &Verdict, o: Outcome) {
    assert_eq!(v.outcome(), o, "{}", v.sentence);
}

/// Requests whose retries wait `spacing(k)` ms after the previous call (held 10 ms) for their k-th retry.
fn backoff(n: u128, retries: usize, spacing: impl Fn(u128, usize) -> f64) -> RunRecord {
    run((1..=n)
        .map(|t| {
            let mut starts = vec![0.0];
            for k in 1..=retries {
                let last = *starts.last().unwrap();
                starts.push(last + 10.0 + spacing(t, k));
            }
            retried(t, 10_000.0 + t as f64 * 20.0, 900.0, &starts, 10.0)
        })
        .collect())
}

#[test]
fn retries_per_request_count_every_call_after_the_first_and_name_the_worst_request() {
    let r = backoff(20, 2, |_, _| 50.0);
    let v = judged(
        "{ dependency: pricing, retries_per_request_at_most: 2, during: brownout }",
        &r,
    );
    assert_outcome(&v, Outcome::Pass);
    let v = judged(
        "{ dependency: pricing, retries_per_request_at_most: 1 }",
        &r,
    );
    assert_outcome(&v, Outcome::Fail);
    assert_eq!(v.measured, Some(2.0));
    let e = v.per_request.unwrap();
    assert_eq!((e.requests, e.p50, e.max), (20, 2.0, 2.0));
    assert_eq!(e.worst.len(), 5);
    assert_eq!(e.worst[0].trace_id.len(), 32);
}

#[test]
fn retry_spacing_fails_on_retries_at_once_and_passes_with_backoff() {
    let v = judged(
        "{ dependency: pricing, retry_spacing_at_least: 40ms }",
        &backoff(10, 2, |_, k| 50.0 * k as f64),
    );
    assert_outcome(&v, Outcome::Pass);
    assert_eq!(v.measured, Some(50.0));
    let v = judged(
        "{ dependency: pricing, retry_spacing_at_least: 40ms }",
        &backoff(10, 2, |t, _| if t == 7 { 2.0 } else { 50.0 }),
    );
    assert_outcome(&v, Outcome::Fail);
    let e = v.per_request.unwrap();
    assert_eq!(e.worst[0].trace_id, format!("{:032x}", 7));
    assert_eq!(e.worst[0].figure, 2.0);
    // No request retried: nothing to judge.
    let v = judged(
        "{ dependency: pricing, retry_spacing_at_least: 40ms }",
        &backoff(10, 0, |_, _| 0.0),
    );
    assert_outcome(&v, Outcome::Inconclusive);
    assert!(v.sentence.contains("no request retried"), "{}", v.sentence);
}

#[test]
fn retry_jitter_sees_lockstep_even_under_exponential_backoff() {
    // Exponential backoff without jitter: every k-th retry waits exactly 100 * 2^k ms.
    let lockstep = backoff(30, 3, |_, k| 100.0 * 2f64.powi(k as i32));
    let v = judged(
        "{ dependency: pricing, retry_jitter_at_least: 20% }",
        &lockstep,
    );
    assert_outcome(&v, Outcome::Fail);
    assert!(v.measured.unwrap() < 0.01, "{}", v.sentence);
    // Full jitter: uniform in [0, 100 * 2^k), spread by the trace id.
    let jittered = backoff(30, 3, |t, k| {
        let u = ((t * 37 + k as u128 * 11) % 30) as f64 / 30.0;
        u * 100.0 * 2f64.powi(k as i32)
    });
    let v = judged(
        "{ dependency: pricing, retry_jitter_at_least: 20% }",
        &jittered,
    );
    assert_outcome(&v, Outcome::Pass);
    // A single retry cannot spread.
    let v = judged(
        "{ dependency: pricing, retry_jitter_at_least: 20% }",
        &backoff(1, 1, |_, _| 50.0),
    );
    assert_outcome(&v, Outcome::Inconclusive);
}

#[test]
fn calls_after_give_up_count_calls_that_started_after_the_request_ended() {
    // Request 1 timed out at 1000 ms; its third call starts at 1100 ms.
    let mut late = retried(1, 10_000.0, 1000.0, &[0.0, 500.0, 1100.0], 50.0);
    late.0.class = Class::Timeout;
    let fine = retried(2, 10_500.0, 300.0, &[0.0, 100.0], 50.0);
    let r = run(vec![late, fine]);
    let v = judged(
        "{ dependency: pricing, calls_after_give_up_at_most: 0 }",
        &r,
    );
    assert_outcome(&v, Outcome::Fail);
    assert_eq!(v.measured, Some(1.0));
    assert_eq!(
        v.per_request.unwrap().worst[0].trace_id,
        format!("{:032x}", 1)
    );
    let v = judged(
        "{ dependency: pricing, calls_after_give_up_at_most: 1 }",
        &r,
    );
    assert_outcome(&v, Outcome::Pass);
}

#[test]
fn wasted_work_is_the_share_of_call_time_after_the_caller_left() {
    // The caller leaves at 250 ms; the call runs to 2000 ms: 1750 of 2000 ms wasted.
    let (req, mut calls) = retried(1, 10_000.0, 250.0, &[0.0], 2000.0);
    calls[0].end = CallEnd::Answered;
    let (ok, ok_calls) = retried(2, 11_000.0, 300.0, &[0.0], 200.0);
    let r = run(vec![(req, calls), (ok, ok_calls)]);
    let v = judged("{ dependency: pricing, wasted_work_below: 50% }", &r);
    assert_outcome(&v, Outcome::Fail);
    assert!(
        (v.measured.unwrap() - 1750.0 / 2200.0).abs() < 1e-9,
        "{}",
        v.sentence
    );
    let v = judged("{ dependency: pricing, wasted_work_below: 90% }", &r);
    assert_outcome(&v, Outcome::Pass);
}

#[test]
fn deadline_propagated_fails_on_a_missing_deadline_or_one_over_the_budget_left() {
    // Each call carries the budget left (1000 ms minus its offset): propagated.
    let good = backoff(5, 1, |_, _| 100.0);
    let v = judged("{ dependency: pricing, deadline_propagated: true }", &good);
    assert_outcome(&v, Outcome::Pass);
    // One call with no deadline, one with the whole 1000 ms again after 600 ms gone.
    let (a, mut a_calls) = retried(1, 10_000.0, 900.0, &[0.0], 10.0);
    a_calls[0].deadline = None;
    let (b, mut b_calls) = retried(2, 10_000.0, 900.0, &[600.0], 10.0);
    b_calls[0].deadline = Some(faultline_units::Dur(Duration::from_millis(1000)));
    let v = judged(
        "{ dependency: pricing, deadline_propagated: true }",
        &run(vec![(a, a_calls), (b, b_calls)]),
    );
    assert_outcome(&v, Outcome::Fail);
    assert_eq!(v.measured, Some(2.0));
    assert!(
        v.sentence
            .contains("1 of 2 calls carried no deadline and 1 one over"),
        "{}",
        v.sentence
    );
    assert!(
        resolve_error("{ dependency: pricing, deadline_propagated: false }")
            .contains("takes `true`")
    );
    // loadgen sent it 30 ms late and its timer starts there: a deadline of 985 ms at 40 ms from the due time is
    // within the 990 ms left of its budget, though 55 ms over what was left from the due time.
    let (late, mut late_calls) = retried(3, 10_000.0, 900.0, &[40.0], 10.0);
    let late = RequestTrace {
        sent: Some(faultline_units::Dur(s(10.030))),
        ..late
    };
    late_calls[0].deadline = Some(faultline_units::Dur(Duration::from_millis(985)));
    let v = judged(
        "{ dependency: pricing, deadline_propagated: true }",
        &run(vec![(late, late_calls)]),
    );
    assert_outcome(&v, Outcome::Pass);
}

/// Request `trace` with a first call from 0 to `first_end` and a hedge from `hedge_at` to `hedge_end` (ms from
/// 10 s); the first one answers, the hedge is abandoned.
fn hedged(
    trace: u128,
    first_end: f64,
    hedge_at: f64,
    hedge_end: f64,
) -> (RequestTrace, Vec<TracedCall>) {
    let at = 10_000.0 + trace as f64 * 10.0;
    let calls = vec![
        call(
            "pricing",
            Some(trace),
            at,
            at + first_end,
            CallEnd::Answered,
            None,
        ),
        call(
            "pricing",
            Some(trace),
            at + hedge_at,
            at + hedge_end,
            CallEnd::Abandoned,
            None,
        ),
    ];
    (request(trace, at, first_end + 1.0, Class::Ok), calls)
}

#[test]
fn hedges_per_request_count_calls_in_flight_at_once() {
    let r = run(vec![
        hedged(1, 300.0, 100.0, 310.0),
        retried(2, 12_000.0, 500.0, &[0.0, 200.0], 50.0),
    ]);
    let v = judged("{ dependency: pricing, hedges_per_request_at_most: 1 }", &r);
    assert_outcome(&v, Outcome::Pass);
    let v = judged("{ dependency: pricing, hedges_per_request_at_most: 0 }", &r);
    assert_outcome(&v, Outcome::Fail);
    let e = v.per_request.unwrap();
    assert_eq!((e.requests, e.max, e.p50), (2, 1.0, 0.0));
}

#[test]
fn a_losing_hedge_must_end_soon_after_the_winner_answers() {
    let cancelled = run(vec![
        hedged(1, 300.0, 100.0, 302.0),
        hedged(2, 250.0, 100.0, 253.0),
    ]);
    let v = judged(
        "{ dependency: pricing, hedges_cancelled_within: 10ms }",
        &cancelled,
    );
    assert_outcome(&v, Outcome::Pass);
    let uncancelled = run(vec![
        hedged(1, 300.0, 100.0, 2100.0),
        hedged(2, 250.0, 100.0, 253.0),
    ]);
    let v = judged(
        "{ dependency: pricing, hedges_cancelled_within: 10ms }",
        &uncancelled,
    );
    assert_outcome(&v, Outcome::Fail);
    assert_eq!(v.measured, Some(1800.0));
    // No hedge at all: nothing to judge.
    let v = judged(
        "{ dependency: pricing, hedges_cancelled_within: 10ms }",
        &backoff(3, 1, |_, _| 50.0),
    );
    assert_outcome(&v, Outcome::Inconclusive);
}

#[test]
fn every_expectation_is_inconclusive_with_the_reason_when_no_call_carries_a_trace_id_of_the_run() {
    let requests: Vec<RequestTrace> = (1..=10u128)
        .map(|t| request(t, 10_000.0 + t as f64, 50.0, Class::Ok))
        .collect();
    let calls: Vec<TracedCall> = (1..=10)
        .map(|t| {
            call(
                "pricing",
                None,
                10_000.0 + t as f64,
                10_020.0 + t as f64,
                CallEnd::Answered,
                None,
            )
        })
        .collect();
    let r = record(&requests, &calls);
    for check in [
        "retries_per_request_at_most: 1",
        "retry_spacing_at_least: 10ms",
        "retry_jitter_at_least: 10%",
        "calls_after_give_up_at_most: 0",
        "wasted_work_below: 10%",
        "deadline_propagated: true",
        "hedges_per_request_at_most: 0",
        "hedges_cancelled_within: 10ms",
    ] {
        let v = judged(&format!("{{ dependency: pricing, {check} }}"), &r);
        assert_outcome(&v, Outcome::Inconclusive);
        assert!(
            v.sentence.contains("10 calls without a trace id")
                && v.sentence.contains("does not propagate"),
            "{check}: {}",
            v.sentence
        );
    }
}

#[test]
fn a_requests_expectation_needs_a_route_of_the_scenario_and_takes_no_stray_field() {
    assert!(
        resolve_error("{ dependency: nowhere, retries_per_request_at_most: 1 }")
            .contains("nowhere")
    );
    assert!(
        resolve_error("{ dependency: pricing, retries_per_request_at_most: 1, over: 5s }")
            .contains("over")
    );
    assert!(resolve_error(
        "{ dependency: pricing, retries_per_request_at_most: 1, max_in_flight_below: 5 }"
    )
    .contains("one check"));
}

fn resolve_error(spec: &str) -> String {
    let spec: crate::expect::ExpectationSpec = serde_saphyr::from_str(spec).unwrap();
    let phases = vec!["brownout".to_string()];
    let routes = vec!["pricing".to_string()];
    spec.resolve(&crate::expect::Names {
        phases: &phases,
        breakers: &[],
        routes: &routes,
        breaker_routes: &|_| None,
        tls: false,
        metrics: &[],
        instances: &|_| 3,
        dns_names: &[],
    })
    .unwrap_err()
}
