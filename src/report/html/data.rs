//! The figures `report.html` draws its charts from, as one compact JSON blob: the time series of latency, rates and
//! calls in flight, the phases, the breakers' states as spans, and HdrHistogram's percentile distribution per phase.
//!
//! Not for the markup: the page and its tables are `html`'s; the drawing is the page's script (assets/report.js).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::display::Display;
use crate::breaker::{BreakerState, BreakerTimeline};
use crate::report::hdr;
use crate::report::result::{ReplicasSummary, ResultFile};

/// Percentile rows per halving of the distance to 100% in the distribution plots, as HdrHistogram prints them.
const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Rounds to `digits` significant digits, so the JSON carries "12.3", not "12.300000001".
fn sig(v: f64, digits: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let magnitude = v.abs().log10().floor() as i32 + 1;
    let shift = digits - magnitude;
    if shift >= 0 {
        let f = 10f64.powi(shift);
        (v * f).round() / f
    } else {
        let f = 10f64.powi(-shift);
        (v / f).round() * f
    }
}

/// A latency series for a log axis: zero and missing both become null (a log scale has no zero).
fn latency_series(values: &[Option<f64>]) -> Value {
    Value::Array(
        values
            .iter()
            .map(|v| {
                v.filter(|v| *v > 0.0)
                    .map_or(Value::Null, |v| json!(sig(v, 3)))
            })
            .collect(),
    )
}

/// The breaker's life as spans `[start s, end s, state]` (0 closed, 1 half-open, 2 open) up to `end_s`.
fn spans(t: &BreakerTimeline, end_s: f64) -> Value {
    let code = |s: BreakerState| match s {
        BreakerState::Closed => 0,
        BreakerState::HalfOpen => 1,
        BreakerState::Open => 2,
    };
    let mut out = Vec::new();
    let (mut from, mut state) = (0.0, BreakerState::Closed);
    for tr in &t.transitions {
        let at = tr.at.as_secs_f64().min(end_s);
        if at > from {
            out.push(json!([sig(from, 6), sig(at, 6), code(state)]));
        }
        from = at;
        state = tr.to;
    }
    if end_s > from {
        out.push(json!([sig(from, 6), sig(end_s, 6), code(state)]));
    }
    Value::Array(out)
}

/// HdrHistogram's percentile distribution as plot points: x = 1/(1-p), y = latency in ms. The 100% row has no
/// finite x and is left out, as HdrHistogram's plotter does.
fn distribution(h: &hdrhistogram::Histogram<u64>) -> Value {
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    if !h.is_empty() {
        let mut last_x = 0.0;
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            let q = v.quantile_iterated_to();
            if q >= 1.0 {
                continue;
            }
            let x = sig(1.0 / (1.0 - q), 4);
            if x <= last_x {
                continue;
            }
            last_x = x;
            xs.push(x);
            ys.push(sig(v.value_iterated_to() as f64 / hdr::NANOS_PER_MS, 4));
        }
    }
    json!({ "x": xs, "y": ys })
}

/// The JSON blob the page's script draws from. Counts stay counts (whole numbers print short); the script
/// divides by the bucket width to get rates.
pub fn data(
    result: &ResultFile,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> Value {
    let s = &result.series;
    let n = s.offered.len();
    let bucket_s = if s.bucket_s > 0.0 { s.bucket_s } else { 0.1 };
    let end_s = result
        .phases
        .iter()
        .map(|p| p.end_s)
        .fold(n as f64 * bucket_s, f64::max);
    let class = |name: &str| s.completed.get(name).cloned().unwrap_or_else(|| vec![0; n]);
    let sum = |names: &[&str]| -> Vec<u64> {
        (0..n)
            .map(|i| {
                names
                    .iter()
                    .map(|c| {
                        s.completed
                            .get(*c)
                            .and_then(|v| v.get(i))
                            .copied()
                            .unwrap_or(0)
                    })
                    .sum()
            })
            .collect()
    };
    let achieved = sum(&[
        "ok",
        "fallback",
        "client_error",
        "server_error",
        "timeout",
        "connect_error",
    ]);
    let errors = sum(&["client_error", "server_error", "timeout", "connect_error"]);
    // Every time chart draws the same points: a long run's are thinned to a bounded number, each keeping the lowest
    // and highest value it covers (counts stay counts per bucket of `bucket_s`; the script makes them rates).
    let display = Display::new(n);
    let counts = |v: &[u64]| json!(display.counts(v));
    let count_map = |m: &BTreeMap<String, Vec<u64>>| -> BTreeMap<String, Value> {
        m.iter().map(|(k, v)| (k.clone(), counts(v))).collect()
    };
    let latency = |v: &[Option<f64>]| latency_series(&display.values(v));
    let phases: Vec<Value> = result
        .phases
        .iter()
        .map(|p| json!([p.name, sig(p.start_s, 6), sig(p.end_s, 6)]))
        .collect();
    let limits: BTreeMap<String, Value> = result
        .dependency
        .iter()
        .filter_map(|(route, r)| Some((route.clone(), r.pool_limit?)))
        .map(|(route, l)| (route, json!({ "bound": l.bound, "inclusive": l.inclusive })))
        .collect();
    let mut breakers = Vec::new();
    for (name, b) in &result.breakers {
        let gaps: Vec<Value> = b
            .observed
            .gaps
            .iter()
            .map(|(a, z)| json!([sig(*a, 6), sig(*z, 6)]))
            .collect();
        breakers.push(json!({ "label": name, "spans": spans(&b.observed, end_s), "gaps": gaps }));
        // With several sources, each gets its band, so that where they part is seen at a glance.
        for source in b.sources.iter().filter(|t| t.source != b.observed.source) {
            let label = source
                .source
                .map(|s| s.to_string())
                .unwrap_or_else(|| "source".into());
            breakers.push(json!({ "label": format!("{name} ({label})"), "spans": spans(source, end_s), "gaps": [] }));
        }
        if let Some(inferred) = &b.inferred {
            breakers.push(json!({ "label": format!("{name} (inferred)"), "spans": spans(inferred, end_s), "gaps": [] }));
        }
    }
    let mut distributions = Vec::new();
    for phase in &result.phases {
        let mut lines = vec![
            json!({ "label": "SUT, from intended send", "points": distribution(&hdr::sut_histogram(load, &phase.name, loadgen::Measure::Corrected)) }),
            json!({ "label": "SUT, service time", "points": distribution(&hdr::sut_histogram(load, &phase.name, loadgen::Measure::Uncorrected)) }),
        ];
        for (route, r) in &dependency.routes {
            if let Some(h) = r.latency.get(&phase.name) {
                lines.push(json!({ "label": format!("{route} served (faultd)"), "points": distribution(h) }));
            }
        }
        distributions.push(json!({ "phase": phase.name, "lines": lines }));
    }
    json!({
        "bucket_s": bucket_s,
        "n": n,
        "x": display.xs(bucket_s),
        "end_s": sig(end_s, 6),
        "phases": phases,
        "latency": {
            "p50": latency(&s.p50_ms),
            "p90": latency(&s.p90_ms),
            "p99": latency(&s.p99_ms),
            "max": latency(&s.max_ms),
        },
        "counts": {
            "offered": counts(&s.offered),
            "achieved": counts(&achieved),
            "fallback": counts(&class("fallback")),
            "error": counts(&errors),
            "dropped": counts(&class("dropped")),
        },
        "dependency_calls": count_map(&s.dependency_arrivals),
        "handshakes": count_map(&s.handshakes),
        "instance_calls": s.instance_arrivals.iter().map(|(route, each)| {
            (route.clone(), each.iter().map(|v| counts(v)).collect::<Vec<_>>())
        }).collect::<BTreeMap<_, _>>(),
        "in_flight": count_map(&s.dependency_in_flight),
        // How a merged maximum in flight reads in the chart's legend (null when one faultd measured it exactly).
        "in_flight_upper_bound": result
            .dependency_replicas
            .as_ref()
            .map(|r| ReplicasSummary::upper_bound_words(r.count)),
        "sut_in_flight": counts(&s.sut_in_flight),
        "limits": limits,
        "breakers": breakers,
        "sut_metrics": result.sut_metrics.iter().map(|(selector, m)| json!({
            "label": selector,
            "found": !m.points.is_empty(),
            "values": display.samples(&m.points, bucket_s),
        })).collect::<Vec<_>>(),
        "distributions": distributions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits_round_both_ways() {
        assert_eq!(sig(12.3456, 3), 12.3);
        assert_eq!(sig(0.0012345, 3), 0.00123);
        assert_eq!(sig(123456.0, 3), 123000.0);
        assert_eq!(sig(0.0, 3), 0.0);
        assert_eq!(json!(sig(41.99999, 3)).to_string(), "42.0");
    }
}
