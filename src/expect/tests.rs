//! Expectations evaluated on synthetic recordings: a 30 s run at 100 ms buckets, phases healthy (0-10 s),
//! brownout (10-20 s), recovered (20-30 s), 50 SUT requests and (when closed) 50 dependency calls per bucket.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::*;
use crate::breaker::{BreakerState, BreakerState::*, BreakerTimeline, Source};
use crate::record::{ByClass, DependencyBucket, OutcomeClass, PhaseSpan, RunRecord, SutBucket};

const BUCKETS: usize = 300;

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

pub(super) fn phases() -> Vec<PhaseSpan> {
    vec![
        PhaseSpan {
            name: "healthy".into(),
            start: s(0.0),
            end: s(10.0),
        },
        PhaseSpan {
            name: "brownout".into(),
            start: s(10.0),
            end: s(20.0),
        },
        PhaseSpan {
            name: "recovered".into(),
            start: s(20.0),
            end: s(30.0),
        },
    ]
}

/// A record whose breaker `pricing` follows `states` (observed by webhook, exact), with dependency traffic that
/// follows the breaker: full when closed, none when open, one probe at the start of each half-open window.
fn record_with(
    states: &[(f64, BreakerState)],
    in_flight: impl Fn(usize) -> u64,
    latency_ms: impl Fn(usize) -> u64,
) -> RunRecord {
    let obs: Vec<(Duration, BreakerState)> = states.iter().map(|&(t, st)| (s(t), st)).collect();
    let timeline = BreakerTimeline::from_observations(&obs, Source::Webhook, Duration::ZERO);
    let bucket = Duration::from_millis(100);
    let mut dependency = Vec::new();
    let mut sut = Vec::new();
    let mut hist = Vec::new();
    for i in 0..BUCKETS {
        let t = bucket * i as u32;
        let state = timeline.state_at(t);
        let just_half_open =
            state == HalfOpen && timeline.state_at(t.saturating_sub(bucket)) != HalfOpen;
        let arrivals = match state {
            Closed => 50,
            Open => 0,
            HalfOpen if just_half_open => 1,
            HalfOpen => 0,
        };
        dependency.push(DependencyBucket {
            arrivals,
            in_flight_max: in_flight(i),
            first_arrivals: Vec::new(),
            ..Default::default()
        });
        let mut completed = ByClass::default();
        completed.add(
            if state == Open {
                OutcomeClass::Fallback
            } else {
                OutcomeClass::Ok
            },
            50,
        );
        sut.push(SutBucket {
            offered: 50,
            completed,
            in_flight: 3,
            ..Default::default()
        });
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record_n(latency_ms(i) * 1_000_000, 50).unwrap();
        hist.push(h);
    }
    RunRecord {
        bucket,
        duration: s(30.0),
        phases: phases(),
        sut,
        sut_latency: hist.into(),
        dependency: BTreeMap::from([("pricing".to_string(), dependency)]),
        instances: BTreeMap::new(),
        dependency_replicas: 1,
        breakers: BTreeMap::from([("pricing".to_string(), timeline)]),
        evidence: BTreeMap::new(),
        handshakes: None,
        load_tls: None,
        dns: None,
        connect_errors: BTreeMap::new(),
        unmatched: 0,
        unmatched_paths: Vec::new(),
        sut_metrics: BTreeMap::new(),
        sut_class_latency: BTreeMap::new(),
        requests: None,
        entries: BTreeMap::new(),
        redis: BTreeMap::new(),
        postgres: BTreeMap::new(),
    }
}

fn healthy_record(states: &[(f64, BreakerState)]) -> RunRecord {
    record_with(states, |_| 5, |_| 40)
}

fn names() -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        vec!["healthy".into(), "brownout".into(), "recovered".into()],
        vec!["pricing".into()],
        vec!["pricing".into(), "reviews".into()],
    )
}

pub(super) fn resolve(spec: &str) -> Result<Expectation, String> {
    let spec: ExpectationSpec = serde_saphyr::from_str(spec).map_err(|e| e.to_string())?;
    let (phases, breakers, routes) = names();
    let routes_of = |b: &str| (b == "pricing").then(|| "pricing".to_string());
    let dns = ["Pricing.Internal.".to_string()];
    spec.resolve(&Names {
        dns_names: &dns,
        phases: &phases,
        breakers: &breakers,
        routes: &routes,
        breaker_routes: &routes_of,
        tls: true,
        metrics: &[],
        instances: &|r| if r == "pricing" { 3 } else { 0 },
    })
}

#[test]
fn an_instance_expectation_names_an_instance_its_route_has() {
    let share = |route: &str, k: u32| {
        format!("{{ dependency: {route}, instance: {k}, ejected_within: 2s, after: brownout, share_below: 5% }}")
    };
    assert!(resolve(&share("pricing", 3)).is_ok());
    let over = resolve(&share("pricing", 4)).unwrap_err();
    assert!(
        over.contains("`instance: 4`: route pricing has 3 instances, numbered from 1"),
        "{over}"
    );
    let none = resolve(&share("reviews", 1)).unwrap_err();
    assert!(
        none.contains("`dependency: reviews` has no instances"),
        "{none}"
    );
    let healthy = "{ dependency: pricing, instance: 9, healthy_in_flight_below: 40 }";
    assert!(resolve(healthy).unwrap_err().contains("`instance: 9`"));
}

pub(super) fn verdict(spec: &str, record: &RunRecord) -> Verdict {
    resolve(spec).unwrap().evaluate(record)
}

#[test]
fn opens_within_passes_when_the_breaker_opens_in_time_and_says_how_late() {
    let r = healthy_record(&[(15.3, Open)]);
    let v = verdict(
        "{ breaker: pricing, opens_within: 6s, after: brownout }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
    assert!((v.measured.unwrap() - 5.3).abs() < 1e-6);
    assert!(
        v.sentence
            .starts_with("breaker pricing opened 5.3 s after brownout began"),
        "{}",
        v.sentence
    );
    assert!(
        v.sentence.ends_with("expected within 6s: PASS"),
        "{}",
        v.sentence
    );
}

#[test]
fn opens_within_fails_when_the_breaker_opens_too_late() {
    let r = healthy_record(&[(17.3, Open)]);
    let v = verdict(
        "{ breaker: pricing, opens_within: 5s, after: brownout }",
        &r,
    );
    assert!(!v.passed);
    assert!(
        v.sentence.contains("opened 7.3 s after brownout began"),
        "{}",
        v.sentence
    );
    assert!(
        v.sentence.ends_with("expected within 5s: FAIL"),
        "{}",
        v.sentence
    );
}

#[test]
fn opens_within_fails_with_no_transition_at_all() {
    let r = healthy_record(&[]);
    let v = verdict(
        "{ breaker: pricing, opens_within: 6s, after: brownout }",
        &r,
    );
    assert!(!v.passed);
    assert!(
        v.sentence.contains("never opened after brownout began"),
        "{}",
        v.sentence
    );
    assert_eq!(v.measured, None);
}

#[test]
fn a_breaker_already_open_before_the_fault_does_not_count_as_opening_for_it() {
    let r = healthy_record(&[(3.0, Open)]);
    let v = verdict(
        "{ breaker: pricing, opens_within: 6s, after: brownout }",
        &r,
    );
    assert!(!v.passed);
    assert!(
        v.sentence.contains("already open when brownout began"),
        "{}",
        v.sentence
    );
    assert!(v.sentence.contains("opened at 3.0 s"), "{}", v.sentence);
}

#[test]
fn a_breaker_that_opens_closes_and_reopens_is_judged_on_each_count() {
    let r = healthy_record(&[
        (12.0, Open),
        (15.0, HalfOpen),
        (15.05, Closed),
        (16.0, Open),
        (19.0, HalfOpen),
        (21.0, Closed),
    ]);
    let opens = verdict(
        "{ breaker: pricing, opens_within: 3s, after: brownout }",
        &r,
    );
    assert!(opens.passed, "{}", opens.sentence);
    let closes = verdict(
        "{ breaker: pricing, closes_within: 2s, after: recovered }",
        &r,
    );
    assert!(closes.passed, "{}", closes.sentence);
    assert!(
        closes
            .sentence
            .contains("closed 1.0 s after recovered began"),
        "{}",
        closes.sentence
    );
    let flapping = verdict(
        "{ breaker: pricing, transitions_at_most: 3, during: brownout }",
        &r,
    );
    assert!(!flapping.passed);
    assert!(
        flapping
            .sentence
            .contains("changed state 5 times during brownout (webhook event); expected at most 3"),
        "{}",
        flapping.sentence
    );
    let whole = verdict("{ breaker: pricing, transitions_at_most: 6 }", &r);
    assert!(whole.passed, "{}", whole.sentence);
    assert!(
        whole.sentence.contains("over the run"),
        "{}",
        whole.sentence
    );
}

#[test]
fn closes_within_passes_when_already_closed_and_fails_when_stuck_open() {
    let never_opened = healthy_record(&[]);
    assert!(
        verdict(
            "{ breaker: pricing, closes_within: 5s, after: recovered }",
            &never_opened
        )
        .passed
    );
    let stuck = healthy_record(&[(12.0, Open)]);
    let v = verdict(
        "{ breaker: pricing, closes_within: 5s, after: recovered }",
        &stuck,
    );
    assert!(!v.passed);
    assert!(
        v.sentence.contains("never closed after recovered began"),
        "{}",
        v.sentence
    );
}

#[test]
fn gaps_in_scraping_show_as_the_resolution_of_the_transition() {
    let obs = [
        (s(9.5), Closed),
        (s(10.0), Closed),
        (s(14.0), Open),
        (s(14.5), Open),
    ];
    let mut r = healthy_record(&[]);
    r.breakers.insert(
        "pricing".into(),
        BreakerTimeline::from_observations(&obs, Source::Metrics, s(0.5)),
    );
    let v = verdict(
        "{ breaker: pricing, opens_within: 5s, after: brownout }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("opened 4.0 s after brownout began (metrics scrape, ±4.0 s)"),
        "{}",
        v.sentence
    );
    assert_eq!(r.breakers["pricing"].transitions[0].resolution, s(4.0));
}

#[test]
fn stays_closed_passes_on_a_quiet_breaker_and_names_the_moment_it_opened_otherwise() {
    let quiet = healthy_record(&[]);
    let v = verdict(
        "{ breaker: pricing, stays_closed: true, during: brownout }",
        &quiet,
    );
    assert!(v.passed, "{}", v.sentence);
    let tripped = healthy_record(&[(12.5, Open)]);
    let v = verdict(
        "{ breaker: pricing, stays_closed: true, during: brownout }",
        &tripped,
    );
    assert!(!v.passed);
    assert!(
        v.sentence
            .contains("was open at 12.5 s, 2.5 s into brownout"),
        "{}",
        v.sentence
    );
}

#[test]
fn probes_per_half_open_window_count_calls_at_the_dependency() {
    let r = healthy_record(&[
        (12.0, Open),
        (15.0, HalfOpen),
        (15.3, Open),
        (18.0, HalfOpen),
        (18.3, Closed),
    ]);
    let v = verdict("{ breaker: pricing, probes_per_half_open_at_most: 1 }", &r);
    assert!(v.passed, "{}", v.sentence);
    assert!(v.sentence.contains("2 half-open rounds"), "{}", v.sentence);

    // A stampede: in the half-open window every call goes through.
    let mut stampede = r.clone();
    let series = stampede.dependency.get_mut("pricing").unwrap();
    for b in &mut series[150..153] {
        b.arrivals = 50;
    }
    let v = verdict(
        "{ breaker: pricing, probes_per_half_open_at_most: 1 }",
        &stampede,
    );
    assert!(!v.passed);
    assert!(
        v.sentence.contains("at most 150 calls reached pricing"),
        "{}",
        v.sentence
    );
}

#[test]
fn probes_cannot_be_counted_when_the_breaker_never_opened() {
    let v = verdict(
        "{ breaker: pricing, probes_per_half_open_at_most: 1 }",
        &healthy_record(&[]),
    );
    assert!(v.inconclusive(), "{}", v.sentence);
    assert!(v.sentence.contains("never left closed"), "{}", v.sentence);
}

#[test]
fn max_in_flight_reports_the_peak_and_when() {
    let r = record_with(&[], peak(123, 200, 25), |_| 40);
    let v = verdict("{ dependency: pricing, max_in_flight_below: 200 }", &r);
    assert!(!v.passed);
    assert_eq!(
        v.sentence,
        "calls in flight at pricing peaked at 200 at 12.3 s over the run; expected below 200: FAIL"
    );
    let at_most = verdict("{ dependency: pricing, max_in_flight_at_most: 200 }", &r);
    assert!(at_most.passed, "{}", at_most.sentence);
    let healthy_only = verdict(
        "{ dependency: pricing, max_in_flight_below: 200, during: healthy }",
        &r,
    );
    assert!(healthy_only.passed);
    assert!(
        healthy_only.sentence.contains("peaked at 25"),
        "{}",
        healthy_only.sentence
    );
}

/// A record of a dependency served by `replicas` faultd replicas: per bucket, `sum` is the sum of their own peaks
/// (the recorded maximum, an upper bound) and `busiest` the most one replica held alone (a lower bound).
fn replicated_record(
    replicas: u32,
    sum: impl Fn(usize) -> u64,
    busiest: impl Fn(usize) -> u64,
) -> RunRecord {
    let mut r = record_with(&[], &sum, |_| 40);
    r.dependency_replicas = replicas;
    for (i, b) in r
        .dependency
        .get_mut("pricing")
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        b.in_flight_max_at_least = Some(busiest(i));
    }
    r
}

/// A series with `value` in bucket `at` and `rest` everywhere else.
fn peak(at: usize, value: u64, rest: u64) -> impl Fn(usize) -> u64 {
    move |i| if i == at { value } else { rest }
}

#[test]
fn a_sum_of_replica_peaks_under_the_pool_passes_and_reads_as_an_upper_bound() {
    let r = replicated_record(2, peak(32, 137, 40), peak(32, 70, 20));
    let v = verdict("{ dependency: pricing, max_in_flight_below: 200 }", &r);
    assert_eq!(v.outcome(), Outcome::Pass);
    assert_eq!(
        v.sentence,
        "calls in flight at pricing peaked at most at 137 at 3.2 s (sum of 2 replicas' peaks, an upper bound) over the run; expected below 200: PASS"
    );
    assert_eq!(v.measured, Some(137.0));
    // At the bound, "at or under" holds.
    let at_most = verdict("{ dependency: pricing, max_in_flight_at_most: 137 }", &r);
    assert_eq!(at_most.outcome(), Outcome::Pass, "{}", at_most.sentence);
}

#[test]
fn one_replica_over_the_pool_alone_fails_whatever_the_others_did() {
    let r = replicated_record(3, peak(150, 400, 60), peak(150, 210, 20));
    let v = verdict("{ dependency: pricing, max_in_flight_below: 200 }", &r);
    assert_eq!(v.outcome(), Outcome::Fail);
    assert_eq!(
        v.sentence,
        "calls in flight at pricing peaked at 210 at one replica alone at 15.0 s (the sum of 3 replicas' peaks is 400) over the run; expected below 200: FAIL"
    );
    assert_eq!(v.measured, Some(210.0), "the certain figure");
    // A replica exactly at the bound fails "below" and is undecided for "at or under".
    let r = replicated_record(2, |_| 300, |_| 200);
    let below = verdict("{ dependency: pricing, max_in_flight_below: 200 }", &r);
    assert_eq!(below.outcome(), Outcome::Fail, "{}", below.sentence);
    let at_most = verdict("{ dependency: pricing, max_in_flight_at_most: 200 }", &r);
    assert_eq!(
        at_most.outcome(),
        Outcome::Inconclusive,
        "{}",
        at_most.sentence
    );
}

#[test]
fn a_sum_over_the_pool_with_every_replica_under_it_is_inconclusive() {
    let r = replicated_record(2, peak(123, 231, 50), peak(123, 120, 25));
    let v = verdict("{ dependency: pricing, max_in_flight_below: 200 }", &r);
    assert_eq!(v.outcome(), Outcome::Inconclusive);
    assert!(!v.passed && !v.failed());
    assert_eq!(
        v.sentence,
        "calls in flight at pricing peaked at most at 231 at 12.3 s (sum of 2 replicas' peaks, an upper bound) and at least at 120 (the busiest replica alone) over the run; expected below 200, which lies between the two: the replicas' peaks may or may not have coincided: INCONCLUSIVE"
    );
    assert_eq!(v.measured, None);
    assert_eq!(v.bound, Some(200.0));
    // Over a phase whose sums stay under the pool, the same record passes.
    let healthy = verdict(
        "{ dependency: pricing, max_in_flight_below: 200, during: healthy }",
        &r,
    );
    assert_eq!(healthy.outcome(), Outcome::Pass, "{}", healthy.sentence);
}

#[test]
fn while_the_run_goes_on_an_overrun_at_one_replica_is_decided_and_an_upper_bound_is_not() {
    let spec = "{ dependency: pricing, max_in_flight_below: 200, during: healthy }";
    let e = resolve(spec).unwrap();
    // Healthy (0-10 s) is over by 15 s: a sum over the pool with no replica over it stays undecided, since an
    // inconclusive verdict waits for the end of the run.
    let undecided = replicated_record(2, peak(50, 231, 50), |_| 120);
    assert_eq!(e.decide(&as_of(&undecided, 15.0)), None);
    assert_eq!(e.evaluate(&undecided).outcome(), Outcome::Inconclusive);
    // One replica over the pool is a failure as soon as it is recorded, before the phase ends.
    let overrun = replicated_record(2, peak(50, 400, 50), peak(50, 250, 25));
    let v = e.decide(&as_of(&overrun, 6.0)).expect("decided");
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
}

#[test]
fn the_dependency_rate_while_open_skips_the_first_bucket_and_fails_a_leaky_breaker() {
    let r = healthy_record(&[(12.0, Open), (22.0, Closed)]);
    let v = verdict(
        "{ dependency: pricing, rate_while_open_below: 1/s, while_open: pricing }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence.contains("received 0 calls in 9.9 s"),
        "{}",
        v.sentence
    );
    let mut leaky = r.clone();
    for b in &mut leaky.dependency.get_mut("pricing").unwrap()[130..200] {
        b.arrivals = 2;
    }
    let v = verdict(
        "{ dependency: pricing, rate_while_open_below: 5/s, while_open: true }",
        &leaky,
    );
    assert!(!v.passed, "{}", v.sentence);
    assert!((v.measured.unwrap() - 140.0 / 9.9).abs() < 0.01);
}

#[test]
fn amplification_is_dependency_calls_per_sut_request() {
    let mut r = healthy_record(&[]);
    for b in &mut r.dependency.get_mut("pricing").unwrap()[100..200] {
        b.arrivals = 150;
    }
    let v = verdict(
        "{ dependency: pricing, amplification_at_most: 1.1, during: brownout }",
        &r,
    );
    assert!(!v.passed);
    assert!(v.sentence.contains("(3 per request)"), "{}", v.sentence);
    let v = verdict(
        "{ dependency: pricing, amplification_at_most: 1.1, during: healthy }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
}

/// The healthy record over TLS: one resumed handshake per SUT request (a dependency that closes every connection),
/// and in the brownout `per_request` expired handshakes per request from 10 s to 11 s, none after (the breaker
/// open).
fn tls_record(per_request: u64) -> RunRecord {
    let mut r = healthy_record(&[]);
    let series = (0..BUCKETS)
        .map(|i| {
            let outcomes = if i < 100 {
                BTreeMap::from([("resumed".to_string(), 50)])
            } else if i < 110 {
                BTreeMap::from([("expired".to_string(), 50 * per_request)])
            } else {
                BTreeMap::new()
            };
            crate::record::HandshakeBucket {
                outcomes,
                delayed: 0,
            }
        })
        .collect();
    r.handshakes = Some(series);
    r
}

#[test]
fn handshakes_per_request_count_every_attempt_at_the_listener_against_requests_sent() {
    let v = verdict(
        "{ dependency: pricing, handshakes_per_request_at_most: 1.2, during: healthy }",
        &tls_record(1),
    );
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(
        v.sentence,
        "pricing's TLS listener took 5000 handshake attempts for 5000 SUT requests during healthy (1 per request); \
         expected at most 1.2: PASS"
    );
    // Over the whole brownout, six attempts per request for one second are 0.6 per request: a phase-long ratio
    // hides the storm that the breaker cut short.
    let v = verdict(
        "{ dependency: pricing, handshakes_per_request_at_most: 1.2, during: brownout }",
        &tls_record(6),
    );
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(v.measured, Some(0.6));
}

#[test]
fn handshakes_per_request_over_windows_fail_on_the_worst_second_and_name_it() {
    let spec =
        "{ dependency: pricing, handshakes_per_request_at_most: 1.2, during: brownout, over: 1s }";
    let v = verdict(spec, &tls_record(6));
    assert!(!v.passed, "{}", v.sentence);
    assert_eq!(v.measured, Some(6.0));
    assert!(
        v.sentence.contains("took 3000 handshake attempts for 500 SUT requests in the worst 1s window during brownout, 10.0-11.0 s (6 per request); expected at most 1.2 in every 1s window"),
        "{}",
        v.sentence
    );
    let v = verdict(spec, &tls_record(1));
    assert!(v.passed, "{}", v.sentence);
}

#[test]
fn handshakes_per_request_fail_when_the_dependency_recorded_no_tls() {
    let v = verdict(
        "{ dependency: pricing, handshakes_per_request_at_most: 1.2 }",
        &healthy_record(&[]),
    );
    assert!(!v.passed);
    assert!(v.sentence.contains("does not speak TLS"), "{}", v.sentence);
    assert_eq!(v.measured, None);
}

#[test]
fn handshakes_per_request_are_refused_for_a_dependency_without_tls() {
    let spec: ExpectationSpec =
        serde_saphyr::from_str("{ dependency: pricing, handshakes_per_request_at_most: 1.2 }")
            .unwrap();
    let (phases, breakers, routes) = names();
    let routes_of = |_: &str| None;
    let err = spec
        .resolve(&Names {
            phases: &phases,
            breakers: &breakers,
            routes: &routes,
            breaker_routes: &routes_of,
            tls: false,
            metrics: &[],
            instances: &|_| 3,
            dns_names: &[],
        })
        .unwrap_err();
    assert!(err.contains("add `tls: {}` under `dependency`"), "{err}");
}

#[test]
fn sut_latency_can_be_judged_only_while_the_breaker_is_open() {
    // Slow (2 s) until the breaker opens at 15 s, fast (1 ms) while it is open.
    let r = record_with(
        &[(15.0, Open), (25.0, Closed)],
        |_| 5,
        |i| {
            if (150..250).contains(&i) {
                1
            } else if i >= 100 {
                2000
            } else {
                40
            }
        },
    );
    let whole_phase = verdict("{ sut_latency: p99, below: 50ms, during: brownout }", &r);
    assert!(!whole_phase.passed);
    let open_only = verdict(
        "{ sut_latency: p99, below: 50ms, during: brownout, while_open: true }",
        &r,
    );
    assert!(open_only.passed, "{}", open_only.sentence);
    assert!(
        open_only
            .sentence
            .contains("SUT p99 was 1 ms during brownout while pricing was open"),
        "{}",
        open_only.sentence
    );
}

#[test]
fn outcome_shares_count_completed_requests_in_the_phase() {
    let r = healthy_record(&[(15.0, Open)]);
    let v = verdict("{ sut_share: fallback, above: 40%, during: brownout }", &r);
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("fallback share was 50% during brownout (2500 of 5000 requests)"),
        "{}",
        v.sentence
    );
    let v = verdict("{ sut_share: error, below: 1%, during: brownout }", &r);
    assert!(v.passed, "{}", v.sentence);
}

#[test]
fn resolving_rejects_unknown_names_and_incomplete_entries_with_the_field() {
    let unknown_phase =
        resolve("{ breaker: pricing, opens_within: 6s, after: brownuot }").unwrap_err();
    assert!(
        unknown_phase.contains("`after` names phase `brownuot`"),
        "{unknown_phase}"
    );
    assert!(
        unknown_phase.contains("healthy, brownout, recovered"),
        "{unknown_phase}"
    );
    let unknown_breaker = resolve("{ breaker: pricng, stays_closed: true }").unwrap_err();
    assert!(
        unknown_breaker.contains("`breaker` names `pricng`"),
        "{unknown_breaker}"
    );
    let missing_after = resolve("{ breaker: pricing, opens_within: 6s }").unwrap_err();
    assert!(
        missing_after.contains("needs `after: <phase>`"),
        "{missing_after}"
    );
    let two_subjects = resolve("{ sut_latency: p99, sut_share: ok, below: 5ms }").unwrap_err();
    assert!(
        two_subjects.contains("exactly one subject"),
        "{two_subjects}"
    );
    let bad_percentile = resolve("{ sut_latency: p100, below: 5ms }").unwrap_err();
    assert!(bad_percentile.contains("p99.9"), "{bad_percentile}");
    let bad_unit = resolve("{ sut_latency: p99, below: 5 }").unwrap_err();
    assert!(
        bad_unit.contains("`below`") && bad_unit.contains("needs a unit"),
        "{bad_unit}"
    );
    let unknown_field = resolve("{ breaker: pricing, opens_whithin: 6s }").unwrap_err();
    assert!(
        unknown_field.contains("unknown field `opens_whithin`"),
        "{unknown_field}"
    );
    let no_check = resolve("{ dependency: pricing }").unwrap_err();
    assert!(no_check.contains("max_in_flight_below"), "{no_check}");
}

#[test]
fn a_probe_and_returning_traffic_in_one_bucket_are_told_apart_by_their_arrival_times() {
    // Half-open at 18.25 s; the probe arrives at 18.251 s, succeeds, and the breaker closes at 18.292 s; full
    // traffic returns in the same 100 ms bucket. Only the probe counts.
    let mut r = healthy_record(&[(12.0, Open), (18.25, HalfOpen), (18.292, Closed)]);
    let series = r.dependency.get_mut("pricing").unwrap();
    series[182] = DependencyBucket {
        arrivals: 5,
        in_flight_max: 2,
        first_arrivals: [51, 93, 95, 97, 99]
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect(),
        ..Default::default()
    };
    let v = verdict("{ breaker: pricing, probes_per_half_open_at_most: 1 }", &r);
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(r.arrivals_between("pricing", s(18.25), s(18.292)), 1);
    assert_eq!(r.arrivals_between("pricing", s(18.2), s(18.3)), 5);
    // Arrivals beyond the timed ones came after the last timed one (99 ms into the bucket): outside a window that
    // ends before it, inside (all of them, erring upwards) one that reaches past it.
    r.dependency.get_mut("pricing").unwrap()[182].arrivals = 40;
    assert_eq!(r.arrivals_between("pricing", s(18.25), s(18.292)), 1);
    assert_eq!(r.arrivals_between("pricing", s(18.25), s(18.2995)), 40);
}

#[test]
fn a_round_that_closes_within_one_scrape_cannot_be_judged_on_the_scrape_alone() {
    // Scraped every 100 ms: half-open seen at 18.3 s, closed at 18.4 s; the close and the returning traffic fall
    // in the same interval, so the probes of that round cannot be told from the traffic after it.
    let obs = [
        (s(12.0), Open),
        (s(15.1), HalfOpen),
        (s(15.5), Open),
        (s(18.3), HalfOpen),
        (s(18.4), Closed),
    ];
    let mut r = healthy_record(&[]);
    r.breakers.insert(
        "pricing".into(),
        BreakerTimeline::from_observations(&obs, Source::Metrics, s(0.1)),
    );
    let series = r.dependency.get_mut("pricing").unwrap();
    for (i, b) in series.iter_mut().enumerate() {
        b.arrivals = match i {
            120..=150 | 152..=182 => 0,
            151 => 1,
            _ => 50,
        };
    }
    let v = verdict("{ breaker: pricing, probes_per_half_open_at_most: 1 }", &r);
    assert!(v.inconclusive(), "{}", v.sentence);
    assert!(
        v.sentence.contains("between 0 and 50 calls at pricing")
            && v.sentence.contains("`bucket: 10ms` would let it decide")
            && v.sentence
                .contains("a log or webhook source would decide it"),
        "{}",
        v.sentence
    );
}

/// `record` as it stood at `t` during the run: everything after `t` not yet recorded.
fn as_of(record: &RunRecord, t: f64) -> RunRecord {
    let mut r = record.clone();
    let n = (t * 10.0).round() as usize;
    r.duration = s(t);
    r.sut.truncate(n);
    r.sut_latency.truncate(n);
    for series in r.dependency.values_mut() {
        series.truncate(n);
    }
    r.phases = phases()
        .into_iter()
        .filter(|p| p.start < s(t) || p.start.is_zero())
        .map(|mut p| {
            p.end = p.end.min(s(t));
            p
        })
        .collect();
    for timeline in r.breakers.values_mut() {
        *timeline = timeline.clone().until(s(t));
    }
    r
}

#[test]
fn a_sliding_window_finds_the_bad_ten_seconds_that_the_whole_run_hides() {
    // 30 s at 40 ms, but 2 s of 900 ms from 21 s to 23 s: 6.7% of the requests, under the whole run's p90.
    let r = record_with(
        &[],
        |_| 5,
        |i| if (210..230).contains(&i) { 900 } else { 40 },
    );
    let whole = verdict("{ sut_latency: p90, below: 100ms }", &r);
    assert!(whole.passed, "{}", whole.sentence);
    let windowed = verdict("{ sut_latency: p90, below: 100ms, over: 10s }", &r);
    assert!(!windowed.passed, "{}", windowed.sentence);
    // The worst window holds all 20 slow buckets of 100: its p90 is the slow value, exactly (not an average).
    assert!(
        (windowed.measured.unwrap() - 0.9).abs() < 0.001,
        "{:?}",
        windowed.measured
    );
    assert!(
        windowed.sentence.contains("in the 10s window")
            && windowed.sentence.contains("the worst of 201")
            && windowed
                .sentence
                .contains("expected below 100ms in every one: FAIL"),
        "{}",
        windowed.sentence
    );
}

#[test]
fn a_sliding_window_percentile_is_the_percentile_of_the_merged_buckets() {
    // Alternating 10 ms and 30 ms buckets: every 1 s window holds five of each, so its p50 is 10 ms and its p99
    // 30 ms, in every window; an average of per-bucket percentiles would say 20 ms for both.
    let r = record_with(&[], |_| 5, |i| if i % 2 == 0 { 10 } else { 30 });
    let p50 = verdict(
        "{ sut_latency: p50, below: 11ms, over: 1s, during: healthy }",
        &r,
    );
    assert!(p50.passed, "{}", p50.sentence);
    assert!((p50.measured.unwrap() - 0.010).abs() < 0.0001);
    let p99 = verdict(
        "{ sut_latency: p99, below: 25ms, over: 1s, during: healthy }",
        &r,
    );
    assert!(!p99.passed, "{}", p99.sentence);
    assert!((p99.measured.unwrap() - 0.030).abs() < 0.0001);
}

#[test]
fn a_sliding_share_names_its_worst_window() {
    // Open from 12 s to 14 s: fallbacks are 2 s of the 10 s brownout, 20% of it, but all of a 2 s window.
    let r = healthy_record(&[(12.0, Open), (14.0, Closed)]);
    let whole = verdict("{ sut_share: fallback, below: 25%, during: brownout }", &r);
    assert!(whole.passed, "{}", whole.sentence);
    let windowed = verdict(
        "{ sut_share: fallback, below: 25%, over: 2s, during: brownout }",
        &r,
    );
    assert!(!windowed.passed, "{}", windowed.sentence);
    assert_eq!(windowed.measured, Some(1.0));
    assert!(
        windowed
            .sentence
            .contains("fallback share was 100% in the 2s window 12.0-14.0 s during brownout"),
        "{}",
        windowed.sentence
    );
    let above = verdict(
        "{ sut_share: ok, above: 50%, over: 2s, during: brownout }",
        &r,
    );
    assert!(!above.passed, "{}", above.sentence);
    assert_eq!(above.measured, Some(0.0));
}

#[test]
fn over_is_refused_where_it_means_nothing() {
    let e = resolve("{ breaker: pricing, stays_closed: true, over: 10s }").unwrap_err();
    assert!(e.contains("`over`"), "{e}");
    let e = resolve("{ sut_latency: p99, below: 5ms, over: 10s, while_open: true }").unwrap_err();
    assert!(e.contains("`over` and `while_open`"), "{e}");
    let e = resolve("{ sut_latency: p99, below: 5ms, over: 0s }").unwrap_err();
    assert!(e.contains("longer than zero"), "{e}");
}

#[test]
fn a_pool_overrun_is_decided_the_moment_it_is_recorded() {
    let r = record_with(&[], |i| if i >= 120 { 250 } else { 5 }, |_| 40);
    let e =
        resolve("{ dependency: pricing, max_in_flight_below: 200, abort_on_fail: true }").unwrap();
    assert_eq!(e.decide(&as_of(&r, 11.0)), None, "still holding at 11 s");
    let v = e
        .decide(&as_of(&r, 12.5))
        .expect("decided once the overrun is recorded");
    assert!(!v.passed);
    assert_eq!(v, e.evaluate(&r), "the live verdict is the final one");
}

#[test]
fn a_breaker_that_has_not_opened_by_its_deadline_is_decided_then_and_not_before() {
    let never = healthy_record(&[]);
    let e = resolve("{ breaker: pricing, opens_within: 5s, after: brownout }").unwrap();
    assert_eq!(
        e.decide(&as_of(&never, 9.0)),
        None,
        "brownout has not begun"
    );
    assert_eq!(e.decide(&as_of(&never, 14.9)), None, "the deadline is 15 s");
    let v = e
        .decide(&as_of(&never, 15.2))
        .expect("decided after the deadline");
    assert!(!v.passed, "{}", v.sentence);

    let opens = healthy_record(&[(13.0, Open)]);
    let v = e
        .decide(&as_of(&opens, 13.5))
        .expect("decided when it opens");
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(v, e.evaluate(&opens));
}

#[test]
fn already_closed_when_recovery_begins_waits_for_the_end_of_the_run() {
    // Closed at 20 s; it reopens at 27 s and closes again at 29 s: the final verdict depends on what follows.
    let r = healthy_record(&[(12.0, Open), (18.0, Closed), (27.0, Open), (29.0, Closed)]);
    let e = resolve("{ breaker: pricing, closes_within: 5s, after: recovered }").unwrap();
    assert_eq!(e.decide(&as_of(&r, 26.0)), None);
}

#[test]
fn phase_bounds_are_decided_once_the_phase_has_ended_and_whole_run_bounds_at_the_end() {
    let r = record_with(
        &[],
        |_| 5,
        |i| if (100..200).contains(&i) { 900 } else { 40 },
    );
    let phase = resolve("{ sut_latency: p99, below: 100ms, during: brownout }").unwrap();
    assert_eq!(phase.decide(&as_of(&r, 19.0)), None, "brownout still going");
    let v = phase.decide(&as_of(&r, 20.5)).expect("brownout is over");
    assert!(!v.passed);
    assert_eq!(v, phase.evaluate(&r));

    let whole = resolve("{ sut_latency: p99, below: 100ms }").unwrap();
    assert!(!whole.check.decidable_live());
    assert_eq!(whole.decide(&as_of(&r, 29.9)), None);

    // A sliding window decides a failure as soon as one complete window breaks the bound.
    let windowed = resolve("{ sut_latency: p99, below: 100ms, over: 2s }").unwrap();
    assert_eq!(windowed.decide(&as_of(&r, 10.0)), None);
    let v = windowed
        .decide(&as_of(&r, 11.0))
        .expect("a slow window is complete");
    assert!(!v.passed, "{}", v.sentence);
}

#[test]
fn stays_closed_and_transition_counts_fail_live_and_pass_only_when_their_phase_is_over() {
    let r = healthy_record(&[
        (12.0, Open),
        (13.0, HalfOpen),
        (13.1, Open),
        (14.0, HalfOpen),
        (14.1, Open),
    ]);
    let flaps = resolve("{ breaker: pricing, transitions_at_most: 3, during: brownout }").unwrap();
    assert_eq!(flaps.decide(&as_of(&r, 13.5)), None, "2 transitions so far");
    let v = flaps
        .decide(&as_of(&r, 14.05))
        .expect("the fourth transition decides it");
    assert!(!v.passed);

    let quiet = resolve("{ breaker: pricing, stays_closed: true, during: healthy }").unwrap();
    assert_eq!(quiet.decide(&as_of(&r, 9.0)), None);
    assert!(quiet.decide(&as_of(&r, 10.5)).unwrap().passed);
}

#[test]
fn probes_and_the_rate_while_open_cannot_stop_a_run() {
    for spec in [
        "{ breaker: pricing, probes_per_half_open_at_most: 1, abort_on_fail: true }",
        "{ dependency: pricing, rate_while_open_below: 5/s, while_open: true, abort_on_fail: true }",
        "{ sut_share: error, below: 5%, abort_on_fail: true }",
    ] {
        let e = resolve(spec).unwrap_err();
        assert!(e.contains("`abort_on_fail` cannot apply"), "{spec}: {e}");
    }
    for spec in [
        "{ sut_share: error, below: 5%, during: brownout, abort_on_fail: true }",
        "{ sut_share: error, below: 5%, over: 10s, abort_on_fail: true }",
        "{ breaker: pricing, opens_within: 5s, after: brownout, abort_on_fail: true }",
        "{ breaker: pricing, transitions_at_most: 4, abort_on_fail: true }",
    ] {
        assert!(resolve(spec).unwrap().abort_on_fail, "{spec}");
    }
}

#[test]
fn max_connections_is_the_in_flight_bound_in_the_words_of_a_tcp_route() {
    let r = record_with(&[], peak(30, 20, 5), |_| 40);
    let v = verdict("{ dependency: pricing, max_connections_below: 20 }", &r);
    assert!(!v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .starts_with("connections open at pricing peaked at 20"),
        "{}",
        v.sentence
    );
    let v = verdict("{ dependency: pricing, max_connections_at_most: 20 }", &r);
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(
        resolve("{ dependency: pricing, max_connections_below: 20 }")
            .unwrap()
            .check
            .name(),
        "connections open at pricing stay below 20"
    );
}

#[test]
fn max_streams_in_flight_is_the_in_flight_bound_in_the_words_of_http2() {
    let r = record_with(&[], peak(30, 8, 3), |_| 40);
    let v = verdict(
        "{ dependency: pricing, max_streams_in_flight_below: 8 }",
        &r,
    );
    assert!(!v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .starts_with("streams in flight at pricing peaked at 8"),
        "{}",
        v.sentence
    );
    let v = verdict(
        "{ dependency: pricing, max_streams_in_flight_at_most: 8 }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
}

/// The healthy record with gRPC statuses at pricing: 40 OK per bucket, and 10 UNAVAILABLE per bucket during
/// brownout (10 s to 20 s).
fn grpc_record() -> RunRecord {
    let mut r = healthy_record(&[]);
    for (i, b) in r
        .dependency
        .get_mut("pricing")
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        b.grpc_status.insert("OK".into(), 40);
        if (100..200).contains(&i) {
            b.grpc_status.insert("UNAVAILABLE".into(), 10);
        }
    }
    r
}

#[test]
fn grpc_status_counts_the_calls_faultd_recorded_with_that_status_in_the_phase() {
    let r = grpc_record();
    let v = verdict(
        "{ dependency: pricing, grpc_status: UNAVAILABLE, calls_at_least: 1000, during: brownout }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .starts_with("1000 of 5000 gRPC calls at pricing ended UNAVAILABLE during brownout"),
        "{}",
        v.sentence
    );
    let v = verdict(
        "{ dependency: pricing, grpc_status: 14, calls_at_most: 0, during: recovered }",
        &r,
    );
    assert!(v.passed, "{}", v.sentence);
    let v = verdict(
        "{ dependency: pricing, grpc_status: unavailable, calls_at_most: 999 }",
        &r,
    );
    assert!(!v.passed, "{}", v.sentence);
    assert_eq!(
        resolve("{ dependency: pricing, grpc_status: UNAVAILABLE, calls_at_most: 5 }")
            .unwrap()
            .check
            .name(),
        "gRPC calls at pricing ending UNAVAILABLE number at most 5"
    );
}

#[test]
fn a_grpc_count_is_decided_once_an_upper_bound_is_passed_or_a_lower_one_reached() {
    let r = grpc_record();
    let over =
        resolve("{ dependency: pricing, grpc_status: UNAVAILABLE, calls_at_most: 100 }").unwrap();
    assert_eq!(over.decide(&as_of(&r, 10.5)), None, "50 so far");
    assert!(!over.decide(&as_of(&r, 11.5)).unwrap().passed, "150 > 100");
    let reached =
        resolve("{ dependency: pricing, grpc_status: UNAVAILABLE, calls_at_least: 100 }").unwrap();
    assert!(reached.decide(&as_of(&r, 11.5)).unwrap().passed);
}

#[test]
fn a_grpc_count_needs_one_bound_and_a_known_status() {
    let e = resolve("{ dependency: pricing, grpc_status: UNAVAILABLE }").unwrap_err();
    assert!(e.contains("calls_at_least"), "{e}");
    let e = resolve("{ dependency: pricing, calls_at_most: 3 }").unwrap_err();
    assert!(e.contains("grpc_status"), "{e}");
    let e =
        resolve("{ dependency: pricing, grpc_status: UNAVAILABL, calls_at_most: 3 }").unwrap_err();
    assert!(e.contains("UNAVAILABL"), "{e}");
}

#[test]
fn calls_on_no_route_are_counted_against_their_bound_with_the_paths_they_took() {
    let mut r = healthy_record(&[(0.0, Closed)]);
    let e = resolve("{ id: covered, unmatched_calls_at_most: 0 }").unwrap();
    assert_eq!(
        e.check.name(),
        "calls on no route of the dependency number at most 0"
    );
    let v = e.evaluate(&r);
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence.contains(
            "no call reached the dependency on a path no route matches; expected at most 0"
        ),
        "{}",
        v.sentence
    );
    assert_eq!(e.decide(&r), None, "a count under its bound may still grow");

    r.unmatched = 7;
    r.unmatched_paths = vec![
        faultd::UnmatchedPath {
            method: "GET".into(),
            path: "/prices/1".into(),
            calls: 5,
        },
        faultd::UnmatchedPath {
            method: "POST".into(),
            path: "/stock".into(),
            calls: 2,
        },
    ];
    let v = e.evaluate(&r);
    assert!(!v.passed);
    assert!(
        v.sentence.contains(
            "7 calls reached the dependency on no route (GET /prices/1 (5), POST /stock (2)); expected at most 0"
        ),
        "{}",
        v.sentence
    );
    assert_eq!(v.measured, Some(7.0));
    assert!(
        !e.decide(&r).unwrap().passed,
        "over its bound it stays over"
    );
    let loose = resolve("{ unmatched_calls_at_most: 10, abort_on_fail: true }").unwrap();
    assert!(loose.evaluate(&r).passed);
}

#[test]
fn calls_on_no_route_are_a_subject_of_their_own() {
    let e = resolve("{ dependency: pricing, unmatched_calls_at_most: 0 }").unwrap_err();
    assert!(e.contains("exactly one subject"), "{e}");
    let e = resolve("{ unmatched_calls_at_most: 0, during: brownout }").unwrap_err();
    assert!(
        e.contains(
            "`during` does not apply to `unmatched_calls_at_most`, which takes no other field"
        ),
        "{e}"
    );
    let e = resolve("{ unmatched_calls_at_most: 0, max_in_flight_below: 3 }").unwrap_err();
    assert!(e.contains("one check"), "{e}");
}
