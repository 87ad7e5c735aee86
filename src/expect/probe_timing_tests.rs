//! Probe counts decided by faultd's timing of every call, under a scrape that never sees a half-open window, on
//! synthetic recordings: 10 s at 10 ms buckets, 200 requests a second offered to the SUT throughout. The breaker is
//! closed until 3 s (calls every 5 ms, each answered in 2 ms), opens, and probes at 4.013 s (the dependency still
//! failing: the probe is held 40 ms and the breaker opens again) and at 5.013 s (recovered: held 25 ms), after which
//! it is closed and the calls come every 5 ms, each held 25 ms, so that five are in flight at once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::breaker::{BreakerState, BreakerState::*, BreakerTimeline, Source};
use crate::record::{DependencyBucket, PhaseSpan, RunRecord, SutBucket};

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// Calls every 5 ms over `[from, to)`, each held `held`.
fn steady(from: f64, to: f64, held: f64) -> Vec<(f64, f64)> {
    let n = ((to - from) / 0.005).round() as usize;
    (0..n).map(|i| (from + i as f64 * 0.005, held)).collect()
}

/// The calls before the first probe: closed traffic until 3 s.
fn closed_until_open() -> Vec<(f64, f64)> {
    steady(0.0, 3.0, 0.002)
}

/// A scrape every `every` seconds of a breaker whose true state `truth` gives.
fn scrape(every: f64, truth: &dyn Fn(f64) -> BreakerState) -> BreakerTimeline {
    let n = (10.0 / every) as usize;
    let obs: Vec<(Duration, BreakerState)> = (1..n)
        .map(|i| (s(i as f64 * every), truth(i as f64 * every)))
        .collect();
    BreakerTimeline::from_observations(&obs, Source::Metrics, s(every))
}

/// A breaker open from 3 s until it closes at `closes`, half-open in the windows `half_open`.
fn truth(half_open: Vec<(f64, f64)>, closes: f64) -> impl Fn(f64) -> BreakerState {
    move |t| {
        if !(3.0..closes).contains(&t) {
            Closed
        } else if half_open.iter().any(|(a, b)| (*a..*b).contains(&t)) {
            HalfOpen
        } else {
            Open
        }
    }
}

/// The record of `calls` (arrival and hold, in seconds), every one timed, watched by `timeline`.
fn record(calls: &[(f64, f64)], timeline: BreakerTimeline) -> RunRecord {
    let bucket = s(0.01);
    let mut dependency = vec![DependencyBucket::default(); 1000];
    for (at, held) in calls {
        let i = (at / 0.01) as usize;
        let b = &mut dependency[i];
        b.arrivals += 1;
        b.in_flight_max = b.in_flight_max.max(1);
        b.first_arrivals.push(s(*at) - bucket * i as u32);
        b.first_held.push(Some(s(*held)));
    }
    let mut r = RunRecord::empty(bucket);
    r.duration = s(10.0);
    r.phases = vec![PhaseSpan {
        name: "healthy".into(),
        start: s(0.0),
        end: s(10.0),
    }];
    r.sut = vec![
        SutBucket {
            offered: 2,
            ..Default::default()
        };
        1000
    ];
    r.dependency = BTreeMap::from([("pricing".to_string(), dependency)]);
    r.breakers = BTreeMap::from([("pricing".to_string(), timeline.clone())]);
    r.evidence = BTreeMap::from([("pricing".to_string(), vec![timeline])]);
    r
}

fn judge(bound: u32, r: &RunRecord) -> Verdict {
    super::tests::verdict(
        &format!("{{ breaker: pricing, probes_per_half_open_at_most: {bound} }}"),
        r,
    )
}

/// The calls of a breaker that admits one probe at a time and closes on the first success.
fn one_probe() -> Vec<(f64, f64)> {
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.push((5.013, 0.025));
    calls.extend(steady(5.040, 10.0, 0.025));
    calls
}

#[test]
fn a_one_probe_breaker_passes_under_a_scrape_that_never_saw_it_half_open() {
    let windows = vec![(4.013, 4.053), (5.013, 5.038)];
    for every in [0.1, 1.0] {
        let t = scrape(every, &truth(windows.clone(), 5.038));
        assert!(
            !t.samples.iter().any(|(_, st)| *st == HalfOpen),
            "the scrape never sees half-open"
        );
        let v = judge(1, &record(&one_probe(), t));
        assert_eq!(v.outcome(), Outcome::Pass, "{every} s: {}", v.sentence);
        assert!(
            v.sentence.contains("counts: 1, 1;"),
            "{every} s: {}",
            v.sentence
        );
        assert!(
            v.sentence.contains("each ended by faultd's timing"),
            "{}",
            v.sentence
        );
    }
}

#[test]
fn a_breaker_that_admits_every_call_while_its_probe_is_out_fails() {
    // Half-open admits every call: the calls every 5 ms go on reaching the dependency while the first is held.
    let mut calls = closed_until_open();
    calls.extend(steady(4.013, 4.053, 0.040));
    calls.push((5.013, 0.025));
    calls.extend(steady(5.040, 10.0, 0.025));
    calls.sort_by(|a, b| a.0.total_cmp(&b.0));
    for every in [0.1, 1.0] {
        let t = scrape(every, &truth(vec![(4.013, 4.053), (5.013, 5.038)], 5.038));
        let v = judge(1, &record(&calls, t));
        assert_eq!(v.outcome(), Outcome::Fail, "{every} s: {}", v.sentence);
        // 4.013 to 4.048 s: eight calls before the answer at 4.053 s, the last of them within the 5 ms in which
        // faultd's end of a call cannot tell "before" from "just after" the answer.
        assert_eq!(v.measured, Some(7.0), "{}", v.sentence);
        assert!(
            v.sentence.contains("before its first probe was answered"),
            "{}",
            v.sentence
        );
    }
}

#[test]
fn two_rounds_between_two_samples_are_two_rounds_not_one_of_two_probes() {
    // Open for 0.5 s at a time under a 1 s scrape: the rounds at 4.013 and 4.513 fall between the same two samples.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.push((4.513, 0.040));
    calls.push((5.013, 0.025));
    calls.extend(steady(5.040, 10.0, 0.025));
    let windows = vec![(4.013, 4.053), (4.513, 4.553), (5.013, 5.038)];
    let v = judge(1, &record(&calls, scrape(1.0, &truth(windows, 5.038))));
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    assert!(v.sentence.contains("counts: 1, 1, 1;"), "{}", v.sentence);
}

#[test]
fn probes_one_after_another_are_counted_up_to_the_answer_the_breaker_closed_on() {
    // Three successes in turn to close: each probe comes after the answer to the one before; then the calls overlap.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.extend([(5.013, 0.025), (5.040, 0.025), (5.067, 0.025)]);
    calls.extend(steady(5.094, 10.0, 0.025));
    let windows = vec![(4.013, 4.053), (5.013, 5.092)];
    let r = record(&calls, scrape(0.1, &truth(windows, 5.092)));
    let v = judge(1, &r);
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence.contains("between 1 and 3 calls"),
        "{}",
        v.sentence
    );
    let v = judge(3, &r);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
}

#[test]
fn calls_one_per_answer_after_a_fast_probe_are_inconclusive_and_say_why() {
    // Recovered to 2 ms: every call is answered before the next comes, closed or not.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.push((5.013, 0.002));
    calls.extend(steady(5.020, 10.0, 0.002));
    let windows = vec![(4.013, 4.053), (5.013, 5.015)];
    let v = judge(1, &record(&calls, scrape(0.1, &truth(windows, 5.015))));
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("every call waited for the one before it"),
        "{}",
        v.sentence
    );
}

#[test]
fn calls_one_after_another_whose_ends_faultd_timed_late_are_not_taken_for_calls_at_once() {
    // A service that sends its next call the moment an answer reaches it (a breaker that holds a lock around the
    // call), where faultd ends each call 2 ms after its answer left: every call "arrives" 2 ms before the end of
    // the one before it. Two in flight at once would show a close; these never were.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    let mut at = 5.013;
    while at < 10.0 {
        calls.push((at, 0.025));
        at += 0.023;
    }
    let windows = vec![(4.013, 4.053), (5.013, 5.038)];
    let v = judge(1, &record(&calls, scrape(0.1, &truth(windows, 5.038))));
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("every call waited for the one before it"),
        "{}",
        v.sentence
    );
}

#[test]
fn a_breaker_that_admits_several_at_once_is_not_taken_as_closed_by_its_overlaps() {
    // Up to 5 at once in half-open and closed only after all 5 answers: its second round's later probes overlap
    // just as closed traffic does, but its first round showed 3 at once.
    let mut calls = closed_until_open();
    calls.extend([(4.013, 0.040), (4.018, 0.040), (4.023, 0.040)]);
    calls.push((5.013, 0.025));
    calls.extend(steady(5.040, 10.0, 0.025));
    let windows = vec![(4.013, 4.063), (5.013, 5.065)];
    let v = judge(3, &record(&calls, scrape(0.1, &truth(windows, 5.065))));
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence.contains("admits several at once"),
        "{}",
        v.sentence
    );
}

/// An inferred timeline (no samples) with the given changes, each known to 50 ms.
fn inferred(changes: &[(f64, BreakerState)]) -> BreakerTimeline {
    let mut from = Closed;
    let transitions = changes
        .iter()
        .map(|(at, to)| {
            let tr = crate::breaker::Transition {
                at: s(*at),
                from,
                to: *to,
                source: Source::Inferred,
                resolution: s(0.05),
            };
            from = *to;
            tr
        })
        .collect();
    BreakerTimeline {
        transitions,
        resolution: s(0.05),
        source: Some(Source::Inferred),
        ..Default::default()
    }
}

#[test]
fn an_inferred_window_in_which_the_calls_never_stopped_is_no_round() {
    // A slow start read by the inference as an opening and a half-open window, while faultd saw calls all along.
    let calls = steady(0.0, 10.0, 0.025);
    let t = inferred(&[(0.20, Open), (0.25, HalfOpen), (0.30, Closed)]);
    let v = judge(1, &record(&calls, t));
    assert_ne!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    // Not judged, and not said to have stayed closed: the inference did see it half-open.
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("went half-open once as inferred from traffic"),
        "{}",
        v.sentence
    );
}

#[test]
fn a_pause_in_the_load_is_not_a_breaker_open_again() {
    // The load pauses for 300 ms inside the closing round: no calls, but no requests either, so the calls after
    // the pause are the same closed traffic, not a new round.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.push((5.013, 0.025));
    calls.extend(steady(5.040, 5.060, 0.025));
    calls.extend(steady(5.360, 10.0, 0.025));
    let windows = vec![(4.013, 4.053), (5.013, 5.038)];
    let mut r = record(&calls, scrape(1.0, &truth(windows, 5.038)));
    for b in &mut r.sut[506..536] {
        b.offered = 0;
    }
    let v = judge(1, &r);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    assert!(v.sentence.contains("counts: 1, 1;"), "{}", v.sentence);
}

#[test]
fn probes_in_turn_that_a_sample_saw_are_not_taken_for_probes_at_once() {
    // Three successes in turn, the scrape's sample at 5.1 s seeing the second of them: two certain, three at most.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.extend([(5.053, 0.025), (5.080, 0.025), (5.107, 0.025)]);
    calls.extend(steady(5.134, 10.0, 0.025));
    let windows = vec![(4.013, 4.053), (5.053, 5.132)];
    let r = record(&calls, scrape(0.1, &truth(windows, 5.132)));
    let v = judge(1, &r);
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    assert_eq!(v.measured, Some(2.0), "{}", v.sentence);
    assert!(
        v.sentence.contains("before a scrape that saw it half-open"),
        "{}",
        v.sentence
    );
    let v = judge(3, &r);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
}

#[test]
fn a_close_a_one_second_scrape_cannot_place_is_placed_by_faultds_timing() {
    // The breaker closes on its probe's answer at 5.038 s; the calls are in flight together from 5.045 s. A 1 s
    // scrape sees it closed at 6 s, so on its own it places the close in (5 s, 6 s].
    let t = scrape(1.0, &truth(vec![(4.013, 4.053), (5.013, 5.038)], 5.038));
    let r = record(&one_probe(), t);
    let spec =
        |within: &str| format!("{{ breaker: pricing, closes_within: {within}, after: healthy }}");
    let v = super::tests::verdict(&spec("5.5s"), &r);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    assert!(
        v.sentence.contains("placed by faultd's timing"),
        "{}",
        v.sentence
    );
    assert_eq!(v.measured, Some(5.045), "{}", v.sentence);
    let v = super::tests::verdict(&spec("5020ms"), &r);
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    let v = super::tests::verdict(&spec("5040ms"), &r);
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("closed between 5.038 s and 5.045 s after healthy began"),
        "{}",
        v.sentence
    );
}

#[test]
fn the_calls_after_the_scrapes_closed_sample_still_show_the_close() {
    // Closed on the probe's answer at 5.038 s, but the next call (5.060 s, held 50 ms) is the only one before the
    // scrape sees it closed at 5.1 s; the call beside it (5.105 s) comes only after that sample.
    let mut calls = closed_until_open();
    calls.push((4.013, 0.040));
    calls.push((5.013, 0.025));
    calls.push((5.060, 0.050));
    calls.extend(steady(5.105, 10.0, 0.025));
    let windows = vec![(4.013, 4.053), (5.013, 5.038)];
    let v = judge(1, &record(&calls, scrape(0.1, &truth(windows, 5.038))));
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    assert!(v.sentence.contains("counts: 1, 1;"), "{}", v.sentence);
}

/// A scrape every second, half a second after each whole second: it sees the opening at 3 s only at 3.5 s.
fn scrape_at_halves(truth: &dyn Fn(f64) -> BreakerState) -> BreakerTimeline {
    let obs: Vec<(Duration, BreakerState)> = (0..10)
        .map(|i| (s(i as f64 + 0.5), truth(i as f64 + 0.5)))
        .collect();
    BreakerTimeline::from_observations(&obs, Source::Metrics, s(1.0))
}

#[test]
fn an_opening_a_one_second_scrape_cannot_place_is_placed_by_faultds_timing() {
    // The last call let through arrives at 2.995 s and is answered at 2.997 s; nothing reaches the route after it
    // while the SUT is offered 200 requests a second, so by 3.047 s (ten spacings) the breaker was open. The scrape
    // alone places the opening in (2.5 s, 3.5 s].
    let t = scrape_at_halves(&truth(vec![(4.013, 4.053), (5.013, 5.038)], 5.038));
    let r = record(&one_probe(), t);
    let spec =
        |within: &str| format!("{{ breaker: pricing, opens_within: {within}, after: healthy }}");
    let v = super::tests::verdict(&spec("3200ms"), &r);
    assert_eq!(v.outcome(), Outcome::Pass, "{}", v.sentence);
    assert!(
        v.sentence.contains("placed by faultd's timing"),
        "{}",
        v.sentence
    );
    assert!((v.measured.unwrap() - 3.047).abs() < 1e-6, "{}", v.sentence);
    let v = super::tests::verdict(&spec("2900ms"), &r);
    assert_eq!(v.outcome(), Outcome::Fail, "{}", v.sentence);
    let v = super::tests::verdict(&spec("3s"), &r);
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("opened between 2.990 s and 3.047 s after healthy began"),
        "{}",
        v.sentence
    );

    // Calls held in flight (a pool full of hung calls) are no quiet: the opening stays where the scrape put it.
    let mut hung = one_probe();
    for c in hung.iter_mut().filter(|c| (2.9..3.0).contains(&c.0)) {
        c.1 = 2.0;
    }
    let t = scrape_at_halves(&truth(vec![(4.013, 4.053), (5.013, 5.038)], 5.038));
    let v = super::tests::verdict(&spec("3200ms"), &record(&hung, t));
    assert_eq!(v.outcome(), Outcome::Inconclusive, "{}", v.sentence);
    assert!(
        !v.sentence.contains("placed by faultd's timing"),
        "{}",
        v.sentence
    );
}
