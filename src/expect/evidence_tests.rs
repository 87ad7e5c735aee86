//! Verdicts that a coarse observation must not falsify, on synthetic recordings: a breaker whose half-open windows
//! (30 ms, one probe or five) all fall between the samples of a 100 ms scrape, as opossum's did behind Express.
//! 30 s at 100 ms buckets and 500 requests per second; closed until 10.05 s, then open with a half-open window at
//! x.020-x.050 s every 2 s from 12 s on, each of whose probes fails, so it opens again; it never closes.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::*;
use crate::breaker::{BreakerState, BreakerState::*, BreakerTimeline, Source};
use crate::record::{ByClass, DependencyBucket, OutcomeClass, PhaseSpan, RunRecord, SutBucket};

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

const WINDOWS: [f64; 9] = [
    12.02, 14.02, 16.02, 18.02, 20.02, 22.02, 24.02, 26.02, 28.02,
];

/// The breaker's true state at `t`.
fn truth(t: Duration) -> BreakerState {
    let t = t.as_secs_f64();
    if t < 10.05 {
        Closed
    } else if WINDOWS.iter().any(|w| t >= *w && t < w + 0.03) {
        HalfOpen
    } else {
        Open
    }
}

/// Every transition the breaker made, as an exact source (a log line per change) would report them.
fn exact_transitions() -> Vec<(Duration, BreakerState)> {
    let mut obs = vec![(s(10.05), Open)];
    for w in WINDOWS {
        obs.push((s(w), HalfOpen));
        obs.push((s(w + 0.03), Open));
    }
    obs
}

/// A 100 ms scrape of the breaker: it reads the state at every tenth of a second, and so never sees a window.
fn scrape() -> BreakerTimeline {
    let obs: Vec<(Duration, BreakerState)> = (1..300)
        .map(|i| (s(i as f64 * 0.1), truth(s(i as f64 * 0.1))))
        .collect();
    BreakerTimeline::from_observations(&obs, Source::Metrics, s(0.1))
}

/// The record: 50 requests to the SUT per bucket; 50 calls at the dependency per bucket while closed, `probes` in
/// the bucket of each window (timed to the microsecond, from 20 ms into the bucket), none otherwise.
fn record(probes: u64, evidence: Vec<BreakerTimeline>, with_route: bool) -> RunRecord {
    let bucket = s(0.1);
    let mut dependency = Vec::new();
    let mut sut = Vec::new();
    let mut latency = Vec::new();
    for i in 0..300usize {
        let start = bucket * i as u32;
        let window = WINDOWS.iter().any(|w| ((w * 10.0).floor() as usize) == i);
        let (arrivals, first) = if start < s(10.0) {
            (50, Vec::new())
        } else if window {
            (
                probes,
                (0..probes)
                    .map(|k| Duration::from_micros(20_000 + 100 * k))
                    .collect(),
            )
        } else {
            (0, Vec::new())
        };
        dependency.push(DependencyBucket {
            arrivals,
            in_flight_max: arrivals.min(5),
            first_arrivals: first,
            ..Default::default()
        });
        let mut completed = ByClass::default();
        completed.add(
            if start < s(10.0) {
                OutcomeClass::Ok
            } else {
                OutcomeClass::Fallback
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
        h.record_n(1_000_000, 50).unwrap();
        latency.push(h);
    }
    let mut r = RunRecord::empty(bucket);
    r.duration = s(30.0);
    r.phases = vec![
        PhaseSpan {
            name: "healthy".into(),
            start: s(0.0),
            end: s(10.0),
        },
        PhaseSpan {
            name: "brownout".into(),
            start: s(10.0),
            end: s(30.0),
        },
    ];
    r.sut = sut;
    r.sut_latency = latency.into();
    if with_route {
        r.dependency = BTreeMap::from([("pricing".to_string(), dependency)]);
    }
    r.breakers = BTreeMap::from([("pricing".to_string(), evidence[0].clone())]);
    r.evidence = BTreeMap::from([("pricing".to_string(), evidence)]);
    r
}

/// The record as the runner builds it: the scrape, and the inference from the same traffic beside it.
fn scraped_and_inferred(probes: u64) -> RunRecord {
    let mut r = record(probes, vec![scrape()], true);
    let inferred = r.inferred_timeline("pricing").unwrap();
    r.evidence.get_mut("pricing").unwrap().push(inferred);
    r
}

/// Judged with the scenario names of the other expectation tests (phases healthy, brownout, recovered).
fn judge(spec: &str, r: &RunRecord) -> Verdict {
    super::tests::verdict(spec, r)
}

#[test]
fn the_scrape_misses_every_window_yet_one_probe_per_window_passes() {
    assert!(
        scrape().transitions.len() == 1,
        "the scrape sees only the opening"
    );
    for r in [record(1, vec![scrape()], true), scraped_and_inferred(1)] {
        let v = judge("{ breaker: pricing, probes_per_half_open_at_most: 1 }", &r);
        assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
        assert!(
            v.sentence.contains("calls counted by faultd"),
            "{}",
            v.sentence
        );
    }
}

#[test]
fn five_probes_in_a_window_the_scrape_never_saw_fail() {
    for r in [record(5, vec![scrape()], true), scraped_and_inferred(5)] {
        let v = judge("{ breaker: pricing, probes_per_half_open_at_most: 1 }", &r);
        assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
        assert_eq!(v.measured, Some(5.0));
        assert!(
            v.sentence
                .contains("5 calls reached pricing in one half-open round"),
            "{}",
            v.sentence
        );
    }
    // Five is within a bound of five.
    let v = judge(
        "{ breaker: pricing, probes_per_half_open_at_most: 5 }",
        &record(5, vec![scrape()], true),
    );
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
}

#[test]
fn a_log_line_read_after_its_probe_arrived_still_counts_the_probe_in_its_round() {
    // The run stamps a log line when it reads it: here each half-open line 3 ms after the window's first probe
    // reached faultd. The breaker was open before the mark, so that probe is still one of the round's.
    let late: Vec<(Duration, BreakerState)> = exact_transitions()
        .into_iter()
        .map(|(at, st)| (if st == HalfOpen { at + s(0.003) } else { at }, st))
        .collect();
    for (probes, outcome) in [(1, Outcome::Pass), (5, Outcome::Fail)] {
        let log = BreakerTimeline::from_observations(&late, Source::Log, Duration::ZERO);
        let v = judge(
            "{ breaker: pricing, probes_per_half_open_at_most: 1 }",
            &record(probes, vec![log], true),
        );
        assert_eq!(v.outcome(), outcome, "{}", v.sentence);
        assert_eq!(v.measured, Some(probes as f64), "{}", v.sentence);
    }
}

#[test]
fn flapping_faster_than_the_scrape_fails_when_a_log_or_the_traffic_sees_it() {
    // 19 changes: the opening, then open -> half-open -> open nine times.
    let log = BreakerTimeline::from_observations(&exact_transitions(), Source::Log, Duration::ZERO);
    let with_log = record(1, vec![scrape(), log], true);
    let v = judge("{ breaker: pricing, transitions_at_most: 4 }", &with_log);
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    assert_eq!(v.measured, Some(19.0));
    assert!(v.sentence.contains("(log line)"), "{}", v.sentence);

    // No log: the probes that reached pricing while the scrape saw the breaker open show every missed window.
    let traffic = record(1, vec![scrape()], true);
    let v = judge("{ breaker: pricing, transitions_at_most: 4 }", &traffic);
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    assert_eq!(v.measured, Some(19.0));
    assert!(
        v.sentence
            .contains("18 more implied by the 9 bursts of calls"),
        "{}",
        v.sentence
    );

    // Inference from the same traffic sees the windows too.
    let v = judge(
        "{ breaker: pricing, transitions_at_most: 4 }",
        &scraped_and_inferred(1),
    );
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
}

#[test]
fn flapping_that_nothing_can_see_is_inconclusive_not_a_pass() {
    // The scrape alone, and no record of the route's traffic: one change seen, and no way to know of more.
    let blind = record(1, vec![scrape()], false);
    let v = judge("{ breaker: pricing, transitions_at_most: 4 }", &blind);
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("a log or webhook source, a shorter interval, or the breaker's `route:`"),
        "{}",
        v.sentence
    );
    // A breaker that really changed state once passes where the traffic could have shown more.
    let quiet = scraped_and_inferred(0);
    let v = judge("{ breaker: pricing, transitions_at_most: 4 }", &quiet);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
}

#[test]
fn an_opening_within_the_scrape_interval_of_the_bound_is_inconclusive_and_an_exact_source_decides_it(
) {
    // The breaker opened at 10.05 s; the scrape saw it at 10.1 s (±100 ms): 0.1 s after brownout began.
    let r = record(1, vec![scrape()], true);
    let v = judge(
        "{ breaker: pricing, opens_within: 70ms, after: brownout }",
        &r,
    );
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("between 0.0 s and 100 ms after brownout began"),
        "{}",
        v.sentence
    );
    let v = judge(
        "{ breaker: pricing, opens_within: 100ms, after: brownout }",
        &r,
    );
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);

    let log = BreakerTimeline::from_observations(&exact_transitions(), Source::Log, Duration::ZERO);
    let mut exact = record(1, vec![log.clone(), scrape()], true);
    exact.breakers.insert("pricing".into(), log);
    let v = judge(
        "{ breaker: pricing, opens_within: 70ms, after: brownout }",
        &exact,
    );
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    let v = judge(
        "{ breaker: pricing, opens_within: 40ms, after: brownout }",
        &exact,
    );
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
}
