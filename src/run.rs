//! One run of a scenario: pick loopback ports, start faultd, the webhook receiver and the SUT, wait for readiness,
//! set one clock origin, run the load and the schedule together while observing the breakers, then stop everything
//! and collect the recordings. A hard deadline always ends the run; Ctrl-C and SIGTERM stop the load, return faultd
//! to healthy and still hand back what was recorded, marked aborted.
//!
//! Not for judging or reporting: `run` returns a `RunOutput`; `expect` and `report` take it from there.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::breaker::inference::{self, InferenceParams, Traffic};
use crate::breaker::prometheus;
use crate::breaker::{BreakerState, BreakerTimeline, Source};
use crate::expect::{Expectation, Verdict};
use crate::observe;
use crate::record::RunRecord;
use crate::scenario::{Observation, Placeholders, Validated};
use crate::sut::{ChildSut, OutputLine, SutError};

/// The seed of a scenario that names none: runs are reproducible by default.
pub const DEFAULT_SEED: u64 = 1;

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// The load ran its full duration.
    Completed,
    /// Stopped by a signal (Ctrl-C, SIGTERM).
    Aborted { signal: String },
    /// The hard deadline passed before the load finished.
    Deadline,
    /// The SUT exited during the run.
    SutDied { status: String, last_lines: String },
    /// An expectation marked `abort_on_fail` failed while the run went on.
    StoppedOnFailure { expectation: String },
}

/// Everything a run produced, before judging.
pub struct RunOutput {
    pub started: SystemTime,
    pub ending: Ending,
    pub record: RunRecord,
    pub load: loadgen::Recording,
    pub dependency: faultd::Recording,
    /// For each breaker with a known route, the timeline inferred from traffic (beside the observed one).
    pub inferred: BTreeMap<String, BreakerTimeline>,
    pub verdicts: Vec<Verdict>,
    /// The run's own checks that failed (e.g. request conservation), as sentences.
    pub run_errors: Vec<String>,
}

/// Why a run could not start or broke before recording anything: exit code 3.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start faultd: {0}")]
    Faultd(String),
    #[error("cannot start the demo SUT: {0}")]
    Demo(String),
    #[error(transparent)]
    Sut(#[from] SutError),
    #[error("cannot start the load: {0}")]
    Load(String),
    #[error("cannot serve the breaker webhook: {0}")]
    Webhook(std::io::Error),
    #[error("cannot configure the external faultd at {url}: {message}")]
    ExternalFaultd { url: String, message: String },
}

/// A transition pushed to the webhook.
#[derive(Debug, Clone, Deserialize)]
pub struct BreakerEvent {
    pub breaker: String,
    pub to: String,
    #[serde(default)]
    pub at_unix_ms: Option<u64>,
}

type Events = Arc<Mutex<Vec<(Instant, Option<u64>, BreakerEvent)>>>;

/// Scraped states per breaker, with their time from the origin.
type Scraped = Arc<Mutex<BTreeMap<String, Vec<(Duration, BreakerState)>>>>;

/// Runs a validated scenario to its end.
pub async fn run(v: &Validated) -> Result<RunOutput, RunError> {
    let scenario = &v.scenario;
    let bucket = scenario
        .bucket
        .map(|b| b.get())
        .unwrap_or(Duration::from_millis(100));
    let seed = scenario.seed.unwrap_or(DEFAULT_SEED);
    let started = SystemTime::now();
    // Listen for Ctrl-C and SIGTERM from the very start: until a handler is installed, either signal kills the
    // process outright, which would orphan a SUT that is still starting (it runs in a process group of its own).
    let mut signals = Signals::new();

    // The dependency: embedded unless the scenario names an external faultd.
    let mut dependency_config = scenario.dependency.clone();
    dependency_config.seed = Some(dependency_config.seed.unwrap_or(seed));
    dependency_config.bucket = Some(faultline_units::Dur(bucket));
    let faultd = match &scenario.faultd {
        None => Some(
            faultd::start(
                dependency_config.clone(),
                faultd::Options {
                    listen: loopback(0),
                    control: Some(loopback(0)),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| RunError::Faultd(e.to_string()))?,
        ),
        Some(ext) => {
            push_config(&ext.control, ext.token.as_deref(), &dependency_config).await?;
            None
        }
    };
    let faultd_url = match (&faultd, &scenario.faultd) {
        (Some(f), _) => format!("http://{}", f.data_addr()),
        (None, Some(ext)) => ext.url.trim_end_matches('/').to_string(),
        (None, None) => unreachable!("faultd is either embedded or external"),
    };

    // The webhook receiver for pushed breaker transitions.
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let webhook_listener = tokio::net::TcpListener::bind(loopback(0))
        .await
        .map_err(RunError::Webhook)?;
    let webhook_addr = webhook_listener.local_addr().map_err(RunError::Webhook)?;
    let webhook_url = format!("http://{webhook_addr}/breaker-events");
    let app = Router::new()
        .route("/breaker-events", post(receive_event))
        .with_state(events.clone());
    let webhook_task = tokio::spawn(async move {
        let _ = axum::serve(webhook_listener, app).await;
    });

    // The SUT.
    let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<OutputLine>();
    let mut child: Option<ChildSut> = None;
    // A signal that arrived before the load started: the run is recorded (empty) and ends at once, aborted.
    let mut aborted_early: Option<&'static str> = None;
    let mut demo_sut: Option<demo::Demo> = None;
    let sut_url = if let Some(cfg) = &scenario.sut.demo {
        let d = demo::start(
            cfg.clone(),
            demo::Options {
                listen: loopback(0),
                dependency_url: faultd_url.clone(),
                webhook: Some(webhook_url.clone()),
            },
        )
        .await
        .map_err(|e| RunError::Demo(e.to_string()))?;
        let url = format!("http://{}", d.addr());
        demo_sut = Some(d);
        url
    } else {
        let port =
            free_port().map_err(|e| RunError::Demo(format!("cannot pick a free port: {e}")))?;
        let faultd_addr: Option<SocketAddr> = faultd.as_ref().map(|f| f.data_addr());
        let mut values = BTreeMap::from([
            ("faultd.url".to_string(), faultd_url.clone()),
            ("sut.port".to_string(), port.to_string()),
            ("webhook.url".to_string(), webhook_url.clone()),
            ("seed".to_string(), seed.to_string()),
        ]);
        if let Some(a) = faultd_addr {
            values.insert("faultd.host".into(), a.ip().to_string());
            values.insert("faultd.port".into(), a.port().to_string());
        }
        if let Some(c) = faultd.as_ref().and_then(|f| f.control_addr()) {
            values.insert("faultd.control".into(), format!("http://{c}"));
        }
        let mut p = Placeholders { values, scale: 1.0 };
        let url = p
            .render(scenario.sut.url.as_deref().unwrap_or_default())
            .trim_end_matches('/')
            .to_string();
        p.values.insert("sut.url".into(), url.clone());
        if let Some(argv) = &scenario.sut.command {
            let argv: Vec<String> = argv.iter().map(|a| p.render(a)).collect();
            let env: Vec<(String, String)> = scenario
                .sut
                .env
                .iter()
                .map(|(k, val)| (k.clone(), p.render(val)))
                .collect();
            let mut c = ChildSut::start(&argv, &env, lines_tx.clone())?;
            let ready = format!(
                "{url}{}",
                scenario.sut.ready.as_deref().unwrap_or("/health")
            );
            let timeout = scenario
                .sut
                .ready_timeout
                .map(|d| d.get())
                .unwrap_or(Duration::from_secs(30));
            let readiness = tokio::select! {
                r = c.wait_ready(&ready, timeout) => r,
                name = signals.recv() => {
                    aborted_early = Some(name);
                    Ok(())
                }
            };
            if let Err(e) = readiness {
                c.stop(Duration::from_secs(2)).await;
                return Err(e.into());
            }
            child = Some(c);
        }
        url
    };
    drop(lines_tx);

    // One clock: t = 0 a moment from now, so that every component is armed before it.
    let origin = Instant::now() + Duration::from_millis(20);
    let origin_wall = SystemTime::now() + Duration::from_millis(20);
    if let Some(f) = &faultd {
        f.start_schedule(origin);
    } else if let Some(ext) = &scenario.faultd {
        control_call(&ext.control, ext.token.as_deref(), "/schedule/start", None).await?;
    }
    let phases = scenario.dependency.phase_names();
    let load = loadgen::start(
        scenario.load.clone(),
        loadgen::RunOptions {
            base_url: sut_url.clone(),
            // Aborted before the SUT was ready: an empty timetable, so that not one request reaches it.
            duration: if aborted_early.is_some() {
                Duration::ZERO
            } else {
                scenario.duration.get()
            },
            seed,
            phases: phases.clone(),
            bucket,
            allow_hosts: scenario.allow_hosts.clone(),
            series: loadgen::Series::Keep,
        },
        origin,
    )
    .map_err(|e| RunError::Load(e.to_string()))?;

    // Breaker observation by scraping: one task per URL serves every breaker read from it.
    let scraped: Scraped = Arc::default();
    let mut scrapers = Vec::new();
    let mut by_url: BTreeMap<
        String,
        (
            Duration,
            Vec<(String, crate::breaker::scrape::StateMapping)>,
        ),
    > = BTreeMap::new();
    for (name, obs) in &v.breakers {
        if let Observation::Metrics {
            url_or_path,
            mapping,
            interval,
        } = obs
        {
            let url = if url_or_path.starts_with("http") {
                url_or_path.clone()
            } else {
                format!("{sut_url}{url_or_path}")
            };
            let entry = by_url.entry(url).or_insert((interval.get(), Vec::new()));
            entry.0 = entry.0.min(interval.get());
            entry.1.push((name.clone(), mapping.clone()));
        }
    }
    for (url, (interval, breakers)) in by_url {
        let scraped = scraped.clone();
        scrapers.push(tokio::spawn(scrape_loop(
            url, interval, breakers, origin, scraped,
        )));
    }

    // Wait for the load to end, a signal, the SUT dying, or the hard deadline.
    let live = std::io::stderr().is_terminal();
    let deadline =
        origin + scenario.duration.get() + scenario.load.timeout.get() + Duration::from_secs(30);
    let mut log_lines: Vec<OutputLine> = Vec::new();
    let mut ending = Ending::Completed;
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let end_of_schedule = origin + scenario.duration.get();
    // Expectations that may stop the run early: calls in flight at a route, read from faultd once a second.
    let live_limits: Vec<LiveLimit> = v
        .expectations
        .iter()
        .zip(&scenario.expect)
        .filter(|(_, spec)| spec.value.abort_on_fail)
        .filter_map(|(e, _)| match e {
            Expectation::MaxInFlight {
                route,
                bound,
                inclusive,
                during,
            } => {
                let span = during.as_ref().and_then(|p| {
                    let spans = crate::observe::spans(&phases, scenario.duration.get());
                    spans
                        .into_iter()
                        .find(|s| &s.name == p)
                        .map(|s| (s.start, s.end))
                });
                Some((e.name(), route.clone(), *bound, *inclusive, span))
            }
            _ => None,
        })
        .collect();
    let mut next_live_check = Instant::now() + Duration::from_secs(1);
    if let Some(name) = aborted_early {
        ending = Ending::Aborted {
            signal: name.to_string(),
        };
    }
    loop {
        if aborted_early.is_some() {
            break;
        }
        tokio::select! {
            _ = ticker.tick() => {
                if let Some(c) = child.as_mut() {
                    if let Some(status) = c.exited() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        ending = Ending::SutDied { status, last_lines: c.last_lines() };
                        break;
                    }
                }
                if live {
                    live_line(origin, &phases, &load, faultd.as_ref(), &v.breakers, &scraped, &events);
                }
                if !live_limits.is_empty() && Instant::now() >= next_live_check {
                    next_live_check += Duration::from_secs(1);
                    if let Some(failed) = faultd.as_ref().and_then(|f| live_failure(&f.recording(), &live_limits)) {
                        ending = Ending::StoppedOnFailure { expectation: failed };
                        break;
                    }
                }
                if Instant::now() >= end_of_schedule {
                    break;
                }
                if Instant::now() >= deadline {
                    ending = Ending::Deadline;
                    break;
                }
            }
            Some(line) = lines_rx.recv() => log_lines.push(line),
            name = signals.recv() => {
                ending = Ending::Aborted { signal: name.to_string() };
                break;
            }
        }
    }
    if live {
        eprint!("\r\x1b[2K");
    }
    if ending != Ending::Completed {
        load.stop();
    }
    if let Some(f) = &faultd {
        if ending != Ending::Completed {
            f.reset_to_healthy();
        }
    }
    // Let in-flight requests finish. The wait is bounded by the client timeout (and the deadline), so a signal
    // here does not cut it short, which would lose the recording: it marks the run aborted and the wait goes on.
    let finish = tokio::time::timeout_at(
        deadline.max(Instant::now() + Duration::from_secs(1)),
        load.finish(),
    );
    tokio::pin!(finish);
    let load_recording = loop {
        tokio::select! {
            r = &mut finish => break r.ok(),
            name = signals.recv() => {
                if ending == Ending::Completed {
                    ending = Ending::Aborted { signal: name.to_string() };
                    if let Some(f) = &faultd {
                        f.reset_to_healthy();
                    }
                }
            }
        }
    };
    for s in &scrapers {
        s.abort();
    }
    while let Ok(line) = lines_rx.try_recv() {
        log_lines.push(line);
    }
    let dependency_recording = match &faultd {
        Some(f) => f.recording(),
        None => match fetch_recording(scenario.faultd.as_ref()).await {
            Some(r) => r,
            None => {
                return Err(RunError::ExternalFaultd {
                    url: scenario
                        .faultd
                        .as_ref()
                        .map(|f| f.control.clone())
                        .unwrap_or_default(),
                    message: "cannot read its recording".into(),
                })
            }
        },
    };
    if let Some(f) = &faultd {
        f.stop_schedule();
        f.reset_to_healthy();
    } else if let Some(ext) = &scenario.faultd {
        let _ = control_call(&ext.control, ext.token.as_deref(), "/schedule/reset", None).await;
    }
    if let Some(c) = child.take() {
        c.stop(Duration::from_secs(3)).await;
    }
    let demo_transitions = demo_sut
        .as_ref()
        .map(|d| d.transitions())
        .unwrap_or_default();
    if let Some(d) = demo_sut.take() {
        d.shutdown().await;
    }
    if let Some(f) = faultd {
        f.shutdown().await;
    }
    webhook_task.abort();
    let _ = demo_transitions;

    let load_recording = match load_recording {
        Some(r) => r,
        None => {
            return Err(RunError::Load(
                "the load did not finish in time after the run was stopped".into(),
            ));
        }
    };
    let elapsed = Instant::now()
        .saturating_duration_since(origin)
        .min(scenario.duration.get());
    let run_length = if ending == Ending::Completed {
        scenario.duration.get()
    } else {
        elapsed
    };

    // Timelines per breaker, from their sources.
    let scraped = scraped.lock().map(|s| s.clone()).unwrap_or_default();
    let events = events.lock().map(|e| e.clone()).unwrap_or_default();
    let mut breakers = BTreeMap::new();
    let mut record = observe::record(
        bucket,
        run_length,
        &phases,
        &load_recording,
        &dependency_recording,
    );
    let mut inferred = BTreeMap::new();
    for name in v.breakers.keys() {
        if let Some(route) = v.breaker_route(name) {
            if let Ok(t) = infer_breaker(&record, &route) {
                inferred.insert(name.clone(), t);
            }
        }
    }
    for (name, obs) in &v.breakers {
        let timeline = match obs {
            Observation::Metrics { interval, .. } => BreakerTimeline::from_observations(
                scraped.get(name).map(|v| v.as_slice()).unwrap_or_default(),
                Source::Metrics,
                interval.get(),
            ),
            Observation::Webhook { name: event_name } => {
                // The SUT's own timestamp, where it sends one, is when the breaker changed; arrival here is a few
                // milliseconds later, long enough to count returning traffic as probes.
                let origin_unix_ms = origin_wall
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i128)
                    .unwrap_or(0);
                let mut obs: Vec<(Duration, BreakerState)> = events
                    .iter()
                    .filter(|(_, _, e)| &e.breaker == event_name)
                    .filter_map(|(at, stamped, e)| {
                        let arrived = at.saturating_duration_since(origin);
                        let t = match stamped {
                            Some(ms) if (*ms as i128 - origin_unix_ms).abs() < 86_400_000 => {
                                Duration::from_millis((*ms as i128 - origin_unix_ms).max(0) as u64)
                                    .min(arrived)
                            }
                            _ => arrived,
                        };
                        BreakerState::parse(&e.to).map(|s| (t, s))
                    })
                    .collect();
                obs.sort_by_key(|(t, _)| *t);
                BreakerTimeline::from_observations(&obs, Source::Webhook, Duration::ZERO)
            }
            Observation::Log { pattern } => {
                let obs: Vec<(Duration, BreakerState)> = log_lines
                    .iter()
                    .filter_map(|l| {
                        let caps = pattern.captures(&l.text)?;
                        if let Some(b) = caps.name("breaker") {
                            if b.as_str() != name {
                                return None;
                            }
                        }
                        let state = BreakerState::parse(caps.name("state")?.as_str())?;
                        Some((l.at.saturating_duration_since(origin), state))
                    })
                    .collect();
                BreakerTimeline::from_observations(&obs, Source::Log, Duration::ZERO)
            }
            Observation::Inferred => inferred.get(name).cloned().unwrap_or_default(),
        };
        breakers.insert(name.clone(), timeline);
    }
    record.breakers = breakers;

    let mut run_errors = Vec::new();
    let c = load_recording.conservation;
    if !c.holds {
        run_errors.push(format!(
            "requests were not conserved: {} sent, but the outcome classes add up to {} with {} still in flight",
            c.sent, c.sum_of_classes, c.in_flight
        ));
    }
    let verdicts = v
        .expectations
        .iter()
        .zip(&v.scenario.expect)
        .map(|(e, spec)| Verdict {
            id: spec.value.id.clone(),
            ..e.evaluate(&record)
        })
        .collect();
    Ok(RunOutput {
        started,
        ending,
        record,
        load: load_recording,
        dependency: dependency_recording,
        inferred,
        verdicts,
        run_errors,
    })
}

/// An `abort_on_fail` pool limit: the expectation's name, the route, the bound, whether the bound is inclusive,
/// and the phase span it applies to (the whole run if none).
type LiveLimit = (String, String, u64, bool, Option<(Duration, Duration)>);

/// The first live limit the recording already breaks: calls in flight at a route over the bound, within the
/// expectation's phase if it names one.
fn live_failure(rec: &faultd::Recording, limits: &[LiveLimit]) -> Option<String> {
    let bucket = rec.bucket.get().max(Duration::from_millis(1));
    for (name, route, bound, inclusive, span) in limits {
        let Some(r) = rec.routes.get(route) else {
            continue;
        };
        let peak = r
            .buckets
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                span.is_none_or(|(a, b)| {
                    let t = bucket * *i as u32;
                    t >= a && t < b
                })
            })
            .map(|(_, b)| b.in_flight_max)
            .max()
            .unwrap_or(0);
        let broken = if *inclusive {
            peak > *bound
        } else {
            peak >= *bound
        };
        if broken {
            return Some(format!("{name} (calls in flight reached {peak})"));
        }
    }
    None
}

/// Infers a breaker's timeline from the SUT's load and the calls at `route`, the first phase as reference.
pub fn infer_breaker(
    record: &RunRecord,
    route: &str,
) -> Result<BreakerTimeline, inference::InferenceError> {
    let series = record.dependency.get(route).cloned().unwrap_or_default();
    let sent: Vec<u64> = record
        .sut
        .iter()
        .map(|b| {
            b.offered
                .saturating_sub(b.completed.get(crate::record::OutcomeClass::Dropped))
        })
        .collect();
    let arrivals: Vec<u64> = series.iter().map(|b| b.arrivals).collect();
    let held: Vec<u64> = series.iter().map(|b| b.in_flight_max).collect();
    let reference_end = record
        .phases
        .first()
        .map(|p| p.end)
        .unwrap_or(record.duration);
    let reference = record.buckets_in(Duration::ZERO, reference_end);
    inference::infer(
        Traffic {
            bucket: record.bucket,
            sut_sent: &sent,
            dependency_arrivals: &arrivals,
            dependency_in_flight: &held,
            reference,
        },
        InferenceParams::default(),
    )
}

async fn receive_event(
    State(events): State<Events>,
    Json(event): Json<BreakerEvent>,
) -> &'static str {
    if let Ok(mut e) = events.lock() {
        e.push((Instant::now(), event.at_unix_ms, event));
    }
    "ok"
}

async fn scrape_loop(
    url: String,
    interval: Duration,
    breakers: Vec<(String, crate::breaker::scrape::StateMapping)>,
    origin: Instant,
    out: Scraped,
) {
    let Ok(client) = reqwest::Client::builder()
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
            for (name, mapping) in &breakers {
                if let Some(state) = mapping.state(&samples) {
                    out.entry(name.clone()).or_default().push((at, state));
                }
            }
        }
    }
}

fn live_line(
    origin: Instant,
    phases: &[(String, Duration)],
    load: &loadgen::LoadRun,
    faultd: Option<&faultd::Faultd>,
    breakers: &BTreeMap<String, Observation>,
    scraped: &Scraped,
    events: &Events,
) {
    let t = Instant::now().saturating_duration_since(origin);
    let phase = phases
        .iter()
        .rfind(|(_, at)| *at <= t)
        .map(|(n, _)| n.as_str())
        .unwrap_or("-");
    let p = load.progress();
    let in_flight = faultd
        .map(|f| f.in_flight().to_string())
        .unwrap_or_else(|| "?".into());
    let states: Vec<String> = breakers
        .keys()
        .map(|name| {
            let scraped_state = scraped
                .lock()
                .ok()
                .and_then(|s| s.get(name).and_then(|v| v.last().map(|(_, st)| *st)));
            let pushed = events.lock().ok().and_then(|e| {
                e.iter()
                    .rev()
                    .find(|(_, _, ev)| &ev.breaker == name)
                    .and_then(|(_, _, ev)| BreakerState::parse(&ev.to))
            });
            format!(
                "{name}={}",
                scraped_state
                    .or(pushed)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "?".into())
            )
        })
        .collect();
    eprint!(
        "\r\x1b[2K{:>6.1}s  {phase:<12} sent {:>7}  done {:>7}  p99(1s) {:>9}  in flight at dependency {:>5}  {}",
        t.as_secs_f64(),
        p.sent,
        p.completed,
        p.p99_last_second.map(|d| crate::expect::ms(d.get())).unwrap_or_else(|| "-".into()),
        in_flight,
        states.join(" ")
    );
}

/// Ctrl-C and SIGTERM, listened for from the moment this is created (the process-wide handlers are installed at
/// once, so a signal that arrives before anyone awaits `recv` is kept, not fatal).
pub struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers. Must be called inside a tokio runtime.
    pub fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Resolves on the next Ctrl-C or SIGTERM, with the signal's name.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                let received = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !received {
                    // No handler (or the driver is gone): never resolve rather than spin.
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                _ = next(&mut self.interrupt) => "SIGINT",
                _ = next(&mut self.terminate) => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

impl Default for Signals {
    fn default() -> Signals {
        Signals::new()
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(loopback(0))?;
    Ok(l.local_addr()?.port())
}

async fn push_config(
    control: &str,
    token: Option<&str>,
    config: &faultd::Config,
) -> Result<(), RunError> {
    let body = serde_json::to_value(config).map_err(|e| RunError::ExternalFaultd {
        url: control.into(),
        message: e.to_string(),
    })?;
    control_call(control, token, "/config", Some(body)).await
}

async fn control_call(
    control: &str,
    token: Option<&str>,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<(), RunError> {
    let url = format!("{}{path}", control.trim_end_matches('/'));
    let client = reqwest::Client::new();
    let mut req = match body {
        Some(b) => client.put(&url).json(&b),
        None => client.post(&url),
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| RunError::ExternalFaultd {
        url: url.clone(),
        message: e.to_string(),
    })?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Err(RunError::ExternalFaultd {
            url,
            message: format!("{status}: {text}"),
        });
    }
    Ok(())
}

async fn fetch_recording(
    ext: Option<&crate::scenario::ExternalFaultd>,
) -> Option<faultd::Recording> {
    let ext = ext?;
    let mut req =
        reqwest::Client::new().get(format!("{}/recording", ext.control.trim_end_matches('/')));
    if let Some(t) = &ext.token {
        req = req.bearer_auth(t);
    }
    req.send().await.ok()?.json().await.ok()
}
