//! The live Prometheus endpoint (`faultline run --metrics-listen ADDR`) and the push of the final values to a
//! Pushgateway (`--push URL`). The run loop hands its figures over once per tick (`run::Tick`); a scrape encodes the latest ones
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

use crate::breaker::BreakerState;
use crate::expect::{Outcome, Verdict};
use crate::record::{OutcomeClass, RunRecord};
use crate::report::ResultFile;
use crate::run::Tick;
use crate::scenario::Validated;

mod exposition;

use exposition::{classic, encode};

/// How long a push may take before it is given up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a scrape in progress may take to finish once the endpoint closes.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// every one's latencies into the histogram. A bucket whose latency bytes moved into the live record
    /// (`observe::append_sut_taking`) is read there.
    fn take_buckets(&mut self, buckets: &[loadgen::Bucket], live: Option<&RunRecord>) {
        for (i, b) in buckets.iter().enumerate().skip(self.buckets_seen) {
            if let Some(l) = &b.latency {
                self.last_bucket =
                    Some([l.p50, l.p90, l.p99, l.max].map(|d| d.get().as_secs_f64()));
            }
            if let Some(h) = b
                .interval_histogram
                .as_deref()
                .or_else(|| live?.sut_latency.encoded(i))
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
    pub fn tick(&self, t: &Tick<'_>) {
        let Tick {
            elapsed,
            phases,
            progress,
            buckets,
            live,
            breakers,
            decided,
        } = *t;
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
        s.take_buckets(buckets, Some(live));
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
        s.take_buckets(buckets, None);
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
