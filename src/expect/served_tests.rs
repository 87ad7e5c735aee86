//! Goodput and latency by outcome class, on synthetic recordings: an overload phase that serves at full rate for
//! its first half and collapses in its second.

use std::collections::BTreeMap;
use std::time::Duration;

use faultline_units::{Dur, Rate};
use hdrhistogram::Histogram;

use super::entry::{self, Entry};
use super::*;
use crate::record::{ByClass, OutcomeClass, PhaseSpan, RunRecord, SutBucket};

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// 10 s at 100 ms buckets, phase `overload` from 0 s: 15 ok and 5 fallback answers per bucket for 5 s (200/s of
/// goodput), then 2 ok and 18 timeouts per bucket (20/s).
fn overload() -> RunRecord {
    let mut r = RunRecord::empty(Duration::from_millis(100));
    r.duration = s(10.0);
    r.phases = vec![PhaseSpan {
        name: "overload".into(),
        start: s(0.0),
        end: s(10.0),
    }];
    for i in 0..100 {
        let mut completed = ByClass::default();
        if i < 50 {
            completed.add(OutcomeClass::Ok, 15);
            completed.add(OutcomeClass::Fallback, 5);
        } else {
            completed.add(OutcomeClass::Ok, 2);
            completed.add(OutcomeClass::Timeout, 18);
        }
        r.sut.push(SutBucket {
            offered: 20,
            completed,
            ..Default::default()
        });
        r.sut_latency.push(Histogram::new(3).unwrap());
    }
    r
}

fn goodput(at_least: f64, over: Option<f64>) -> SutCheck {
    SutCheck::Goodput {
        at_least: Rate::per_second(at_least),
        during: Some("overload".into()),
        over: over.map(|w| Dur(s(w))),
    }
}

fn judge(c: &SutCheck, r: &RunRecord) -> Verdict {
    c.evaluate(c.name(), r)
}

#[test]
fn goodput_counts_ok_and_fallback_answers_per_second_of_the_phase() {
    let r = overload();
    let v = judge(&goodput(100.0, None), &r);
    assert!(v.passed, "{}", v.sentence);
    assert_eq!(v.measured, Some(110.0));
    assert!(
        v.sentence
            .contains("SUT goodput was 110/s during overload (1100 ok or fallback answers in 10s)"),
        "{}",
        v.sentence
    );
    assert!(judge(&goodput(120.0, None), &r).failed());
}

#[test]
fn goodput_over_sliding_windows_finds_the_collapse_inside_a_good_average() {
    let r = overload();
    let v = judge(&goodput(100.0, Some(2.0)), &r);
    assert!(v.failed(), "{}", v.sentence);
    assert_eq!(v.measured, Some(20.0));
    assert!(v.sentence.contains("in the 2s window"), "{}", v.sentence);
    // Every window of the first half holds 200/s.
    let mut first_half = overload();
    first_half.phases[0].end = s(5.0);
    assert_eq!(
        judge(&goodput(190.0, Some(2.0)), &first_half).measured,
        Some(200.0)
    );
}

fn class_latency(class: OutcomeClass, below_ms: u64) -> SutCheck {
    SutCheck::Latency {
        percentile: Percentile(0.99),
        below: Dur(Duration::from_millis(below_ms)),
        during: Some("overload".into()),
        while_open: None,
        over: None,
        class: Some(class),
    }
}

#[test]
fn latency_by_class_merges_the_phase_and_its_steps_and_ignores_other_classes() {
    let mut r = overload();
    let ms = |v: u64, n: u64| {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record_n(v * 1_000_000, n).unwrap();
        h
    };
    r.sut_class_latency = BTreeMap::from([
        (
            "overload".to_string(),
            BTreeMap::from([
                (OutcomeClass::ServerError, ms(1, 500)),
                (OutcomeClass::Timeout, ms(2000, 500)),
            ]),
        ),
        (
            "overload.2".to_string(),
            BTreeMap::from([(OutcomeClass::ServerError, ms(2, 500))]),
        ),
        (
            "other".to_string(),
            BTreeMap::from([(OutcomeClass::ServerError, ms(900, 500))]),
        ),
    ]);
    let v = judge(&class_latency(OutcomeClass::ServerError, 5), &r);
    assert!(v.passed, "{}", v.sentence);
    assert!(
        v.sentence
            .contains("SUT p99 of server_error answers was 2 ms during overload (1000 of them)"),
        "{}",
        v.sentence
    );
    assert!(judge(&class_latency(OutcomeClass::Timeout, 5), &r).failed());
    let none = judge(&class_latency(OutcomeClass::Fallback, 5), &r);
    assert!(none.inconclusive(), "{}", none.sentence);
    assert!(!class_latency(OutcomeClass::Fallback, 5).decidable_live());
}

#[test]
fn entries_read_goodput_and_a_latency_class() {
    let read = |y: &str| -> Result<Entry<'static>, String> {
        let spec: &'static ExpectationSpec =
            Box::leak(Box::new(serde_saphyr::from_str(y).unwrap()));
        entry::Entry::read(spec)
    };
    assert!(matches!(
        read("{ sut_goodput_at_least: 180/s, during: overload, over: 2s }"),
        Ok(entry::Entry::Sut(entry::SutEntry::Goodput { .. }))
    ));
    let stray = read("{ sut_goodput_at_least: 180/s, below: 5ms }").unwrap_err();
    assert!(
        stray.contains("`below` does not apply to `sut_goodput_at_least`"),
        "{stray}"
    );
    assert!(read("{ sut_latency: p99, below: 5ms, class: server_error }").is_ok());
    let dropped = read("{ sut_latency: p99, below: 5ms, class: dropped }").unwrap_err();
    assert!(
        dropped.contains("expected one of ok, fallback"),
        "{dropped}"
    );
    let windowed =
        read("{ sut_latency: p99, below: 5ms, class: server_error, over: 2s }").unwrap_err();
    assert!(
        windowed.contains("does not combine with `over`"),
        "{windowed}"
    );
}
