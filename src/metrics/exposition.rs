//! The Prometheus exposition of the run's figures: the OpenMetrics text a scrape reads, and the classic text
//! format the Pushgateway takes. Not for holding the figures or serving them (`super`).

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::State;
use crate::breaker::BreakerState;

/// The upper bounds of the latency histogram, in seconds: powers of two from 1 ms, up to the first past the
/// slowest latency recorded (at least 1 s), then +Inf. A fixed ladder keeps a series' buckets the same all run.
pub(super) fn bounds(max_s: f64) -> Vec<f64> {
    let mut b = Vec::new();
    let mut le = 0.001;
    loop {
        b.push(le);
        if le >= max_s.max(1.0) {
            break;
        }
        le *= 2.0;
    }
    b
}

fn breaker_value(s: BreakerState) -> i64 {
    match s {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

/// The OpenMetrics exposition of `state`.
pub(super) fn encode(state: State) -> String {
    let mut out = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Snapshot(state)));
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    // A series without labels is written `name{} value` by the collector API: drop the empty braces.
    out.replace("{} ", " ")
}

/// The OpenMetrics exposition in the classic text format the Pushgateway reads: no `# EOF` or `# UNIT` line, and
/// a counter's family named as its sample (`_total`).
pub(super) fn classic(open_metrics: &str) -> String {
    let mut counters = Vec::new();
    for l in open_metrics.lines() {
        if let Some(name) = l
            .strip_prefix("# TYPE ")
            .and_then(|r| r.strip_suffix(" counter"))
        {
            counters.push(name.to_string());
        }
    }
    let mut out = String::new();
    for l in open_metrics.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let mut line = l.to_string();
        for prefix in ["# TYPE ", "# HELP "] {
            if let Some(rest) = l.strip_prefix(prefix) {
                let name = rest.split(' ').next().unwrap_or_default();
                if counters.iter().any(|c| c == name) {
                    line = format!("{prefix}{name}_total{}", &rest[name.len()..]);
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A copy of the state, encoded at scrape time.
#[derive(Debug)]
struct Snapshot(State);

/// One metric family at a scrape: its name, help, type and rows (labels, value).
struct Family<'a> {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    rows: Rows<'a>,
}

type Rows<'a> = Vec<(Vec<(&'a str, &'a str)>, f64)>;

/// One row without labels.
fn one(v: f64) -> Rows<'static> {
    vec![(vec![], v)]
}

/// The load's families: time, requests offered, sent and ended by class, in flight, the last bucket's latency.
fn load_families(s: &State) -> Vec<Family<'_>> {
    let mut out = vec![
        Family {
            name: "faultline_elapsed_seconds",
            help: "Time since the run's t = 0",
            kind: MetricType::Gauge,
            rows: one(s.elapsed_s),
        },
        Family {
            name: "faultline_offered_requests",
            help: "Requests the load's schedule has issued (sent + dropped)",
            kind: MetricType::Counter,
            rows: one(s.offered as f64),
        },
        Family {
            name: "faultline_sent_requests",
            help: "Requests sent to the SUT",
            kind: MetricType::Counter,
            rows: one(s.sent as f64),
        },
        Family {
            name: "faultline_requests",
            help: "Requests ended, by outcome class (dropped: refused at the in-flight cap)",
            kind: MetricType::Counter,
            rows: s
                .by_class
                .iter()
                .map(|(c, n)| (vec![("class", *c)], *n as f64))
                .collect(),
        },
        Family {
            name: "faultline_sut_in_flight_requests",
            help: "Requests sent to the SUT and not yet ended",
            kind: MetricType::Gauge,
            rows: one(s.sut_in_flight as f64),
        },
    ];
    if let Some([p50, p90, p99, max]) = s.last_bucket {
        out.push(Family {
                name: "faultline_sut_latency_seconds",
                help: "SUT latency from the intended send time over the last bucket, by quantile (1 is the max)",
                kind: MetricType::Gauge,
                rows: vec![
                    (vec![("quantile", "0.5")], p50),
                    (vec![("quantile", "0.9")], p90),
                    (vec![("quantile", "0.99")], p99),
                    (vec![("quantile", "1")], max),
                ],
            });
    }
    out
}

/// The dependency's families (calls in flight, TLS handshakes, pool limits), the breakers', the phase and the
/// expectations'.
fn run_families(s: &State) -> Vec<Family<'_>> {
    let mut out = Vec::new();
    let in_flight: Rows<'_> = s
        .routes_in_flight
        .iter()
        .map(|(r, n)| (vec![("route", r.as_str())], *n as f64))
        .collect();
    out.push(Family {
            name: "faultline_dependency_in_flight_calls",
            help: "The most calls in flight at each dependency route over its last bucket, measured by faultd (with several \
             faultd replicas, the sum of their peaks: an upper bound)",
            kind: MetricType::Gauge,
            rows: in_flight,
        });
    let mut handshakes: Rows<'_> = Vec::new();
    if let Some([full, resumed, failed]) = s.load_handshakes {
        for (outcome, n) in [("full", full), ("resumed", resumed), ("failed", failed)] {
            handshakes.push((vec![("side", "load"), ("outcome", outcome)], n as f64));
        }
    }
    for (outcome, n) in s.dependency_handshakes.iter().flatten() {
        handshakes.push((
            vec![("side", "dependency"), ("outcome", outcome.as_str())],
            *n as f64,
        ));
    }
    out.push(Family {
            name: "faultline_tls_handshakes",
            help: "TLS handshakes so far: side=load is loadgen's with the SUT (full, resumed, failed), side=dependency \
             what faultd's TLS listener took, by outcome (ok, resumed, expired, alert, ...)",
            kind: MetricType::Counter,
            rows: handshakes,
        });
    out.push(Family {
        name: "faultline_dependency_pool_limit_calls",
        help: "The most calls in flight the scenario's pool expectation allows at each route",
        kind: MetricType::Gauge,
        rows: s
            .pool_limits
            .iter()
            .map(|(r, n)| (vec![("route", r.as_str())], *n as f64))
            .collect(),
    });
    out.push(Family {
        name: "faultline_breaker_state",
        help: "Each breaker's last observed state: 0 closed, 1 open, 2 half-open",
        kind: MetricType::Gauge,
        rows: s
            .breakers
            .iter()
            .filter_map(|(b, st)| {
                Some((vec![("breaker", b.as_str())], breaker_value((*st)?) as f64))
            })
            .collect(),
    });
    out.push(Family {
        name: "faultline_phase",
        help: "1 for the schedule's current phase, 0 for the others",
        kind: MetricType::Gauge,
        rows: s
            .phases
            .iter()
            .map(|p| {
                (
                    vec![("phase", p.as_str())],
                    f64::from(s.phase.as_deref() == Some(p)),
                )
            })
            .collect(),
    });
    out.push(Family {
        name: "faultline_expectation_status",
        help: "Each expectation: 0 pending, 1 held, 2 failed, 3 inconclusive",
        kind: MetricType::Gauge,
        rows: s
            .expectations
            .iter()
            .map(|(id, name, st)| {
                (
                    vec![("expectation", id.as_str()), ("name", name.as_str())],
                    *st as f64,
                )
            })
            .collect(),
    });
    out
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        for family in load_families(s).into_iter().chain(run_families(s)) {
            let mut f = encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for (labels, v) in family.rows {
                match family.kind {
                    MetricType::Counter => {
                        ConstCounter::new(v as u64).encode(f.encode_family(&labels)?)?
                    }
                    _ => ConstGauge::new(v).encode(f.encode_family(&labels)?)?,
                }
            }
        }
        // The histogram of every completed request so far, cumulative counts from the HDR data.
        let h = s.latency.as_ref();
        let max_s = h.map(|h| h.max() as f64 / 1e9).unwrap_or(0.0);
        let buckets: Vec<(f64, u64)> = bounds(max_s)
            .into_iter()
            .map(|le| {
                let upto = h
                    .map(|h| h.count_between(0, (le * 1e9) as u64))
                    .unwrap_or(0);
                (le, upto)
            })
            .collect();
        let count = h.map(|h| h.len()).unwrap_or(0);
        let sum = h.map(|h| h.mean() * h.len() as f64 / 1e9).unwrap_or(0.0);
        // Per-bucket counts, as the encoder adds them up itself.
        let mut per_bucket: Vec<(f64, u64)> = Vec::new();
        let mut below = 0;
        for (le, upto) in buckets {
            per_bucket.push((le, upto.saturating_sub(below)));
            below = upto.max(below);
        }
        per_bucket.push((f64::MAX, count.saturating_sub(below)));
        let mut hist = encoder.encode_descriptor(
            "faultline_sut_latency_histogram_seconds",
            "SUT latency from the intended send time of every request answered so far",
            None,
            MetricType::Histogram,
        )?;
        ConstHistogram {
            sum,
            count,
            buckets: per_bucket,
        }
        .encode(hist.encode_family(&Vec::<(&str, &str)>::new())?)
    }
}

/// A histogram's values, encoded as they are.
#[derive(Debug)]
struct ConstHistogram {
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

impl prometheus_client::encoding::EncodeMetric for ConstHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &self.buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_histogram_ladder_doubles_from_a_millisecond_past_the_slowest_value() {
        assert_eq!(bounds(0.0).first(), Some(&0.001));
        assert!(*bounds(0.0).last().unwrap() >= 1.0);
        assert!(*bounds(5.0).last().unwrap() >= 5.0);
        assert!(bounds(5.0).windows(2).all(|w| w[1] == 2.0 * w[0]));
    }

    #[test]
    fn tls_handshakes_are_counted_per_side_and_outcome_and_absent_without_tls() {
        let cleartext = encode(State::default());
        assert!(cleartext.contains("# TYPE faultline_tls_handshakes counter"));
        assert!(!cleartext.contains("faultline_tls_handshakes_total{"));
        let tls = encode(State {
            load_handshakes: Some([12, 30, 2]),
            dependency_handshakes: Some(BTreeMap::from([
                ("ok".to_string(), 40),
                ("expired".to_string(), 7),
            ])),
            ..State::default()
        });
        for line in [
            r#"faultline_tls_handshakes_total{side="load",outcome="full"} 12"#,
            r#"faultline_tls_handshakes_total{side="load",outcome="resumed"} 30"#,
            r#"faultline_tls_handshakes_total{side="load",outcome="failed"} 2"#,
            r#"faultline_tls_handshakes_total{side="dependency",outcome="ok"} 40"#,
            r#"faultline_tls_handshakes_total{side="dependency",outcome="expired"} 7"#,
        ] {
            assert!(tls.lines().any(|l| l == line), "{line} not in\n{tls}");
        }
    }
}
