//! The real numbers a sizing reads: one dependency's calls bucket by bucket (how many, how they ended, how long
//! they took) and where the record is healthy, degraded and recovered, from either of two sources: a run's folder
//! (faultd's `dependency.json`, its phases judged healthy or degraded against the first) or a record that
//! `faultline import` reads (an access log, a HAR file, a trace export, its phases found from change points).
//!
//! Not for the arithmetic (`arithmetic`) nor for what a scenario replays (`scenario`).

use std::path::{Path, PathBuf};

use crate::import::{self, CallOutcome, DepBucket, Histogram, ImportOptions, PhaseSpan};

use super::SizeError;

/// One dependency's calls in a record, bucket by bucket, and its phases.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// Where the numbers come from, for sentences: "run reports/x/2026-..." or "hotel.log (nginx)".
    pub source: String,
    /// The dependency sized, as the record names it (a route, a peer).
    pub dependency: String,
    /// The record's other dependencies, which `--dependency` chooses among.
    pub others: Vec<String>,
    /// The step of `buckets`, seconds.
    pub bucket_s: f64,
    /// The dependency's calls per bucket from the record's start.
    pub buckets: Vec<DepBucket>,
    /// The record's phases over `buckets`, healthy first.
    pub phases: Vec<PhaseSpan>,
    /// The healthy reference: every answered call of the first phase, each counted once.
    pub healthy_latency: Histogram,
}

/// A run of buckets `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Evidence {
    /// The first phase: the healthy reference.
    pub fn healthy(&self) -> Span {
        self.phases.first().map_or(
            Span {
                start: 0,
                end: self.buckets.len(),
            },
            |p| Span {
                start: p.start,
                end: p.end,
            },
        )
    }

    /// The first degraded stretch: from the first degraded phase to the phase that is healthy again (or the end).
    pub fn degraded(&self) -> Option<Span> {
        let first = self.phases.iter().position(|p| p.degraded)?;
        let end = self.phases[first..]
            .iter()
            .find(|p| !p.degraded)
            .map_or(self.buckets.len(), |p| p.start);
        Some(Span {
            start: self.phases[first].start,
            end,
        })
    }

    /// Whether the record is healthy again after its first degraded stretch.
    pub fn recovers(&self) -> bool {
        self.degraded().is_some_and(|d| d.end < self.buckets.len())
    }

    /// The healthy p99, seconds.
    pub fn p99(&self) -> Option<f64> {
        self.healthy_latency.quantile(0.99)
    }

    /// The rate of calls while healthy, per second: the median of the healthy buckets' rates (a warm-up's first
    /// seconds, or the record's partial first and last buckets, do not pull it down). Buckets without a call count
    /// when they fall between two that have some.
    pub fn rate(&self) -> Option<f64> {
        let h = self.healthy();
        let calls: Vec<u64> = self.buckets[h.start..h.end]
            .iter()
            .map(DepBucket::calls)
            .collect();
        let first = calls.iter().position(|c| *c > 0)?;
        let last = calls.iter().rposition(|c| *c > 0)?;
        let mut rates: Vec<f64> = calls[first..=last]
            .iter()
            .map(|c| *c as f64 / self.bucket_s)
            .collect();
        rates.sort_by(f64::total_cmp);
        Some(rates[rates.len() / 2])
    }

    /// The latency of the degraded dependency, seconds: the mean of its slowest degraded bucket (Little's law wants
    /// the mean, and the pool fills at the worst of the degradation, not at its average).
    pub fn degraded_latency(&self) -> Option<f64> {
        let d = self.degraded()?;
        self.buckets[d.start..d.end]
            .iter()
            .filter_map(|b| b.latency.mean())
            .max_by(f64::total_cmp)
    }
}

/// Reads a run's folder: its dependency's recording, un-scaled by the run's time scale so that the numbers are the
/// scenario's, its buckets added up to `bucket` seconds (at least the run's own). `dependency` picks a route; by
/// default the busiest.
pub fn from_run(dir: &Path, dependency: Option<&str>, bucket: f64) -> Result<Evidence, SizeError> {
    let bad = |why: String| SizeError::Record {
        path: dir.to_path_buf(),
        why,
    };
    if !dir.join("result.json").is_file() {
        return Err(bad(
            "a folder, but not a run's: it has no result.json (name a folder `faultline run` wrote, \
             reports/<scenario>/<stamp>)"
                .into(),
        ));
    }
    let result = crate::report::read(dir).map_err(|e| bad(e.to_string()))?;
    let path = dir.join("dependency.json");
    let text = std::fs::read_to_string(&path).map_err(|e| SizeError::Record {
        path: path.clone(),
        why: e.to_string(),
    })?;
    let recording: faultd::Recording =
        serde_json::from_str(&text).map_err(|e| SizeError::Record {
            path: path.clone(),
            why: e.to_string(),
        })?;
    let mut names: Vec<(&String, u64)> = recording
        .routes
        .iter()
        .map(|(n, r)| (n, r.totals.arrivals))
        .collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let route = pick(
        names.iter().map(|(n, _)| n.as_str()).collect(),
        dependency,
        dir,
    )?;
    let r = &recording.routes[&route];
    let scale = if result.scenario.time_scale > 0.0 {
        result.scenario.time_scale
    } else {
        1.0
    };
    // The run's buckets (often 100 ms) added up to the step asked for, as a record is read in it.
    let per = ((bucket / (recording.bucket.as_secs_f64() / scale)).round() as usize).max(1);
    let step = recording.bucket.as_secs_f64() * per as f64;
    let bucket_s = step / scale;
    // Each phase's answered latency, in seconds of the scenario.
    let latency = |phase: &str| {
        let mut h = Histogram::default();
        if let Some(hdr) = r.latency.get(phase) {
            for v in hdr.iter_recorded() {
                h.record_n(
                    v.value_iterated_to() as f64 / 1e9 / scale,
                    v.count_at_value(),
                );
            }
        }
        h
    };
    let entered = &recording.phases_entered;
    let per_phase: Vec<Histogram> = entered.iter().map(|p| latency(&p.name)).collect();
    // The phase a bucket begins in: faultd keeps latency per phase, not per bucket.
    let phase_of = |g: usize| {
        let t = g as f64 * step;
        entered
            .iter()
            .rposition(|p| p.at.as_secs_f64() <= t + 1e-9)
            .unwrap_or(0)
    };
    let buckets: Vec<DepBucket> = r
        .buckets
        .chunks(per)
        .enumerate()
        .map(|(g, group)| {
            let mut outcomes = std::collections::BTreeMap::new();
            let mut add = |o: CallOutcome, n: u64| {
                if n > 0 {
                    *outcomes.entry(o).or_insert(0) += n;
                }
            };
            for b in group {
                add(
                    CallOutcome::Status(200),
                    b.completed.c2xx + b.completed.c3xx,
                );
                add(CallOutcome::Status(400), b.completed.c4xx);
                add(CallOutcome::Status(500), b.completed.c5xx);
                add(
                    CallOutcome::Reset,
                    b.resets + b.empty + b.malformed + b.truncated,
                );
                add(CallOutcome::Timeout, b.hangs + b.abandoned);
            }
            let latency = per_phase.get(phase_of(g)).cloned().unwrap_or_default();
            DepBucket { latency, outcomes }
        })
        .collect();
    let phases = run_phases(entered, step, &buckets, &per_phase);
    let healthy_latency = per_phase.first().cloned().unwrap_or_default();
    Ok(Evidence {
        source: format!("the run in {}", dir.display()),
        dependency: route.clone(),
        others: names
            .iter()
            .map(|(n, _)| n.to_string())
            .filter(|n| *n != route)
            .collect(),
        bucket_s,
        buckets,
        phases,
        healthy_latency,
    })
}

/// The run's phases as spans of buckets, each degraded when its calls depart from the first phase's as an import's
/// change points would (`import::departs`).
fn run_phases(
    entered: &[faultd::PhaseEntry],
    step: f64,
    buckets: &[DepBucket],
    per_phase: &[Histogram],
) -> Vec<PhaseSpan> {
    let n = buckets.len();
    let starts: Vec<usize> = entered
        .iter()
        .map(|p| ((p.at.as_secs_f64() / step).round() as usize).min(n))
        .collect();
    let over = |start: usize, end: usize, i: usize| {
        let mut b = DepBucket {
            latency: per_phase[i].clone(),
            ..DepBucket::default()
        };
        for bucket in &buckets[start..end] {
            for (o, c) in &bucket.outcomes {
                *b.outcomes.entry(*o).or_insert(0) += c;
            }
        }
        b
    };
    let mut spans = Vec::new();
    for (i, p) in entered.iter().enumerate() {
        let start = if i == 0 { 0 } else { starts[i] };
        let end = starts.get(i + 1).copied().unwrap_or(n).max(start);
        let degraded = i > 0
            && import::departs(
                &over(starts[0], starts.get(1).copied().unwrap_or(n), 0),
                &over(start, end, i),
            );
        spans.push(PhaseSpan {
            name: p.name.clone(),
            start,
            end,
            degraded,
        });
    }
    spans
}

/// Reads a record as `faultline import` would and takes one of its dependencies (by default the busiest): the
/// calls the record shows to it, or, when it shows none, the service's own answers (a log of a proxy in front of
/// the dependency is the dependency's record).
pub fn from_record(
    paths: &[PathBuf],
    options: &ImportOptions,
    dependency: Option<&str>,
) -> Result<Evidence, SizeError> {
    let read = import::read_record(paths, options).map_err(SizeError::Import)?;
    let t = &read.timeline;
    let mut deps: Vec<(String, u64)> = t
        .dependencies()
        .into_iter()
        .map(|d| {
            let calls = (0..t.buckets()).map(|k| t.dep(&d, k).calls()).sum();
            (d, calls)
        })
        .collect();
    deps.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let names: Vec<&str> = deps.iter().map(|(d, _)| d.as_str()).collect();
    let files = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (dependency, buckets): (String, Vec<DepBucket>) = if names.is_empty() {
        if dependency.is_some() {
            return Err(SizeError::Record {
                path: paths.first().cloned().unwrap_or_default(),
                why: "the record names no dependency (no upstream, no client span) to choose with --dependency"
                    .into(),
            });
        }
        let buckets = (0..t.buckets())
            .map(|k| import::Source::Sut.over(t, k, k + 1))
            .collect();
        ("the service's answers".into(), buckets)
    } else {
        let d = pick(
            names,
            dependency,
            paths.first().map_or(Path::new(""), |p| p),
        )?;
        let buckets = (0..t.buckets()).map(|k| t.dep(&d, k)).collect();
        (d, buckets)
    };
    let phases = read.phases;
    let healthy = phases.first().map_or(0..buckets.len(), |p| p.start..p.end);
    let mut healthy_latency = Histogram::default();
    for b in &buckets[healthy] {
        healthy_latency.merge(&b.latency);
    }
    Ok(Evidence {
        source: format!("{files} ({})", options.format),
        others: deps
            .iter()
            .map(|(d, _)| d.clone())
            .filter(|d| *d != dependency)
            .collect(),
        dependency,
        bucket_s: t.bucket,
        buckets,
        phases,
        healthy_latency,
    })
}

/// The dependency `wanted`, or the first (the busiest) of `names`.
fn pick(names: Vec<&str>, wanted: Option<&str>, path: &Path) -> Result<String, SizeError> {
    match wanted {
        Some(w) if names.contains(&w) => Ok(w.to_string()),
        Some(w) => Err(SizeError::Record {
            path: path.to_path_buf(),
            why: format!(
                "no dependency `{w}` in the record; it has {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        }),
        None => names
            .first()
            .map(|n| n.to_string())
            .ok_or_else(|| SizeError::Record {
                path: path.to_path_buf(),
                why: "the record holds no call to a dependency".into(),
            }),
    }
}
