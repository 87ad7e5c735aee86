//! The live Prometheus endpoint (`faultline run --metrics-listen ADDR`) and the push of the final values to a
//! Pushgateway (`--push URL`). The run loop hands its figures over once per tick; a scrape encodes the latest ones
//! in the Prometheus text format (prefix `faultline_`, seconds, `_total` counters):
//!
//! - `faultline_offered_requests_total`, `faultline_sent_requests_total`, `faultline_requests_total{class}`
//! - `faultline_sut_in_flight_requests`, `faultline_sut_latency_seconds{quantile}` (the last bucket) and the
//!   histogram `faultline_sut_latency_histogram_seconds` (every completed request so far, bounds from the HDR data)
//! - `faultline_dependency_in_flight_calls{route}`, `faultline_dependency_pool_limit_calls{route}`
//! - `faultline_tls_handshakes_total{side,outcome}` (loadgen's with the SUT, faultd's at the dependency; TLS only)
//! - `faultline_breaker_state{breaker}` (0 closed, 1 open, 2 half-open)
//! - `faultline_phase{phase}` (1 for the current phase, 0 for the others), `faultline_elapsed_seconds`
//! - `faultline_expectation_status{expectation,name}` (0 pending, 1 held, 2 failed, 3 inconclusive)
//!
//! The final values (every verdict, the totals with the last requests counted) exist only once the run has ended:
//! the endpoint keeps serving them until a scrape has read them, for at most the linger the user gives
//! (`--metrics-linger`), then closes, letting a scrape in progress finish.
//!
//! Exporting never changes the run: an address that is taken or not loopback, a Pushgateway that refuses, are
//! problems the report lists, and every network step is bounded in time.
//!
//! Not for deciding anything: the figures arrive already measured and the verdicts already made.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::breaker::watch::BreakerWatch;
use crate::breaker::BreakerState;
use crate::expect::{Outcome, Verdict};
use crate::record::{OutcomeClass, RunRecord};
use crate::report::ResultFile;
use crate::scenario::Validated;

/// How long a push may take before it is given up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a scrape in progress may take to finish once the endpoint closes.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The upper bounds of the latency histogram, in seconds: powers of two from 1 ms, up to the first past the
/// slowest latency recorded (at least 1 s), then +Inf. A fixed ladder keeps a series' buckets the same all run.
fn bounds(max_s: f64) -> Vec<f64> {
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

#[derive(Debug, Default, Clone)]
struct State {
    elapsed_s: f64,
    phases: Vec<String>,
    phase: Option<String>,
    offered: u64,
    sent: u64,
    by_class: BTreeMap<&'static str, u64>,
    sut_in_flight: u64,
    /// p50, p90, p99 and max of the last bucket loadgen finished, in seconds.
    last_bucket: Option<[f64; 4]>,
    latency: Option<Histogram<u64>>,
    buckets_seen: usize,
    routes_in_flight: BTreeMap<String, u64>,
    pool_limits: BTreeMap<String, u64>,
    breakers: BTreeMap<String, Option<BreakerState>>,
    /// Label, name and status of each expectation.
    expectations: Vec<(String, String, u8)>,
    /// loadgen's TLS handshakes with the SUT so far (full, resumed, failed), when it speaks TLS.
    load_handshakes: Option<[u64; 3]>,
    /// The dependency's handshakes so far by outcome, when it speaks TLS.
    dependency_handshakes: Option<BTreeMap<String, u64>>,
    /// The values are the run's final ones (`Metrics::finish` was called).
    finished: bool,
}

impl State {
    /// Folds in loadgen's buckets not seen yet (`buckets` is every bucket so far): the last one's percentiles, and
    /// every one's latencies into the histogram.
    fn take_buckets(&mut self, buckets: &[loadgen::Bucket]) {
        for b in buckets.iter().skip(self.buckets_seen) {
            if let Some(l) = &b.latency {
                self.last_bucket =
                    Some([l.p50, l.p90, l.p99, l.max].map(|d| d.get().as_secs_f64()));
            }
            if let Some(h) = b
                .interval_histogram
                .as_deref()
                .and_then(|bytes| faultline_hdr::decode(bytes).ok())
            {
                match self.latency.as_mut() {
                    Some(total) => {
                        let _ = total.add(&h);
                    }
                    None => self.latency = Some(h),
                }
            }
        }
        self.buckets_seen = self.buckets_seen.max(buckets.len());
    }
}

/// The figures the endpoint serves; cheap to clone (one shared state).
#[derive(Clone, Default)]
pub struct Metrics {
    state: Arc<Mutex<State>>,
    problems: Arc<Mutex<Vec<String>>>,
    /// A scrape has been answered with the final values.
    final_read: Arc<AtomicBool>,
}

/// The endpoint while it serves; `close` ends it.
pub struct Endpoint {
    /// The address it listens on.
    pub addr: SocketAddr,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// Waits until a scrape has read the final values of `metrics`, `linger` has passed or `interrupted` holds
    /// (Ctrl-C), whichever comes first, then closes: a scrape in progress may finish within a bounded time, then the
    /// server is stopped.
    pub async fn close(self, metrics: &Metrics, linger: Duration, interrupted: impl Fn() -> bool) {
        let until = tokio::time::Instant::now() + linger;
        while !metrics.final_read.load(Ordering::Acquire)
            && !interrupted()
            && tokio::time::Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.shutdown.send(());
        let mut task = self.task;
        if tokio::time::timeout(CLOSE_TIMEOUT, &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// An expectation's status: 0 pending, 1 held, 2 failed, 3 inconclusive.
fn status(v: Option<&Verdict>) -> u8 {
    match v.map(|v| v.outcome()) {
        None => 0,
        Some(Outcome::Pass) => 1,
        Some(Outcome::Fail) => 2,
        Some(Outcome::Inconclusive) => 3,
    }
}

fn breaker_value(s: BreakerState) -> i64 {
    match s {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

impl Metrics {
    /// Every series of the scenario at its starting value: expectations pending, nothing counted yet.
    pub fn new(v: &Validated) -> Metrics {
        let state = State {
            phases: v
                .scenario
                .dependency
                .phase_names()
                .into_iter()
                .map(|(n, _)| n)
                .collect(),
            by_class: OutcomeClass::ALL.iter().map(|c| (c.name(), 0)).collect(),
            routes_in_flight: v
                .scenario
                .dependency
                .routes
                .keys()
                .map(|r| (r.clone(), 0))
                .collect(),
            pool_limits: crate::report::result::pool_limits(&v.expectations)
                .into_iter()
                .map(|(r, l)| {
                    (
                        r,
                        if l.inclusive {
                            l.bound
                        } else {
                            l.bound.saturating_sub(1)
                        },
                    )
                })
                .collect(),
            breakers: v
                .scenario
                .breakers
                .keys()
                .map(|b| (b.clone(), None))
                .collect(),
            expectations: v
                .expectations
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    (
                        e.id.clone().unwrap_or_else(|| format!("#{}", i + 1)),
                        e.name(),
                        0,
                    )
                })
                .collect(),
            ..State::default()
        };
        Metrics {
            state: Arc::new(Mutex::new(state)),
            problems: Arc::default(),
            final_read: Arc::default(),
        }
    }

    /// Says what could not be exported (listed in the report).
    pub fn problem(&self, p: String) {
        tracing::warn!("{p}");
        if let Ok(mut v) = self.problems.lock() {
            v.push(p);
        }
    }

    /// What could not be exported, as sentences.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Takes the run loop's figures of this tick: the load's progress, loadgen's finished buckets so far, the
    /// live record (calls in flight per route), the breakers' last observed states and the verdicts decided.
    #[allow(clippy::too_many_arguments)]
    pub fn tick(
        &self,
        elapsed: Duration,
        phases: &[(String, Duration)],
        progress: &loadgen::Progress,
        buckets: &[loadgen::Bucket],
        live: &RunRecord,
        breakers: &BreakerWatch,
        decided: &[Option<Verdict>],
    ) {
        let Ok(mut s) = self.state.lock() else { return };
        s.elapsed_s = elapsed.as_secs_f64();
        s.phase = phases
            .iter()
            .rfind(|(_, at)| *at <= elapsed)
            .map(|(n, _)| n.clone());
        s.offered = progress.intended;
        s.sent = progress.sent;
        for c in OutcomeClass::ALL {
            s.by_class.insert(c.name(), progress.by_class.get(c));
        }
        s.by_class
            .insert(OutcomeClass::Dropped.name(), progress.dropped);
        s.sut_in_flight = progress.in_flight;
        if let Some(t) = progress.tls {
            s.load_handshakes = Some([t.handshakes, t.resumed, t.failed]);
        }
        if let Some(h) = &live.handshakes {
            let mut by_outcome: BTreeMap<String, u64> = BTreeMap::new();
            for b in h {
                for (outcome, n) in &b.outcomes {
                    *by_outcome.entry(outcome.clone()).or_insert(0) += n;
                }
            }
            s.dependency_handshakes = Some(by_outcome);
        }
        s.take_buckets(buckets);
        for (route, series) in &live.dependency {
            let now = series.last().map(|b| b.in_flight_max).unwrap_or(0);
            s.routes_in_flight.insert(route.clone(), now);
        }
        for name in breakers.names() {
            let state = breakers.current(name);
            s.breakers.insert(name.clone(), state);
        }
        for (slot, v) in s.expectations.iter_mut().zip(decided) {
            slot.2 = status(v.as_ref());
        }
    }

    /// The values at the end of the run, from its result and loadgen's buckets (all of them, so the histogram
    /// holds every answered request): the totals and every verdict, final.
    pub fn finish(&self, r: &ResultFile, buckets: &[loadgen::Bucket]) {
        let Ok(mut s) = self.state.lock() else { return };
        s.take_buckets(buckets);
        s.offered = r.totals.intended;
        s.sent = r.totals.sent;
        for (class, n) in &r.totals.outcomes {
            if let Some(c) = OutcomeClass::ALL.iter().find(|c| c.name() == class) {
                s.by_class.insert(c.name(), *n);
            }
        }
        s.sut_in_flight = r.totals.still_in_flight;
        if let Some(tls) = &r.tls {
            if let Some(l) = &tls.load {
                s.load_handshakes = Some([l.full, l.resumed, l.failed]);
            }
            if let Some(d) = &tls.dependency {
                s.dependency_handshakes = Some(d.outcomes.clone());
            }
        }
        s.elapsed_s = r.scenario.duration_s;
        s.phase = r.phases.last().map(|p| p.name.clone());
        for (slot, v) in s.expectations.iter_mut().zip(&r.verdicts) {
            slot.2 = status(Some(v));
        }
        s.finished = true;
    }

    /// The Prometheus text exposition of the latest figures.
    pub fn encode(&self) -> String {
        encode(self.state.lock().map(|s| s.clone()).unwrap_or_default())
    }

    /// As `encode`, for a scrape: notes when the final values have been handed out.
    fn scrape(&self) -> String {
        let state = self.state.lock().map(|s| s.clone()).unwrap_or_default();
        let finished = state.finished;
        let text = encode(state);
        if finished {
            self.final_read.store(true, Ordering::Release);
        }
        text
    }

    /// Serves `GET /metrics` on `addr` until the returned endpoint is closed. Refuses an address that is not
    /// loopback unless `allow_remote`; the error is the problem to report.
    pub async fn serve(&self, addr: SocketAddr, allow_remote: bool) -> Result<Endpoint, String> {
        if !addr.ip().is_loopback() && !allow_remote {
            return Err(format!(
                "metrics not served: {addr} is not a loopback address (--metrics-allow-remote serves it anyway)"
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("metrics not served: cannot listen on {addr}: {e}"))?;
        let bound = listener.local_addr().unwrap_or(addr);
        let me = self.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let me = me.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        me.scrape(),
                    )
                }
            }),
        );
        let (shutdown, closed) = tokio::sync::oneshot::channel::<()>();
        // faultd's API server: a slow head or an idle scraper connection is closed (10 s, 60 s).
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            tokio::spawn(async move {
                let _ = closed.await;
                let _ = stop.send(true);
            });
            faultd::timeouts::serve_api(listener, app, Default::default(), stopped).await;
        });
        Ok(Endpoint {
            addr: bound,
            shutdown,
            task,
        })
    }

    /// Pushes the latest figures to the Pushgateway at `url` under job `faultline` and the scenario's name, within
    /// a bounded time; the error is the problem to report.
    pub async fn push(&self, url: &str, scenario: &str) -> Result<(), String> {
        let target = format!(
            "{}/metrics/job/faultline/scenario/{}",
            url.trim_end_matches('/'),
            scenario
        );
        let body = classic(&self.encode());
        let client = crate::http::client_builder()
            .timeout(PUSH_TIMEOUT)
            .connect_timeout(PUSH_TIMEOUT)
            .build()
            .map_err(|e| format!("metrics not pushed to {target}: {e}"))?;
        let send = client
            .put(&target)
            .header("Content-Type", "text/plain; version=0.0.4")
            .body(body)
            .send();
        match tokio::time::timeout(PUSH_TIMEOUT, send).await {
            Err(_) => Err(format!(
                "metrics not pushed to {target}: no answer within {PUSH_TIMEOUT:?}"
            )),
            Ok(Err(e)) if e.is_timeout() => Err(format!(
                "metrics not pushed to {target}: no answer within {PUSH_TIMEOUT:?}"
            )),
            Ok(Err(e)) => Err(format!("metrics not pushed to {target}: {}", causes(&e))),
            Ok(Ok(r)) if !r.status().is_success() => Err(format!(
                "metrics not pushed to {target}: the Pushgateway answered {}",
                r.status()
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

/// An error and its causes, outermost first (reqwest's own message only says that sending failed, not why).
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The OpenMetrics exposition of `state`.
fn encode(state: State) -> String {
    let mut out = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Snapshot(state)));
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    // A series without labels is written `name{} value` by the collector API: drop the empty braces.
    out.replace("{} ", " ")
}

/// The OpenMetrics exposition in the classic text format the Pushgateway reads: no `# EOF` or `# UNIT` line, and
/// a counter's family named as its sample (`_total`).
fn classic(open_metrics: &str) -> String {
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

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        type Rows<'a> = Vec<(Vec<(&'a str, &'a str)>, f64)>;
        let mut family = |name: &str,
                          help: &str,
                          unit: Option<&prometheus_client::registry::Unit>,
                          kind: MetricType,
                          rows: Rows<'_>| {
            let mut f = encoder.encode_descriptor(name, help, unit, kind)?;
            for (labels, v) in rows {
                match kind {
                    MetricType::Counter => {
                        ConstCounter::new(v as u64).encode(f.encode_family(&labels)?)?
                    }
                    _ => ConstGauge::new(v).encode(f.encode_family(&labels)?)?,
                }
            }
            Ok::<(), std::fmt::Error>(())
        };
        let one = |v: f64| -> Rows<'_> { vec![(vec![], v)] };
        family(
            "faultline_elapsed_seconds",
            "Time since the run's t = 0",
            None,
            MetricType::Gauge,
            one(s.elapsed_s),
        )?;
        family(
            "faultline_offered_requests",
            "Requests the load's schedule has issued (sent + dropped)",
            None,
            MetricType::Counter,
            one(s.offered as f64),
        )?;
        family(
            "faultline_sent_requests",
            "Requests sent to the SUT",
            None,
            MetricType::Counter,
            one(s.sent as f64),
        )?;
        family(
            "faultline_requests",
            "Requests ended, by outcome class (dropped: refused at the in-flight cap)",
            None,
            MetricType::Counter,
            s.by_class
                .iter()
                .map(|(c, n)| (vec![("class", *c)], *n as f64))
                .collect(),
        )?;
        family(
            "faultline_sut_in_flight_requests",
            "Requests sent to the SUT and not yet ended",
            None,
            MetricType::Gauge,
            one(s.sut_in_flight as f64),
        )?;
        if let Some([p50, p90, p99, max]) = s.last_bucket {
            family(
                "faultline_sut_latency_seconds",
                "SUT latency from the intended send time over the last bucket, by quantile (1 is the max)",
                None,
                MetricType::Gauge,
                vec![
                    (vec![("quantile", "0.5")], p50),
                    (vec![("quantile", "0.9")], p90),
                    (vec![("quantile", "0.99")], p99),
                    (vec![("quantile", "1")], max),
                ],
            )?;
        }
        let in_flight: Rows<'_> = s
            .routes_in_flight
            .iter()
            .map(|(r, n)| (vec![("route", r.as_str())], *n as f64))
            .collect();
        family(
            "faultline_dependency_in_flight_calls",
            "The most calls in flight at each dependency route over its last bucket, measured by faultd (with several \
             faultd replicas, the sum of their peaks: an upper bound)",
            None,
            MetricType::Gauge,
            in_flight,
        )?;
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
        family(
            "faultline_tls_handshakes",
            "TLS handshakes so far: side=load is loadgen's with the SUT (full, resumed, failed), side=dependency \
             what faultd's TLS listener took, by outcome (ok, resumed, expired, alert, ...)",
            None,
            MetricType::Counter,
            handshakes,
        )?;
        family(
            "faultline_dependency_pool_limit_calls",
            "The most calls in flight the scenario's pool expectation allows at each route",
            None,
            MetricType::Gauge,
            s.pool_limits
                .iter()
                .map(|(r, n)| (vec![("route", r.as_str())], *n as f64))
                .collect(),
        )?;
        family(
            "faultline_breaker_state",
            "Each breaker's last observed state: 0 closed, 1 open, 2 half-open",
            None,
            MetricType::Gauge,
            s.breakers
                .iter()
                .filter_map(|(b, st)| {
                    Some((vec![("breaker", b.as_str())], breaker_value((*st)?) as f64))
                })
                .collect(),
        )?;
        family(
            "faultline_phase",
            "1 for the schedule's current phase, 0 for the others",
            None,
            MetricType::Gauge,
            s.phases
                .iter()
                .map(|p| {
                    (
                        vec![("phase", p.as_str())],
                        f64::from(s.phase.as_deref() == Some(p)),
                    )
                })
                .collect(),
        )?;
        family(
            "faultline_expectation_status",
            "Each expectation: 0 pending, 1 held, 2 failed, 3 inconclusive",
            None,
            MetricType::Gauge,
            s.expectations
                .iter()
                .map(|(id, name, st)| {
                    (
                        vec![("expectation", id.as_str()), ("name", name.as_str())],
                        *st as f64,
                    )
                })
                .collect(),
        )?;
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
