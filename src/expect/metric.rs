//! Expectations on any of the SUT's own Prometheus metrics: a pool's active connections, a retry counter, a queue
//! depth. The series is read by the same scrape as the breakers (or from a page of its own) and judged three ways:
//! its highest value below a bound, a counter's rate between consecutive scrapes below a bound (a reset counts from
//! zero), or its last value equal to, below or above a number.
//!
//! A series the scrapes never found is INCONCLUSIVE, naming what the page held instead: a wrong name must not read
//! as a pass. Not for fetching pages (`breaker::metrics` scrapes them) nor for breaker states (`breaker::scrape`).

use faultline_units::Rate;
use serde::{Deserialize, Serialize};

use super::spec::{AtEnd, ExpectationSpec};
use super::words::{during_words, secs, trim};
use super::{ended, phase_words, span, Outcome, Verdict};
use crate::breaker::metrics::MetricSeries;
use crate::breaker::prometheus::Selector;
use crate::record::RunRecord;

/// How many names seen on the page a verdict lists when the series was not among them.
const NAMES_LISTED: usize = 12;

/// The bound on a metric series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricBound {
    /// Every scraped value below this.
    MaxBelow(f64),
    /// The counter's rate between consecutive scrapes below this.
    RateBelow(Rate),
    /// The last value scraped equal to this.
    EndEquals(f64),
    /// The last value scraped below this.
    EndBelow(f64),
    /// The last value scraped above this.
    EndAbove(f64),
}

impl MetricBound {
    fn words(&self) -> String {
        match self {
            MetricBound::MaxBelow(b) => format!("stays below {}", trim(*b)),
            MetricBound::RateBelow(r) => format!("rises slower than {}/s", trim(r.per_sec())),
            MetricBound::EndEquals(v) => format!("ends at {}", trim(*v)),
            MetricBound::EndBelow(v) => format!("ends below {}", trim(*v)),
            MetricBound::EndAbove(v) => format!("ends above {}", trim(*v)),
        }
    }

    fn bound(&self) -> f64 {
        match self {
            MetricBound::MaxBelow(b)
            | MetricBound::EndEquals(b)
            | MetricBound::EndBelow(b)
            | MetricBound::EndAbove(b) => *b,
            MetricBound::RateBelow(r) => r.per_sec(),
        }
    }
}

/// A `sut_metric` entry as written, its selector and bound read, its phase and page not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricEntry<'a> {
    pub selector: &'a str,
    pub bound: MetricBound,
    pub during: Option<&'a str>,
    pub page: Option<&'a str>,
}

/// Reads a `sut_metric` entry: a selector that parses and exactly one bound.
pub(super) fn entry<'a>(
    spec: &'a ExpectationSpec,
    selector: &'a str,
) -> Result<MetricEntry<'a>, String> {
    Selector::parse(selector).map_err(|e| format!("`sut_metric`: {e}"))?;
    let end = |a: &AtEnd| -> Result<MetricBound, String> {
        match (a.equals, a.below, a.above) {
            (Some(v), None, None) => Ok(MetricBound::EndEquals(v)),
            (None, Some(v), None) => Ok(MetricBound::EndBelow(v)),
            (None, None, Some(v)) => Ok(MetricBound::EndAbove(v)),
            _ => Err("`at_end` takes exactly one of `equals`, `below` or `above`".into()),
        }
    };
    let bounds: Vec<Result<MetricBound, String>> = [
        spec.max_below.map(|b| Ok(MetricBound::MaxBelow(b))),
        spec.rate_below.map(|r| Ok(MetricBound::RateBelow(r))),
        spec.at_end.as_ref().map(end),
    ]
    .into_iter()
    .flatten()
    .collect();
    let bound = match bounds.as_slice() {
        [one] => one.clone()?,
        _ => {
            return Err(
                "`sut_metric` needs exactly one of `max_below`, `rate_below` or `at_end`".into(),
            )
        }
    };
    if let MetricBound::MaxBelow(b)
    | MetricBound::EndEquals(b)
    | MetricBound::EndBelow(b)
    | MetricBound::EndAbove(b) = bound
    {
        if !b.is_finite() {
            return Err("a `sut_metric` bound must be a finite number".into());
        }
    }
    Ok(MetricEntry {
        selector,
        bound,
        during: spec.during.as_deref(),
        page: spec.metrics.as_deref(),
    })
}

/// A check on one series of the SUT's metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricCheck {
    /// The selector as written, `name{label="value"}`: the key of the series in the record.
    pub selector: String,
    /// The page it is scraped from: a path on the SUT's URL, or a whole URL.
    pub page: String,
    pub bound: MetricBound,
    pub during: Option<String>,
}

impl MetricCheck {
    /// The check, its page chosen: the one written, else the one page the breakers are scraped from.
    pub(super) fn resolve(
        e: MetricEntry<'_>,
        during: Option<String>,
        pages: &[String],
    ) -> Result<MetricCheck, String> {
        let page = match (e.page, pages) {
            (Some(p), _) => p.to_string(),
            (None, [one]) => one.clone(),
            (None, []) => return Err(format!("`sut_metric: {}` needs `metrics:`, the SUT's Prometheus page (a path such as /metrics, or a URL): no breaker is scraped to read it from", e.selector)),
            (None, _) => return Err(format!("`sut_metric: {}` needs `metrics:`: the breakers are scraped from {}, so name the page to read it from", e.selector, pages.join(" and "))),
        };
        if page.is_empty() {
            return Err("`metrics` is empty: give a path such as /metrics, or a URL".into());
        }
        Ok(MetricCheck {
            selector: e.selector.to_string(),
            page,
            bound: e.bound,
            during,
        })
    }

    /// The series it reads, for the scrape loop.
    pub fn series(&self) -> Selector {
        // Parsed once at validation, so it parses again here.
        Selector::parse(&self.selector).unwrap_or(Selector {
            name: self.selector.clone(),
            labels: Default::default(),
        })
    }

    pub fn name(&self) -> String {
        format!(
            "SUT metric {} {}{}",
            self.selector,
            self.bound.words(),
            during_words(&self.during)
        )
    }

    /// A highest value over the bound decides a failure at once; the rest waits for the phase's end.
    pub(crate) fn decidable_live(&self) -> bool {
        self.during.is_some() || matches!(self.bound, MetricBound::MaxBelow(_))
    }

    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let v = self.evaluate(name, record);
        let early = matches!(self.bound, MetricBound::MaxBelow(_)) && v.failed();
        (early || ended(record, &self.during)).then_some(v)
    }

    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        let s = span(record, &self.during);
        let empty = MetricSeries::default();
        let series = record.sut_metrics.get(&self.selector).unwrap_or(&empty);
        let (from, to) = (s.start.as_secs_f64(), s.end.as_secs_f64());
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(t, _)| *t >= from && *t <= to)
            .collect();
        let bound = Some(self.bound.bound());
        let inconclusive = |why: String| {
            Verdict::with_outcome(name.clone(), Outcome::Inconclusive, why, None, bound)
        };
        if points.is_empty() {
            return inconclusive(missing(
                &self.selector,
                &self.page,
                series,
                &phase_words(&s),
            ));
        }
        let at = |t: f64| secs(std::time::Duration::from_secs_f64(t.max(0.0)));
        let scrapes = format!(
            "{} scrape{}",
            points.len(),
            if points.len() == 1 { "" } else { "s" }
        );
        match self.bound {
            MetricBound::MaxBelow(b) => {
                let (t, max) =
                    points
                        .iter()
                        .copied()
                        .fold((0.0, f64::MIN), |m, p| if p.1 > m.1 { p } else { m });
                Verdict::new(
                    name,
                    max < b,
                    format!(
                        "{} peaked at {} at {} {} ({scrapes}); expected below {}",
                        self.selector,
                        trim(max),
                        at(t),
                        phase_words(&s),
                        trim(b)
                    ),
                    Some(max),
                    bound,
                )
            }
            MetricBound::RateBelow(r) => {
                let Some((t, rate)) = fastest_rise(&points) else {
                    return inconclusive(format!(
                        "{} was scraped once {}, and a rate needs two scrapes",
                        self.selector,
                        phase_words(&s)
                    ));
                };
                Verdict::new(
                    name,
                    rate < r.per_sec(),
                    format!(
                        "{} rose at most {}/s (between scrapes, up to {}) {} ({scrapes}); expected below {}/s",
                        self.selector,
                        trim(rate),
                        at(t),
                        phase_words(&s),
                        trim(r.per_sec())
                    ),
                    Some(rate),
                    bound,
                )
            }
            MetricBound::EndEquals(b) | MetricBound::EndBelow(b) | MetricBound::EndAbove(b) => {
                let (t, last) = points[points.len() - 1];
                let (holds, expected) = match self.bound {
                    MetricBound::EndEquals(_) => (last == b, format!("expected {}", trim(b))),
                    MetricBound::EndBelow(_) => (last < b, format!("expected below {}", trim(b))),
                    _ => (last > b, format!("expected above {}", trim(b))),
                };
                Verdict::new(
                    name,
                    holds,
                    format!(
                        "{} was {} at its last scrape {}, at {}; {expected}",
                        self.selector,
                        trim(last),
                        phase_words(&s),
                        at(t)
                    ),
                    Some(last),
                    bound,
                )
            }
        }
    }
}

/// The fastest rise of a counter between consecutive scrapes, per second, and when it ended. A value below the
/// one before is a reset: the counter started again from zero, so the rise is the new value.
fn fastest_rise(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    points
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let rise = if w[1].1 >= w[0].1 {
                w[1].1 - w[0].1
            } else {
                w[1].1
            };
            (w[1].0, rise / (w[1].0 - w[0].0))
        })
        .fold(None, |m: Option<(f64, f64)>, p| match m {
            Some(m) if m.1 >= p.1 => Some(m),
            _ => Some(p),
        })
}

/// Why a series has no value to judge: the page never read, the name not on it, or the name with other labels.
fn missing(selector: &str, page: &str, series: &MetricSeries, context: &str) -> String {
    if series.scrapes == 0 {
        return format!(
            "{page} could not be scraped {context}, so {selector} has no value to judge"
        );
    }
    if !series.points.is_empty() {
        return format!("{selector} was not scraped {context} (it was at other times of the run)");
    }
    if !series.labels_seen.is_empty() {
        return format!(
            "no series of {selector} in {} scrapes of {page}: its name was there with the labels {}",
            series.scrapes,
            series.labels_seen.join(", ")
        );
    }
    let name = selector.split('{').next().unwrap_or(selector);
    let mut seen = series.names_seen.clone();
    // Names that share the most words with the one asked for first: the likeliest misspellings.
    let words: Vec<&str> = name.split('_').filter(|w| w.len() > 2).collect();
    seen.sort_by_key(|n| std::cmp::Reverse(words.iter().filter(|w| n.contains(*w)).count()));
    let more = seen.len().saturating_sub(NAMES_LISTED);
    seen.truncate(NAMES_LISTED);
    let listed = if seen.is_empty() {
        "no metric at all".to_string()
    } else if more > 0 {
        format!("{} and {more} more", seen.join(", "))
    } else {
        seen.join(", ")
    };
    format!(
        "{name} never appeared in {} scrapes of {page}; the page had {listed}",
        series.scrapes
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PhaseSpan;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn record(points: &[(f64, f64)]) -> RunRecord {
        let mut r = RunRecord::empty(Duration::from_millis(100));
        r.duration = Duration::from_secs(10);
        r.phases = vec![
            PhaseSpan {
                name: "calm".into(),
                start: Duration::ZERO,
                end: Duration::from_secs(5),
            },
            PhaseSpan {
                name: "storm".into(),
                start: Duration::from_secs(5),
                end: Duration::from_secs(10),
            },
        ];
        r.sut_metrics = BTreeMap::from([(
            "pool_active".to_string(),
            MetricSeries {
                page: "/metrics".into(),
                points: points.to_vec(),
                scrapes: points.len() as u64,
                ..Default::default()
            },
        )]);
        r
    }

    fn check(bound: MetricBound, during: Option<&str>) -> MetricCheck {
        MetricCheck {
            selector: "pool_active".into(),
            page: "/metrics".into(),
            bound,
            during: during.map(str::to_string),
        }
    }

    fn judge(c: &MetricCheck, r: &RunRecord) -> Verdict {
        c.evaluate(c.name(), r)
    }

    #[test]
    fn the_highest_value_of_the_phase_is_held_against_the_bound() {
        let r = record(&[(1.0, 4.0), (4.0, 30.0), (6.0, 12.0), (9.0, 18.0)]);
        let storm = judge(&check(MetricBound::MaxBelow(20.0), Some("storm")), &r);
        assert!(storm.passed, "{}", storm.sentence);
        assert_eq!(storm.measured, Some(18.0));
        let whole = judge(&check(MetricBound::MaxBelow(20.0), None), &r);
        assert!(whole.failed(), "{}", whole.sentence);
        assert!(
            whole.sentence.contains("peaked at 30 at 4.0 s"),
            "{}",
            whole.sentence
        );
    }

    #[test]
    fn a_counters_rate_is_taken_between_scrapes_and_a_reset_counts_from_zero() {
        // 10/s, then a reset to 3 (a restart: 3 since zero in 1 s), then 40 in 1 s.
        let r = record(&[(5.0, 100.0), (6.0, 110.0), (7.0, 3.0), (8.0, 43.0)]);
        let v = judge(
            &check(
                MetricBound::RateBelow(Rate::per_second(50.0)),
                Some("storm"),
            ),
            &r,
        );
        assert!(v.passed, "{}", v.sentence);
        assert_eq!(v.measured, Some(40.0));
        let v = judge(
            &check(
                MetricBound::RateBelow(Rate::per_second(40.0)),
                Some("storm"),
            ),
            &r,
        );
        assert!(v.failed(), "{}", v.sentence);
        assert_eq!(fastest_rise(&[(1.0, 5.0), (2.0, 2.0)]), Some((2.0, 2.0)));
        let once = judge(
            &check(MetricBound::RateBelow(Rate::per_second(1.0)), Some("storm")),
            &record(&[(6.0, 1.0)]),
        );
        assert!(once.inconclusive(), "{}", once.sentence);
    }

    #[test]
    fn the_last_value_of_the_phase_is_the_one_at_its_end() {
        let r = record(&[(4.5, 7.0), (9.5, 0.0)]);
        assert!(judge(&check(MetricBound::EndEquals(0.0), None), &r).passed);
        let calm = judge(&check(MetricBound::EndEquals(0.0), Some("calm")), &r);
        assert!(calm.failed(), "{}", calm.sentence);
        assert!(
            calm.sentence
                .contains("was 7 at its last scrape during calm"),
            "{}",
            calm.sentence
        );
        assert!(judge(&check(MetricBound::EndBelow(8.0), Some("calm")), &r).passed);
        assert!(judge(&check(MetricBound::EndAbove(8.0), Some("calm")), &r).failed());
    }

    #[test]
    fn a_series_never_found_is_inconclusive_and_names_what_the_page_had() {
        let mut r = record(&[]);
        let series = r.sut_metrics.get_mut("pool_active").unwrap();
        series.scrapes = 9;
        series.names_seen = vec![
            "up".into(),
            "hikari_pool_active_connections".into(),
            "process_cpu_seconds_total".into(),
        ];
        let v = judge(&check(MetricBound::MaxBelow(1.0), None), &r);
        assert!(v.inconclusive(), "{}", v.sentence);
        assert!(
            v.sentence.contains("pool_active never appeared in 9 scrapes of /metrics; the page had hikari_pool_active_connections, up"),
            "{}",
            v.sentence
        );
        let series = r.sut_metrics.get_mut("pool_active").unwrap();
        series.labels_seen = vec![r#"{pool="main"}"#.into()];
        let v = judge(&check(MetricBound::MaxBelow(1.0), None), &r);
        assert!(
            v.sentence
                .contains(r#"its name was there with the labels {pool="main"}"#),
            "{}",
            v.sentence
        );
        r.sut_metrics.clear();
        let v = judge(&check(MetricBound::MaxBelow(1.0), None), &r);
        assert!(
            v.inconclusive() && v.sentence.contains("/metrics could not be scraped"),
            "{}",
            v.sentence
        );
    }

    #[test]
    fn entries_take_one_bound_and_a_page_that_can_be_found() {
        let spec = |y: &str| -> ExpectationSpec { serde_saphyr::from_str(y).unwrap() };
        let s = spec("{ sut_metric: 'q{a=\"b\"}', max_below: 3 }");
        let e = entry(&s, s.sut_metric.as_deref().unwrap()).unwrap();
        assert_eq!(e.bound, MetricBound::MaxBelow(3.0));
        assert!(MetricCheck::resolve(e.clone(), None, &[])
            .unwrap_err()
            .contains("needs `metrics:`"));
        assert_eq!(
            MetricCheck::resolve(e.clone(), None, &["/metrics".into()])
                .unwrap()
                .page,
            "/metrics"
        );
        let two = MetricCheck::resolve(e, None, &["/a".into(), "/b".into()]).unwrap_err();
        assert!(two.contains("/a and /b"), "{two}");
        let s = spec("{ sut_metric: q, max_below: 3, rate_below: 2/s }");
        assert!(entry(&s, "q").unwrap_err().contains("exactly one"));
        let s = spec("{ sut_metric: q, at_end: { equals: 0, below: 1 } }");
        assert!(entry(&s, "q")
            .unwrap_err()
            .contains("`at_end` takes exactly one"));
        let s = spec("{ sut_metric: 'q{', max_below: 1 }");
        assert!(entry(&s, "q{").is_err());
    }
}
