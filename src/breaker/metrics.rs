//! Breaker states scraped from the SUT's Prometheus endpoint on an interval: one task per URL serves every breaker
//! read from it, and every other series the expectations read from it (`sut_metric`), each sample stamped with its
//! time on the run's clock.
//!
//! Not for reading a state off a page (`scrape`) nor for turning samples into transitions
//! (`BreakerTimeline::from_observations`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::prometheus::{self, Sample, Selector};
use super::scrape::StateMapping;
use super::BreakerState;
use serde::{Deserialize, Serialize};

/// One series of the SUT's own metrics as the run scraped it: the value of the matching series (summed) at each
/// successful scrape, and what the page held when nothing matched, so a wrong name can be told apart from a page
/// that was never read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricSeries {
    /// The page it was read from.
    pub page: String,
    /// The run's time of each scrape in which the series was found, and its value.
    pub points: Vec<(f64, f64)>,
    /// Scrapes that read the page, whether or not the series was on it.
    pub scrapes: u64,
    /// The metric names the last page read held (when the series was never found), for the verdict to name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names_seen: Vec<String>,
    /// The label sets the metric's own name carried on that page, when the name was there but the labels did not
    /// match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels_seen: Vec<String>,
}

/// Scraped states per breaker, with their time from the origin.
pub type Scraped = Arc<Mutex<BTreeMap<String, Vec<(Duration, BreakerState)>>>>;

/// Scraped series of the SUT's own metrics, by the selector as written.
pub type ScrapedSeries = Arc<Mutex<BTreeMap<String, MetricSeries>>>;

/// What one scrape loop reads off its page.
pub struct Reads {
    pub breakers: Vec<(String, StateMapping)>,
    /// Series of the SUT's own metrics: the selector as written, and parsed.
    pub series: Vec<(String, Selector)>,
}

/// How many label sets of a metric's name a series that never matched keeps, for its verdict.
const LABEL_SETS_KEPT: usize = 5;

/// Scrapes `url` every `interval` from `origin` until aborted, recording the state of each breaker in `breakers`.
/// A failed scrape records nothing: the gap shows as a coarser transition, never a wrong one.
pub async fn scrape_loop(
    url: String,
    interval: Duration,
    reads: Reads,
    origin: Instant,
    out: Scraped,
    out_series: ScrapedSeries,
) {
    let Ok(client) = crate::http::client_builder()
        .timeout(interval.max(Duration::from_millis(50)))
        .build()
    else {
        return;
    };
    let mut ticker = tokio::time::interval_at(origin, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let at = Instant::now().saturating_duration_since(origin);
        let Ok(resp) = client.get(&url).send().await else {
            continue;
        };
        let Ok(page) = resp.text().await else {
            continue;
        };
        let (samples, _) = prometheus::parse(&page);
        if let Ok(mut out) = out.lock() {
            for (name, mapping) in &reads.breakers {
                if let Some(state) = mapping.state(&samples) {
                    out.entry(name.clone()).or_default().push((at, state));
                }
            }
        }
        if let Ok(mut out) = out_series.lock() {
            for (key, selector) in &reads.series {
                let series = out.entry(key.clone()).or_insert_with(|| MetricSeries {
                    page: url.clone(),
                    ..Default::default()
                });
                read_series(series, selector, &samples, at);
            }
        }
    }
}

/// Adds one scrape of a page to a series: the sum of the matching samples, or, while none has ever matched, what the
/// page held instead.
fn read_series(series: &mut MetricSeries, selector: &Selector, samples: &[Sample], at: Duration) {
    series.scrapes += 1;
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| selector.matches(s))
        .map(|s| s.value)
        .collect();
    if !matching.is_empty() {
        series
            .points
            .push((at.as_secs_f64(), matching.iter().sum()));
        series.names_seen.clear();
        series.labels_seen.clear();
        return;
    }
    if !series.points.is_empty() {
        return;
    }
    let mut names: Vec<String> = samples.iter().map(|s| s.name.clone()).collect();
    names.sort();
    names.dedup();
    series.names_seen = names;
    series.labels_seen = samples
        .iter()
        .filter(|s| s.name == selector.name)
        .take(LABEL_SETS_KEPT)
        .map(|s| {
            let pairs: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("{{{}}}", pairs.join(","))
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_sums_its_matches_and_remembers_the_page_while_it_never_matched() {
        let mut series = MetricSeries::default();
        let wanted = Selector::parse(r#"pool_active{pool="main"}"#).unwrap();
        let (page, _) = prometheus::parse("up 1\npool_active{pool=\"other\"} 4\n");
        read_series(&mut series, &wanted, &page, Duration::from_secs(1));
        assert!(series.points.is_empty());
        assert_eq!(series.names_seen, ["pool_active", "up"]);
        assert_eq!(series.labels_seen, [r#"{pool="other"}"#]);
        let (page, _) = prometheus::parse(
            "pool_active{pool=\"main\",instance=\"0\"} 4\npool_active{pool=\"main\",instance=\"1\"} 3\n",
        );
        read_series(&mut series, &wanted, &page, Duration::from_secs(2));
        assert_eq!(series.points, [(2.0, 7.0)]);
        assert_eq!(series.scrapes, 2);
        assert!(series.names_seen.is_empty() && series.labels_seen.is_empty());
    }
}
