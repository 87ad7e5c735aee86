//! A result made from a run: the figures, verdicts and time series of `result.json` read from the run's output and
//! record, one function per section of the file, and the TLS summary of its handshakes.

use super::*;
use crate::record::PhaseSpan;

impl ResultFile {
    /// The sentence on faultd's own lateness per route under a latency table of the HTML page and the CI step
    /// summary; `None` when no route timed it.
    pub fn faultd_late_note(&self) -> Option<String> {
        let routes: Vec<String> = self
            .dependency
            .iter()
            .filter_map(|(route, d)| {
                let l = d.faultd_late?;
                Some(format!(
                    "{route} p99 {:.2} ms, max {:.2} ms",
                    l.p99_ms, l.max_ms
                ))
            })
            .collect();
        (!routes.is_empty()).then(|| {
            format!(
                "faultd's own lateness in answering once a call's delay was over (a host stall shows here), part \
                 of its served latency: {}.",
                routes.join("; ")
            )
        })
    }

    /// The result of a run: each section of result.json read from the run's output and record.
    pub fn build(v: &Validated, out: &RunOutput, time_scale: f64, exit_code: i32) -> Self {
        let s = &v.scenario;
        let rec = &out.record;
        let passed = exit_code == 0;
        ResultFile {
            version: RESULT_VERSION,
            scenario: ScenarioInfo {
                name: s.name.clone(),
                description: s.description.clone(),
                file: v.file.clone(),
                seed: Some(s.seed.unwrap_or(crate::run::DEFAULT_SEED)),
                time_scale,
                duration_s: s.duration.as_secs_f64(),
            },
            started_at: humantime::format_rfc3339_millis(out.started).to_string(),
            ending: out.ending.clone(),
            exit_code,
            passed,
            verdicts: out.verdicts.clone(),
            run_errors: out.run_errors.clone(),
            not_exported: Vec::new(),
            phases: rec.phases.iter().map(|p| phase(out, p)).collect(),
            totals: totals(v, out),
            dependency: dependency(v, out),
            unmatched: UnmatchedSummary::of(&out.dependency, &s.dependency),
            answers: out.load.answers.clone(),
            breakers: breakers(v, out),
            disagreements: out.disagreements.clone(),
            series: series(rec),
            sut_metrics: rec.sut_metrics.clone(),
            ca: out.ca_pem.as_ref().map(|_| CA_FILE.to_string()),
            tls: tls_summary(rec),
            dns: super::dns_summary(rec),
            distributed: out.distributed.clone(),
            dependency_replicas: ReplicasSummary::of(&out.replicas),
            requests: rec
                .requests
                .as_deref()
                .map(crate::correlate::summary::FollowedSummary::of),
            postgres: super::postgres::statements(rec),
        }
    }
}

/// One phase of the run: its rates, SUT latency, outcomes and what the dependency held and served during it.
fn phase(out: &RunOutput, p: &PhaseSpan) -> PhaseSummary {
    let rec = &out.record;
    let range = rec.buckets_in(p.start, p.end);
    let secs = (p.end - p.start).as_secs_f64().max(f64::MIN_POSITIVE);
    let offered: u64 = range
        .clone()
        .filter_map(|i| rec.sut.get(i))
        .map(|b| b.offered)
        .sum();
    let completed: u64 = range
        .clone()
        .filter_map(|i| rec.sut.get(i))
        .map(|b| b.completed.total() - b.completed.get(OutcomeClass::Dropped))
        .sum();
    let answered = |o: loadgen::Outcome| o != loadgen::Outcome::Dropped;
    let corrected = out
        .load
        .histogram(loadgen::Measure::Corrected, Some(&p.name), answered);
    let uncorrected = out
        .load
        .histogram(loadgen::Measure::Uncorrected, Some(&p.name), answered);
    let outcomes = out
        .load
        .phases
        .iter()
        .find(|lp| lp.name == p.name)
        .map(|lp| class_map(|c| lp.counts.get(c)))
        .unwrap_or_default();
    let dependency_max_in_flight = rec
        .dependency
        .iter()
        .map(|(route, series)| {
            (
                route.clone(),
                range
                    .clone()
                    .filter_map(|i| series.get(i))
                    .map(|b| b.in_flight_max)
                    .max()
                    .unwrap_or(0),
            )
        })
        .collect();
    let dependency_latency = out
        .dependency
        .routes
        .iter()
        .filter_map(|(route, r)| {
            r.latency
                .get(&p.name)
                .map(|h| (route.clone(), Percentiles::of(h)))
        })
        .collect();
    PhaseSummary {
        name: p.name.clone(),
        start_s: p.start.as_secs_f64(),
        end_s: p.end.as_secs_f64(),
        offered_rate: offered as f64 / secs,
        achieved_rate: completed as f64 / secs,
        sut_latency: Percentiles::of(&corrected),
        sut_service_time: Percentiles::of(&uncorrected),
        outcomes,
        dependency_max_in_flight,
        dependency_latency,
    }
}

/// The run's totals: what was scheduled and sent, its outcomes, whether they add up, and the generator's lateness.
fn totals(v: &Validated, out: &RunOutput) -> Totals {
    let rec = &out.record;
    let load = &out.load;
    Totals {
        intended: load.intended,
        sent: load.sent,
        outcomes: class_map(|c| load.totals.get(c)),
        still_in_flight: load.still_in_flight,
        conserved: load.conservation.holds,
        connect_errors: rec.connect_errors.clone(),
        generator_late: GeneratorLate::of(load)
            .map(|g| g.with_window(v.scenario.load.coalesce.get())),
    }
}

/// Each dependency route over the run: its calls, its peak in flight, its pool limit and faultd's lateness.
fn dependency(v: &Validated, out: &RunOutput) -> BTreeMap<String, RouteSummary> {
    let rec = &out.record;
    let limits = pool_limits(&v.expectations);
    rec.dependency
        .iter()
        .map(|(route, series)| {
            (
                route.clone(),
                RouteSummary {
                    arrivals: series.iter().map(|b| b.arrivals).sum(),
                    max_in_flight: series.iter().map(|b| b.in_flight_max).max().unwrap_or(0),
                    max_in_flight_is_upper_bound: rec.in_flight_is_upper_bound(),
                    max_in_flight_at_least: series
                        .iter()
                        .filter_map(|b| b.in_flight_max_at_least)
                        .max(),
                    pool_limit: limits.get(route).copied(),
                    faultd_late: out.dependency.routes.get(route).and_then(FaultdLate::of),
                    instances: rec
                        .instances
                        .get(route)
                        .map(|each| {
                            each.iter()
                                .map(|s| InstanceSummary {
                                    arrivals: s.iter().map(|b| b.arrivals).sum(),
                                    max_in_flight: s
                                        .iter()
                                        .map(|b| b.in_flight_max)
                                        .max()
                                        .unwrap_or(0),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                },
            )
        })
        .collect()
}

/// Each breaker's timelines: the observed one, the one inferred from traffic, and its own sources when several.
fn breakers(v: &Validated, out: &RunOutput) -> BTreeMap<String, BreakerSummary> {
    let rec = &out.record;
    rec.breakers
        .iter()
        .map(|(name, t)| {
            (
                name.clone(),
                BreakerSummary {
                    observed: t.clone(),
                    inferred: out.inferred.get(name).cloned(),
                    sources: {
                        let own: Vec<BreakerTimeline> = v
                            .breakers
                            .get(name)
                            .map(|sources| {
                                rec.evidence
                                    .get(name)
                                    .map(|all| all.iter().take(sources.len()).cloned().collect())
                                    .unwrap_or_default()
                            })
                            .unwrap_or_default();
                        if own.len() > 1 {
                            own
                        } else {
                            Vec::new()
                        }
                    },
                },
            )
        })
        .collect()
}

/// The handshakes of both sides, when either spoke TLS.
pub fn tls_summary(rec: &RunRecord) -> Option<TlsSummary> {
    let dependency = rec.handshakes.as_ref().map(|series| {
        let whole = handshakes_over(series.iter());
        let phases = rec
            .phases
            .iter()
            .map(|p| PhaseHandshakes {
                name: p.name.clone(),
                ..handshakes_over(rec.buckets_in(p.start, p.end).filter_map(|i| series.get(i)))
            })
            .collect();
        ListenerHandshakes {
            listener: DATA_LISTENER.to_string(),
            attempts: whole.attempts,
            outcomes: whole.outcomes,
            delayed: whole.delayed,
            phases,
        }
    });
    let load = rec.load_tls.clone();
    (load.is_some() || dependency.is_some()).then_some(TlsSummary { load, dependency })
}

/// The sums of some buckets of handshakes (the name left empty).
pub(super) fn handshakes_over<'a>(
    buckets: impl Iterator<Item = &'a HandshakeBucket>,
) -> PhaseHandshakes {
    let mut total = PhaseHandshakes::default();
    for b in buckets {
        for (outcome, n) in &b.outcomes {
            *total.outcomes.entry(outcome.clone()).or_default() += n;
            total.attempts += n;
        }
        total.delayed += b.delayed;
    }
    total
}

pub(super) fn series(rec: &RunRecord) -> Series {
    let ms = |d: Option<std::time::Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
    Series {
        bucket_s: rec.bucket.as_secs_f64(),
        offered: rec.sut.iter().map(|b| b.offered).collect(),
        completed: OutcomeClass::ALL
            .iter()
            .map(|&c| {
                (
                    c.name().to_string(),
                    rec.sut.iter().map(|b| b.completed.get(c)).collect(),
                )
            })
            .collect(),
        sut_in_flight: rec.sut.iter().map(|b| b.in_flight).collect(),
        p50_ms: rec.sut.iter().map(|b| ms(b.p50)).collect(),
        p90_ms: rec.sut.iter().map(|b| ms(b.p90)).collect(),
        p99_ms: rec.sut.iter().map(|b| ms(b.p99)).collect(),
        max_ms: rec.sut.iter().map(|b| ms(b.max)).collect(),
        dependency_arrivals: rec
            .dependency
            .iter()
            .map(|(r, s)| (r.clone(), s.iter().map(|b| b.arrivals).collect()))
            .collect(),
        dependency_in_flight: rec
            .dependency
            .iter()
            .map(|(r, s)| (r.clone(), s.iter().map(|b| b.in_flight_max).collect()))
            .collect(),
        handshakes: handshake_series(rec),
        instance_arrivals: rec
            .instances
            .iter()
            .map(|(route, each)| {
                let series = each
                    .iter()
                    .map(|s| s.iter().map(|b| b.arrivals).collect())
                    .collect();
                (route.clone(), series)
            })
            .collect(),
    }
}

pub(super) fn handshake_series(rec: &RunRecord) -> BTreeMap<String, Vec<u64>> {
    let Some(series) = &rec.handshakes else {
        return BTreeMap::new();
    };
    let mut by_outcome: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for outcome in series.iter().flat_map(|b| b.outcomes.keys()) {
        if !by_outcome.contains_key(outcome) {
            let counts = series
                .iter()
                .map(|b| b.outcomes.get(outcome).copied().unwrap_or(0))
                .collect();
            by_outcome.insert(outcome.clone(), counts);
        }
    }
    by_outcome
}

pub(super) fn class_map(count: impl Fn(OutcomeClass) -> u64) -> BTreeMap<String, u64> {
    OutcomeClass::ALL
        .iter()
        .map(|&c| (c.name().to_string(), count(c)))
        .collect()
}
