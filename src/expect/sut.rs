//! Expectations on what the SUT's callers saw, as loadgen measured it from the intended send time: a latency
//! percentile under a bound (fast failure while the breaker is open), and the share of one outcome class over or
//! under a bound (fallbacks served, errors kept low). Either holds over a whole phase, or with `over: W` over every
//! sliding window of length W inside it, so a bad minute inside a good hour fails.
//!
//! Windows are computed exactly: per-bucket HDR histograms are added (never percentiles averaged) and per-bucket
//! counts summed. Not for the dependency's side of the traffic (`dependency`).

use std::ops::Range;
use std::time::Duration;

use faultline_units::{Dur, Rate, Share};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::words::{during_words, ms, trim, trim2};
use super::{ended, phase_words, span, timeline, Outcome, Verdict};
use crate::breaker::BreakerState;
use crate::record::{ByClass, OutcomeClass, PhaseSpan, RunRecord};

/// A latency percentile, as a quantile (`max` is 1.0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentile(pub f64);

impl Percentile {
    pub fn parse(s: &str) -> Option<Self> {
        if s == "max" {
            return Some(Percentile(1.0));
        }
        let p: f64 = s.strip_prefix('p')?.parse().ok()?;
        (p > 0.0 && p < 100.0).then_some(Percentile(p / 100.0))
    }

    pub fn label(self) -> String {
        if self.0 >= 1.0 {
            "max".into()
        } else {
            format!("p{}", trim(self.0 * 100.0))
        }
    }

    fn of(self, h: &Histogram<u64>) -> Duration {
        let v = if self.0 >= 1.0 {
            h.max()
        } else {
            h.value_at_quantile(self.0)
        };
        Duration::from_nanos(v)
    }
}

/// Which requests a share counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShareOf {
    Class(OutcomeClass),
    /// Client errors, server errors, timeouts and connect errors together.
    Errors,
}

impl ShareOf {
    pub fn parse(s: &str) -> Option<Self> {
        if s == "error" || s == "errors" {
            return Some(ShareOf::Errors);
        }
        OutcomeClass::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .map(ShareOf::Class)
    }

    fn name(self) -> &'static str {
        match self {
            ShareOf::Class(c) => c.name(),
            ShareOf::Errors => "error",
        }
    }

    fn count(self, by: &ByClass) -> u64 {
        match self {
            ShareOf::Class(c) => by.get(c),
            ShareOf::Errors => [
                OutcomeClass::ClientError,
                OutcomeClass::ServerError,
                OutcomeClass::Timeout,
                OutcomeClass::ConnectError,
            ]
            .iter()
            .map(|&c| by.get(c))
            .sum(),
        }
    }
}

/// A check on the SUT's latency or outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SutCheck {
    Latency {
        percentile: Percentile,
        below: Dur,
        during: Option<String>,
        while_open: Option<String>,
        /// Every sliding window of this length must hold the bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        over: Option<Dur>,
        /// Only requests of this outcome class count (judged per phase, as loadgen recorded it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<OutcomeClass>,
    },
    /// Requests answered `ok` or `fallback` per second, at least this rate.
    Goodput {
        at_least: Rate,
        during: Option<String>,
        /// Every sliding window of this length must hold the bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        over: Option<Dur>,
    },
    Share {
        of: ShareOf,
        bound: Share,
        above: bool,
        during: Option<String>,
        /// Every sliding window of this length must hold the bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        over: Option<Dur>,
    },
}

fn over_words(o: &Option<Dur>) -> String {
    o.map(|w| format!(" over every {w} window"))
        .unwrap_or_default()
}

impl SutCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            SutCheck::Latency {
                percentile,
                below,
                during,
                while_open,
                over,
                class,
            } => format!(
                "SUT {}{} stays below {below}{}{}{}",
                percentile.label(),
                class
                    .map(|c| format!(" of {}", c.name()))
                    .unwrap_or_default(),
                over_words(over),
                during_words(during),
                while_open
                    .as_ref()
                    .map(|b| format!(" while {b} is open"))
                    .unwrap_or_default()
            ),
            SutCheck::Goodput {
                at_least,
                during,
                over,
            } => format!(
                "SUT goodput stays at least {}/s{}{}",
                trim(at_least.per_sec()),
                over_words(over),
                during_words(during)
            ),
            SutCheck::Share {
                of,
                bound,
                above,
                during,
                over,
            } => format!(
                "{} share stays {} {bound}{}{}",
                of.name(),
                if *above { "above" } else { "below" },
                over_words(over),
                during_words(during)
            ),
        }
    }

    fn during(&self) -> &Option<String> {
        match self {
            SutCheck::Latency { during, .. }
            | SutCheck::Goodput { during, .. }
            | SutCheck::Share { during, .. } => during,
        }
    }

    fn over(&self) -> Option<Dur> {
        match self {
            SutCheck::Latency { over, .. }
            | SutCheck::Goodput { over, .. }
            | SutCheck::Share { over, .. } => *over,
        }
    }

    /// A bound over a phase is known once the phase has ended; with sliding windows, a window that breaks the
    /// bound decides it at once. A bound over the whole run waits for its end.
    /// Latency by class is read from loadgen's phase recordings, which only a finished run has.
    pub(crate) fn decidable_live(&self) -> bool {
        if let SutCheck::Latency { class: Some(_), .. } = self {
            return false;
        }
        self.during().is_some() || self.over().is_some()
    }

    /// The verdict once no later data can change it.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        self.decide_after(name, record, 0)
    }

    /// [`SutCheck::decide`] on a record whose first `judged` buckets were already asked about (on a record that
    /// held them, and decided nothing): only the sliding windows that end after them can newly break the bound,
    /// so only those are read, and the verdict is the one `decide` gives. A bound over a phase still going on is
    /// not evaluated at all.
    pub(crate) fn decide_after(
        &self,
        name: String,
        record: &RunRecord,
        judged: usize,
    ) -> Option<Verdict> {
        if !self.decidable_live() {
            return None;
        }
        let ended = ended(record, self.during());
        if self.over().is_none() {
            return ended.then(|| self.evaluate(name, record));
        }
        if !ended && judged > 0 {
            let tail = self.evaluate_from(name.clone(), record, judged);
            if tail.passed || tail.measured.is_none() {
                return None;
            }
        }
        let v = self.evaluate(name, record);
        let windowed_failure = !v.passed && v.measured.is_some();
        (windowed_failure || ended).then_some(v)
    }

    /// Evaluates the check on a record.
    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        self.evaluate_from(name, record, 0)
    }

    /// Evaluates the check on a record, its sliding windows only those that end after bucket `after`.
    fn evaluate_from(&self, name: String, record: &RunRecord, after: usize) -> Verdict {
        match self {
            SutCheck::Latency {
                percentile,
                below,
                during,
                while_open,
                over,
                class,
            } => {
                let s = span(record, during);
                if let Some(c) = class {
                    return class_latency(name, record, &s, *c, *percentile, *below);
                }
                if let Some(w) = over {
                    return latency_windows(
                        name,
                        record,
                        &s,
                        (*percentile, *below),
                        w.get(),
                        after,
                    );
                }
                let mut spans = vec![(s.start, s.end)];
                if let Some(b) = while_open {
                    spans = timeline(record, b).spans_in(BreakerState::Open, s.start, s.end);
                }
                let buckets: Vec<usize> = spans
                    .iter()
                    .flat_map(|&(a, b)| record.buckets_in(a, b))
                    .collect();
                let context = format!(
                    "{}{}",
                    phase_words(&s),
                    while_open
                        .as_ref()
                        .map(|b| format!(" while {b} was open"))
                        .unwrap_or_default()
                );
                match record.sut_percentile(buckets.into_iter(), percentile.0) {
                    Some(v) => Verdict::new(name, v < below.get(), format!("SUT {} was {} {context}; expected below {below}", percentile.label(), ms(v)), Some(v.as_secs_f64()), Some(below.as_secs_f64())),
                    None => Verdict::new(name, false, format!("no SUT request completed {context}, so there is no {} to check; expected below {below}", percentile.label()), None, Some(below.as_secs_f64())),
                }
            }
            SutCheck::Goodput {
                at_least,
                during,
                over,
            } => {
                let s = span(record, during);
                let window = over
                    .map(|w| w.get())
                    .unwrap_or(s.end.saturating_sub(s.start));
                goodput(name, record, &s, *at_least, (window, after), over.is_some())
            }
            SutCheck::Share {
                of,
                bound,
                above,
                during,
                over,
            } => {
                let s = span(record, during);
                if let Some(w) = over {
                    return share_windows(name, record, &s, (*of, *bound, *above), w.get(), after);
                }
                let by = classes_in(record, record.buckets_in(s.start, s.end));
                let total = by.total();
                if total == 0 {
                    return Verdict::new(
                        name,
                        false,
                        format!("no SUT request ended {}", phase_words(&s)),
                        None,
                        Some(bound.fraction()),
                    );
                }
                let n = of.count(&by);
                let share = n as f64 / total as f64;
                Verdict::new(
                    name,
                    holds(share, *bound, *above),
                    format!(
                        "{} share was {}% {} ({n} of {total} requests); expected {} {bound}",
                        of.name(),
                        trim2(share * 100.0),
                        phase_words(&s),
                        if *above { "above" } else { "below" }
                    ),
                    Some(share),
                    Some(bound.fraction()),
                )
            }
        }
    }
}

/// The outcome class `class:` names for a latency: any class but `dropped`, which was never sent; only over a phase
/// or the run, since loadgen keeps latency by class per phase.
pub(super) fn latency_class(c: &str, windowed: bool) -> Result<OutcomeClass, String> {
    let class = OutcomeClass::ALL
        .into_iter()
        .find(|k| k.name() == c && *k != OutcomeClass::Dropped)
        .ok_or_else(|| format!("`class` is {c:?}; expected one of ok, fallback, client_error, server_error, timeout, connect_error"))?;
    if windowed {
        return Err("`class` judges a phase or the run as loadgen recorded it, by class: it does not combine with `over` or `while_open`".into());
    }
    Ok(class)
}

/// A latency percentile of one outcome class over a phase (its sub-phases merged) or the run.
fn class_latency(
    name: String,
    record: &RunRecord,
    s: &PhaseSpan,
    class: OutcomeClass,
    percentile: Percentile,
    below: Dur,
) -> Verdict {
    let bound = Some(below.as_secs_f64());
    let whole = s.name == "the run";
    let mut merged: Option<Histogram<u64>> = None;
    for (phase, by_class) in &record.sut_class_latency {
        let inside = whole || *phase == s.name || phase.starts_with(&format!("{}.", s.name));
        if let (true, Some(h)) = (inside, by_class.get(&class)) {
            match merged.as_mut() {
                Some(m) => {
                    let _ = m.add(h);
                }
                None => merged = Some(h.clone()),
            }
        }
    }
    let label = percentile.label();
    let cls = class.name();
    match merged.filter(|h| !h.is_empty()) {
        Some(h) => {
            let v = percentile.of(&h);
            Verdict::new(
                name,
                v < below.get(),
                format!(
                    "SUT {label} of {cls} answers was {} {} ({} of them); expected below {below}",
                    ms(v),
                    phase_words(s),
                    h.len()
                ),
                Some(v.as_secs_f64()),
                bound,
            )
        }
        None => Verdict::with_outcome(
            name,
            Outcome::Inconclusive,
            format!(
                "no SUT request ended {cls} {}, so there is no {label} of them to check",
                phase_words(s)
            ),
            None,
            bound,
        ),
    }
}

/// Goodput, answers of class ok or fallback per second, over the span or every sliding window of `window`; the
/// worst window is the one reported.
fn goodput(
    name: String,
    record: &RunRecord,
    s: &PhaseSpan,
    at_least: Rate,
    (window, after): (Duration, usize),
    sliding: bool,
) -> Verdict {
    let (ranges, _) = windows_ending_after(record, s, window, after);
    let bucket = record.bucket.as_secs_f64();
    let worst = ranges
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| {
            let by = classes_in(record, r.clone());
            let good = by.get(OutcomeClass::Ok) + by.get(OutcomeClass::Fallback);
            (good as f64 / (r.len() as f64 * bucket), good, r.clone())
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let bound = at_least.per_sec();
    let Some((rate, good, r)) = worst else {
        return Verdict::with_outcome(
            name,
            Outcome::Inconclusive,
            format!(
                "no time {} was recorded, so there is no goodput to check",
                phase_words(s)
            ),
            None,
            Some(bound),
        );
    };
    let secs_in = Dur(record.bucket * r.len() as u32);
    let place = if sliding {
        format!(
            "in the {} window {} {}, the worst of {}",
            Dur(window),
            window_words(record, &r),
            phase_words(s),
            ranges.len()
        )
    } else {
        phase_words(s)
    };
    Verdict::new(
        name,
        rate >= bound,
        format!(
            "SUT goodput was {}/s {place} ({good} ok or fallback answers in {secs_in}); expected at least {}/s",
            trim2(rate),
            trim(bound)
        ),
        Some(rate),
        Some(bound),
    )
}

fn holds(share: f64, bound: Share, above: bool) -> bool {
    if above {
        share > bound.fraction()
    } else {
        share < bound.fraction()
    }
}

fn classes_in(record: &RunRecord, buckets: Range<usize>) -> ByClass {
    let mut by = ByClass::default();
    for i in buckets {
        if let Some(b) = record.sut.get(i) {
            by.merge(&b.completed);
        }
    }
    by
}

/// The sliding windows of `window` inside a span: ranges of whole buckets, one starting at every bucket, each
/// `window` long (the whole span when it is shorter than one window). Buckets the record does not have yet are
/// left out, so on a run still going on only the windows already complete are judged.
pub(crate) fn windows(
    record: &RunRecord,
    s: &PhaseSpan,
    window: Duration,
) -> (Vec<Range<usize>>, usize) {
    windows_ending_after(record, s, window, 0)
}

/// [`windows`] that end after bucket `after`: those a record grown past `after` adds.
pub(crate) fn windows_ending_after(
    record: &RunRecord,
    s: &PhaseSpan,
    window: Duration,
    after: usize,
) -> (Vec<Range<usize>>, usize) {
    let span = record.buckets_in(s.start, s.end);
    let have = span.start..span.end.min(record.sut.len());
    let width = ((window.as_nanos() + record.bucket.as_nanos() / 2)
        / record.bucket.as_nanos().max(1))
    .max(1) as usize;
    if span.len() <= width {
        // One window, the whole span: judged only once the record holds all of it.
        let whole = if have.end >= span.end && (after == 0 || have.end > after) {
            vec![have]
        } else {
            Vec::new()
        };
        return (whole, span.len());
    }
    let last_start = have.end.saturating_sub(width);
    let first_start = have.start.max((after + 1).saturating_sub(width));
    let ranges = (first_start..=last_start)
        .take_while(|&a| a + width <= have.end)
        .map(|a| a..a + width)
        .collect();
    (ranges, width)
}

pub(crate) fn window_words(record: &RunRecord, r: &Range<usize>) -> String {
    format!(
        "{:.1}-{:.1} s",
        record.bucket_start(r.start).as_secs_f64(),
        record.bucket_start(r.end).as_secs_f64()
    )
}

/// The latency bound over every sliding window: adds and subtracts per-bucket histograms as the window slides, so
/// each window's percentile is exact.
fn latency_windows(
    name: String,
    record: &RunRecord,
    s: &PhaseSpan,
    (percentile, below): (Percentile, Dur),
    window: Duration,
    after: usize,
) -> Verdict {
    let (ranges, _) = windows_ending_after(record, s, window, after);
    let mut worst: Option<(Duration, Range<usize>)> = None;
    let mut judged = 0usize;
    let mut sum: Option<Histogram<u64>> = None;
    let mut covered: Range<usize> = 0..0;
    for r in &ranges {
        let slides = sum.is_some()
            && covered.start < r.start
            && r.start < covered.end
            && covered.end <= r.end;
        if !slides {
            sum = Some(
                record
                    .sut_latency
                    .merged(r.clone())
                    .unwrap_or_else(faultline_hdr::new_histogram),
            );
        }
        let Some(h) = sum.as_mut() else { continue };
        if slides {
            for b in (covered.start..r.start).filter_map(|i| record.sut_latency.get(i)) {
                let _ = h.subtract(&b);
            }
            for b in (covered.end..r.end).filter_map(|i| record.sut_latency.get(i)) {
                let _ = h.add(&b);
            }
        }
        covered = r.clone();
        if h.is_empty() {
            continue;
        }
        judged += 1;
        let v = percentile.of(h);
        if worst.as_ref().is_none_or(|(w, _)| v > *w) {
            worst = Some((v, r.clone()));
        }
    }
    let label = percentile.label();
    let w = Dur(window);
    match worst {
        None => Verdict::new(
            name,
            false,
            format!(
                "no SUT request completed {}, so there is no {label} to check; expected below {below} over every {w} window",
                phase_words(s)
            ),
            None,
            Some(below.as_secs_f64()),
        ),
        Some((v, r)) => {
            let passed = v < below.get();
            let text = if passed {
                format!(
                    "SUT {label} stayed at or under {} in all {judged} {w} windows {} (worst {}); expected below {below} in every one",
                    ms(v),
                    phase_words(s),
                    window_words(record, &r)
                )
            } else {
                format!(
                    "SUT {label} was {} in the {w} window {} {} (the worst of {judged}); expected below {below} in every one",
                    ms(v),
                    window_words(record, &r),
                    phase_words(s)
                )
            };
            Verdict::new(
                name,
                passed,
                text,
                Some(v.as_secs_f64()),
                Some(below.as_secs_f64()),
            )
        }
    }
}

/// The share bound over every sliding window: counts per bucket summed as the window slides.
fn share_windows(
    name: String,
    record: &RunRecord,
    s: &PhaseSpan,
    (of, bound, above): (ShareOf, Share, bool),
    window: Duration,
    after: usize,
) -> Verdict {
    let (ranges, _) = windows_ending_after(record, s, window, after);
    let mut worst: Option<(f64, u64, u64, Range<usize>)> = None;
    let mut judged = 0usize;
    for r in &ranges {
        let by = classes_in(record, r.clone());
        let total = by.total();
        if total == 0 {
            continue;
        }
        judged += 1;
        let n = of.count(&by);
        let share = n as f64 / total as f64;
        let worse = match &worst {
            None => true,
            Some((w, ..)) if above => share < *w,
            Some((w, ..)) => share > *w,
        };
        if worse {
            worst = Some((share, n, total, r.clone()));
        }
    }
    let w = Dur(window);
    let direction = if above { "above" } else { "below" };
    match worst {
        None => Verdict::new(
            name,
            false,
            format!("no SUT request ended {}", phase_words(s)),
            None,
            Some(bound.fraction()),
        ),
        Some((share, n, total, r)) => {
            let passed = holds(share, bound, above);
            let text = if passed {
                format!(
                    "{} share stayed {direction} {bound} in all {judged} {w} windows {} (worst {}% in {}, {n} of {total} requests); expected {direction} {bound} in every one",
                    of.name(),
                    phase_words(s),
                    trim2(share * 100.0),
                    window_words(record, &r)
                )
            } else {
                format!(
                    "{} share was {}% in the {w} window {} {} ({n} of {total} requests, the worst of {judged}); expected {direction} {bound} in every one",
                    of.name(),
                    trim2(share * 100.0),
                    window_words(record, &r),
                    phase_words(s)
                )
            };
            Verdict::new(name, passed, text, Some(share), Some(bound.fraction()))
        }
    }
}
