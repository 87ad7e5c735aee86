//! The dns expectations on synthetic recordings: the phases of `super::super::tests` (healthy 0-10 s, brownout
//! 10-20 s, recovered 20-30 s at 100 ms buckets), queries of `pricing.internal` and calls at two routes.

use std::collections::BTreeMap;
use std::time::Duration;

use faultd::dns::{DnsBucket, DnsNameRecording, DnsRecording};

use super::*;
use crate::expect::tests::resolve;
use crate::record::{DependencyBucket, SutBucket};

const BUCKETS: usize = 300;

fn queries(n: u64) -> DnsBucket {
    DnsBucket {
        queries: BTreeMap::from([("A".to_string(), n)]),
        answers: BTreeMap::from([("NOERROR".to_string(), n)]),
        ..DnsBucket::default()
    }
}

/// A run whose name is asked `asked(i)` times in bucket i, whose SUT is sent 10 requests a bucket, and whose calls
/// reach `pricing` before `moved_at` and `reviews` (the moved record's listener) from then on.
fn record(asked: impl Fn(usize) -> u64, moved_at: Option<usize>) -> RunRecord {
    let mut r = RunRecord::empty(Duration::from_millis(100));
    r.duration = Duration::from_secs(30);
    r.phases = crate::expect::tests::phases();
    r.sut = (0..BUCKETS)
        .map(|_| SutBucket {
            offered: 10,
            ..SutBucket::default()
        })
        .collect();
    let calls = |on: &dyn Fn(usize) -> bool| -> Vec<DependencyBucket> {
        (0..BUCKETS)
            .map(|i| DependencyBucket {
                arrivals: if on(i) { 10 } else { 0 },
                first_arrivals: if on(i) {
                    vec![Duration::from_millis(30)]
                } else {
                    Vec::new()
                },
                ..DependencyBucket::default()
            })
            .collect()
    };
    let moved = |i: usize| moved_at.is_some_and(|m| i >= m);
    r.dependency.insert("pricing".into(), calls(&|i| !moved(i)));
    r.dependency.insert("reviews".into(), calls(&moved));
    let buckets: Vec<DnsBucket> = (0..BUCKETS).map(|i| queries(asked(i))).collect();
    let mut totals = DnsBucket::default();
    totals
        .queries
        .insert("A".into(), buckets.iter().map(DnsBucket::total).sum());
    r.dns = Some(DnsRecording {
        listen: "127.0.0.1:5300".into(),
        names: BTreeMap::from([(
            "pricing.internal".to_string(),
            DnsNameRecording { buckets, totals },
        )]),
        other: DnsNameRecording::default(),
    });
    r
}

fn judge(spec: &str, record: &RunRecord) -> Verdict {
    resolve(spec).expect("resolves").evaluate(record)
}

#[test]
fn a_name_asked_once_a_ttl_passes_and_one_asked_on_every_call_fails_naming_its_busiest_second() {
    // Cached: one query every 5 s. Resolving on every call: 10 queries a bucket during the brownout.
    let cached = record(|i| u64::from(i % 50 == 0), None);
    let spec = "{ dns: pricing.internal, queries_per_second_at_most: 2, during: brownout }";
    let v = judge(spec, &cached);
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(v.measured, Some(1.0));
    let every_call = record(|i| if (100..200).contains(&i) { 10 } else { 0 }, None);
    let v = judge(spec, &every_call);
    assert!(v.failed(), "{}", v.sentence);
    assert_eq!(v.measured, Some(100.0));
    assert!(
        v.sentence.contains("asked 100 times in the busiest 1.0 s window, 10.0-11.0 s (100/s; 1000 queries during brownout, 100/s on average)"),
        "{}",
        v.sentence
    );
    // The healthy phase of the same run was quiet.
    let v = judge(
        "{ dns: pricing.internal, queries_per_second_at_most: 2, during: healthy }",
        &every_call,
    );
    assert!(v.passed, "{}", v.sentence);
}

#[test]
fn a_burst_inside_a_quiet_phase_is_judged_by_its_busiest_second_not_the_phase_mean() {
    // 30 queries at once when every caller's TTL expires together, nothing else: a mean of 3/s over the phase.
    let burst = record(|i| if i == 150 { 30 } else { 0 }, None);
    let v = judge(
        "{ dns: pricing.internal, queries_per_second_at_most: 5, during: brownout }",
        &burst,
    );
    assert!(v.failed(), "{}", v.sentence);
    assert!(v.sentence.contains("3/s on average"), "{}", v.sentence);
    assert_eq!(v.measured, Some(30.0));
}

#[test]
fn calls_that_reach_the_moved_records_listener_in_time_pass_and_late_ones_fail() {
    // Calls reach `reviews` from 12.0 s (12.03 s with the timed arrival), 2.03 s after brownout began.
    let moved = record(|_| 1, Some(120));
    let v = judge(
        "{ dns: pricing.internal, moved_within: 5s, after: brownout, route: reviews }",
        &moved,
    );
    assert!(v.passed, "{}", v.sentence);
    let took = v.measured.unwrap();
    assert!((took - 2.03).abs() < 1e-9, "{took}");
    assert!(
        v.sentence
            .contains("the first call reached reviews 2.0 s after brownout began"),
        "{}",
        v.sentence
    );
    let v = judge(
        "{ dns: pricing.internal, moved_within: 1s, after: brownout, route: reviews }",
        &moved,
    );
    assert!(v.failed(), "{}", v.sentence);
    let never = record(|_| 1, None);
    let v = judge(
        "{ dns: pricing.internal, moved_within: 5s, after: brownout, route: reviews }",
        &never,
    );
    assert!(v.failed(), "{}", v.sentence);
    assert!(
        v.sentence.contains("no call reached reviews in the 5s after brownout began (500 SUT requests; pricing.internal was asked 50 times in that span)"),
        "{}",
        v.sentence
    );
}

#[test]
fn a_move_is_inconclusive_when_the_route_was_called_before_or_the_run_ended_or_no_request_was_sent()
{
    // `pricing` is called all along: its calls after brownout say nothing about a move.
    let v = judge(
        "{ dns: pricing.internal, moved_within: 5s, after: brownout, route: pricing }",
        &record(|_| 1, None),
    );
    assert!(v.inconclusive(), "{}", v.sentence);
    assert!(v.sentence.contains("took 100 calls"), "{}", v.sentence);
    // The run stopped 2 s into the phase.
    let mut short = record(|_| 1, None);
    short.duration = Duration::from_secs(12);
    let v = judge(
        "{ dns: pricing.internal, moved_within: 5s, after: brownout, route: reviews }",
        &short,
    );
    assert!(v.inconclusive(), "{}", v.sentence);
    // Nobody called the SUT in the span.
    let mut idle = record(|_| 0, None);
    for b in &mut idle.sut[100..200] {
        b.offered = 0;
    }
    let v = judge(
        "{ dns: pricing.internal, moved_within: 5s, after: brownout, route: reviews }",
        &idle,
    );
    assert!(v.inconclusive(), "{}", v.sentence);
    // No resolver was recorded at all.
    let mut none = record(|_| 1, Some(120));
    none.dns = None;
    let v = judge(
        "{ dns: pricing.internal, queries_per_second_at_most: 1 }",
        &none,
    );
    assert!(v.inconclusive(), "{}", v.sentence);
}

#[test]
fn a_move_seen_is_decided_live_and_a_rate_waits_for_its_phase_unless_broken() {
    let mut live = record(|i| if i >= 100 { 10 } else { 0 }, Some(120));
    live.duration = Duration::from_secs(13);
    let moved =
        resolve("{ dns: pricing.internal, moved_within: 5s, after: brownout, route: reviews }")
            .unwrap();
    assert!(moved.decide(&live).is_some_and(|v| v.passed));
    let quiet =
        resolve("{ dns: pricing.internal, queries_per_second_at_most: 200, during: brownout }")
            .unwrap();
    assert!(quiet.decide(&live).is_none(), "the phase goes on");
    let broken =
        resolve("{ dns: pricing.internal, queries_per_second_at_most: 5, during: brownout }")
            .unwrap();
    assert!(broken.decide(&live).is_some_and(|v| v.failed()));
}

#[test]
fn a_dns_entry_names_a_known_name_and_one_check_with_what_it_needs() {
    // Names compare in lower case without the final dot, and the check keeps the recording's key.
    let e = resolve("{ dns: PRICING.internal., queries_per_second_at_most: 1 }").unwrap();
    assert_eq!(e.name(), "pricing.internal queries at most 1/s");
    let err = resolve("{ dns: prices.internal, queries_per_second_at_most: 1 }").unwrap_err();
    assert!(err.contains("not under `dependency.dns.names`"), "{err}");
    let err = resolve("{ dns: pricing.internal }").unwrap_err();
    assert!(
        err.contains("`queries_per_second_at_most` or `moved_within`"),
        "{err}"
    );
    let err = resolve("{ dns: pricing.internal, moved_within: 5s, after: brownout }").unwrap_err();
    assert!(err.contains("needs `route: <route>`"), "{err}");
    let err = resolve("{ dns: pricing.internal, moved_within: 5s, route: reviews }").unwrap_err();
    assert!(err.contains("needs `after: <phase>`"), "{err}");
    let err = resolve("{ dns: pricing.internal, queries_per_second_at_most: 1, after: brownout }")
        .unwrap_err();
    assert!(err.contains("`after` does not apply"), "{err}");
    let err = resolve("{ dns: pricing.internal, queries_per_second_at_most: -1 }").unwrap_err();
    assert!(err.contains("non-negative"), "{err}");
    let err =
        resolve("{ dns: pricing.internal, dependency: pricing, queries_per_second_at_most: 1 }")
            .unwrap_err();
    assert!(err.contains("exactly one subject"), "{err}");
    let err = resolve("{ dns: pricing.internal, moved_within: 5s, after: brownout, route: nope }")
        .unwrap_err();
    assert!(err.contains("route `nope`"), "{err}");
}

#[test]
fn time_scale_shortens_the_move_and_raises_the_query_rate() {
    let mut spec: ExpectationSpec = serde_saphyr::from_str(
        "{ dns: pricing.internal, moved_within: 10s, after: brownout, route: reviews }",
    )
    .unwrap();
    spec.scale_time(0.5);
    assert_eq!(spec.moved_within, Some(Dur::from_millis(5000)));
    let mut spec: ExpectationSpec =
        serde_saphyr::from_str("{ dns: pricing.internal, queries_per_second_at_most: 3 }").unwrap();
    spec.scale_time(0.5);
    assert_eq!(spec.queries_per_second_at_most, Some(6.0));
}
