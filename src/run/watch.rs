//! Every breaker of a run watched at once, from whichever source the scenario names for it: the scrape loops, the
//! webhook's events, the SUT's log lines, and inference from traffic. It hands out one `BreakerTimeline` per breaker
//! at any moment, so the same timelines feed the live verdicts during the run and the final ones after it.
//!
//! Not for judging timelines (`expect`) nor for starting the SUT whose lines it reads.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::breaker::metrics::MetricSeries;
use crate::breaker::metrics::{scrape_loop, Reads, Scraped, ScrapedSeries};
use crate::breaker::webhook::{self, Events};
use crate::breaker::{log, BreakerState, BreakerTimeline, Source};
use crate::expect::Check;
use crate::output::OutputLine;
use crate::record::RunRecord;
use crate::scenario::{Observation, Validated};

/// The breakers of a run under observation.
pub struct BreakerWatch {
    sources: BTreeMap<String, Vec<Observation>>,
    /// The route each breaker guards, where known: what inference reads.
    routes: BTreeMap<String, String>,
    scraped: Scraped,
    series: ScrapedSeries,
    events: Events,
    lines: Vec<OutputLine>,
    scrapers: Vec<JoinHandle<()>>,
    origin: Instant,
    origin_wall: SystemTime,
}

/// The timelines at one moment: for each breaker the finest of its own sources (the one verdicts time
/// transitions with), the one inferred from traffic (for every breaker whose route is known), and every timeline
/// there is for it, its sources and the inferred one, for cross-checks and for verdicts that count.
#[derive(Debug, Clone, Default)]
pub struct Timelines {
    pub observed: BTreeMap<String, BreakerTimeline>,
    pub inferred: BTreeMap<String, BreakerTimeline>,
    pub evidence: BTreeMap<String, Vec<BreakerTimeline>>,
    /// The series of the SUT's own metrics the expectations read, by selector.
    pub metrics: BTreeMap<String, MetricSeries>,
}

/// How often a page scraped only for `sut_metric` expectations is read.
const METRICS_INTERVAL: Duration = Duration::from_secs(1);

impl BreakerWatch {
    /// Starts the scrape loops (from `origin`, against `sut_url` for relative paths) and listens to `events`.
    pub fn start(
        v: &Validated,
        sut_url: &str,
        events: Events,
        origin: Instant,
        origin_wall: SystemTime,
    ) -> BreakerWatch {
        let scraped: Scraped = Default::default();
        let series: ScrapedSeries = Default::default();
        let absolute = |page: &str| {
            if page.starts_with("http") {
                page.to_string()
            } else {
                format!("{sut_url}{page}")
            }
        };
        let mut by_url: BTreeMap<String, (Duration, Reads)> = BTreeMap::new();
        for (name, obs) in v
            .breakers
            .iter()
            .flat_map(|(name, sources)| sources.iter().map(move |o| (name, o)))
        {
            if let Observation::Metrics {
                url_or_path,
                mapping,
                interval,
            } = obs
            {
                let entry = by_url.entry(absolute(url_or_path)).or_insert((
                    interval.get(),
                    Reads {
                        breakers: Vec::new(),
                        series: Vec::new(),
                    },
                ));
                entry.0 = entry.0.min(interval.get());
                entry.1.breakers.push((name.clone(), mapping.clone()));
            }
        }
        for e in &v.expectations {
            if let Check::Metric(m) = &e.check {
                let entry = by_url.entry(absolute(&m.page)).or_insert((
                    METRICS_INTERVAL,
                    Reads {
                        breakers: Vec::new(),
                        series: Vec::new(),
                    },
                ));
                if !entry.1.series.iter().any(|(k, _)| *k == m.selector) {
                    entry.1.series.push((m.selector.clone(), m.series()));
                }
            }
        }
        let scrapers = by_url
            .into_iter()
            .map(|(url, (interval, reads))| {
                tokio::spawn(scrape_loop(
                    url,
                    interval,
                    reads,
                    origin,
                    scraped.clone(),
                    series.clone(),
                ))
            })
            .collect();
        let routes = v
            .breakers
            .keys()
            .filter_map(|name| Some((name.clone(), v.breaker_route(name)?)))
            .collect();
        BreakerWatch {
            sources: v.breakers.clone(),
            routes,
            scraped,
            series,
            events,
            lines: Vec::new(),
            scrapers,
            origin,
            origin_wall,
        }
    }

    /// A line the SUT printed, for log sources.
    pub fn push_line(&mut self, line: OutputLine) {
        self.lines.push(line);
    }

    /// Stops the scrape loops; the observations made so far stay.
    pub fn stop(&self) {
        for s in &self.scrapers {
            s.abort();
        }
    }

    /// The breakers' names.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.sources.keys()
    }

    /// The last state scraped or pushed for `breaker`, for the live line.
    pub fn current(&self, breaker: &str) -> Option<BreakerState> {
        let scraped = self
            .scraped
            .lock()
            .ok()
            .and_then(|s| s.get(breaker).and_then(|v| v.last().map(|(_, st)| *st)));
        scraped.or_else(|| webhook::last_state(&self.events, breaker))
    }

    /// Every breaker's timeline as far as `record` goes (observations after `record.duration` are left for later,
    /// so that a record still growing and its timelines cover the same time).
    pub fn timelines(&self, record: &RunRecord) -> Timelines {
        let mut out = Timelines::default();
        for (name, route) in &self.routes {
            if let Ok(t) = record.inferred_timeline(route) {
                out.inferred.insert(name.clone(), t);
            }
        }
        let scraped = self.scraped.lock().map(|s| s.clone()).unwrap_or_default();
        let until = record.duration.as_secs_f64();
        out.metrics = self.series.lock().map(|s| s.clone()).unwrap_or_default();
        for series in out.metrics.values_mut() {
            series.points.retain(|(t, _)| *t <= until);
        }
        for (name, sources) in &self.sources {
            let mut timelines: Vec<BreakerTimeline> = sources
                .iter()
                .map(|obs| {
                    let timeline = match obs {
                        Observation::Metrics { interval, .. } => {
                            BreakerTimeline::from_observations(
                                scraped.get(name).map(|v| v.as_slice()).unwrap_or_default(),
                                Source::Metrics,
                                interval.get(),
                            )
                        }
                        Observation::Webhook { name: event_name } => webhook::timeline(
                            &self.events,
                            event_name,
                            self.origin,
                            self.origin_wall,
                        ),
                        Observation::Log { pattern } => {
                            log::timeline(&self.lines, pattern, name, self.origin)
                        }
                        Observation::Inferred => {
                            out.inferred.get(name).cloned().unwrap_or(BreakerTimeline {
                                source: Some(Source::Inferred),
                                ..Default::default()
                            })
                        }
                    };
                    timeline.until(record.duration)
                })
                .collect();
            // The finest source times the transitions: exact ones first, then the shortest resolution, then the
            // order the scenario names them in.
            let primary = timelines
                .iter()
                .enumerate()
                .min_by_key(|(i, t)| (t.resolution, *i))
                .map(|(_, t)| t.clone())
                .unwrap_or_default();
            out.observed.insert(name.clone(), primary);
            if let Some(inferred) = out.inferred.get(name) {
                if !sources.iter().any(|o| matches!(o, Observation::Inferred)) {
                    timelines.push(inferred.clone().until(record.duration));
                }
            }
            out.evidence.insert(name.clone(), timelines);
        }
        out
    }
}

impl Drop for BreakerWatch {
    fn drop(&mut self) {
        self.stop();
    }
}
