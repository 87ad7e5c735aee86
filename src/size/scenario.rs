//! The scenario a sizing writes (`faultline size -o`): the dependency healthy, then degraded (the record's own
//! degradation, bucket by bucket, when there is one; else a step to the degraded latency), then recovered; the
//! service with the recommended settings (the demo's operation config, or a command's environment with scaled
//! `{ms:..}` placeholders); and the expectations those settings must meet: the breaker opens in the time the
//! arithmetic gives, the pool holds, requests fail fast while it is open, it closes after the recovery with the
//! probes asked. For the demo, the proof is the seeds' incident: without a timeout the pool fills.
//!
//! Written by hand rather than serialised, with comments giving each number's reason. Not for the numbers
//! (`arithmetic`).

use std::fmt::Write;

use super::arithmetic::Sizing;
use super::evidence::Evidence;
use super::text::{count, percent, secs};
use super::{Fallback, SizeError};
use crate::import::{self, yaml_quoted, DepBucket};

/// The longest healthy stretch the scenario plays before the degradation: enough to fill a breaker's window.
const HEALTHY_MAX_S: f64 = 20.0;

/// A service of the user's own, started by a command.
#[derive(Debug, Clone)]
pub struct CommandSut {
    /// The command line, split into words.
    pub command: Vec<String>,
    /// The variable through which it finds the dependency's base URL.
    pub dependency_env: String,
    /// The variable it reads its port from.
    pub port_env: String,
    /// The path the load GETs.
    pub get: String,
}

/// What the scenario drives.
#[derive(Debug, Clone)]
pub enum Target {
    /// The bundled demo, its `pricing` operation configured with the settings.
    Demo,
    /// A command, the settings in its environment.
    Command(CommandSut),
}

/// Whole seconds at or above `s`.
fn ceil_s(s: f64) -> f64 {
    s.ceil().max(1.0)
}

/// The scenario's YAML; `name` names it, `invocation` is the command line that wrote it (for its first comment).
pub fn scenario(
    s: &Sizing,
    evidence: Option<&Evidence>,
    target: &Target,
    name: &str,
    invocation: &str,
) -> Result<String, SizeError> {
    let (Some(t), Some(f), Some(rate)) = (&s.timeout, &s.in_flight, s.numbers.rate_per_instance)
    else {
        return Err(SizeError::Numbers(
            "a scenario needs the healthy p99 and the rate: give --p99 and --rate, or a record"
                .into(),
        ));
    };
    let b = &s.breaker;
    let o = &s.open_window;
    let opens = if evidence.is_some_and(|e| e.degraded().is_some()) {
        b.opens_on_record_s
    } else {
        b.opens_after_s
    };
    let opens_bound = opens.map(|x| ceil_s(x + (0.2 * x).max(1.0)));
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Written by `{invocation}`: the settings it recommends, and what they must do."
    );
    let _ = writeln!(y, "name: {name}");
    let _ = writeln!(y, "description: >");
    let description = format!(
        "  Sized by the seeds' arithmetic (docs/sizing.md){}: timeout {} (3x the healthy p99), {} failures over a \
         rolling {} window with at least {} calls, open for {}, {} half-open probe{}, a pool of {}. The dependency \
         degrades{}; the breaker must open{}, keep the pool under {}, answer fast while open, and close after the \
         recovery.",
        s.numbers
            .record
            .as_ref()
            .map(|r| format!(" from {}", r.replace(['\n', '\r'], " ")))
            .unwrap_or_default(),
        secs(t.seconds),
        percent(b.failure_rate),
        secs(b.window_s),
        b.min_calls,
        secs(o.seconds),
        s.half_open.probes,
        if s.half_open.probes == 1 { "" } else { "s" },
        f.pool,
        if evidence.is_some_and(|e| e.degraded().is_some()) {
            " as the record shows, bucket by bucket"
        } else {
            ""
        },
        opens_bound
            .map(|x| format!(" within {}", secs(x)))
            .unwrap_or_default(),
        f.pool
    );
    y.push_str(&super::text::wrap(&description, 0));
    let timeline = dependency(&mut y, s, evidence, opens_bound)?;
    service(&mut y, s, target);
    load(&mut y, s, rate, target);
    expectations(&mut y, s, &timeline, opens.zip(opens_bound), target);
    Ok(y.replace("${", "$${"))
}

/// How long the scenario's dependency is degraded, and when it recovers, seconds.
struct Timeline {
    degraded_s: f64,
    recovered_at: f64,
}

/// The duration and the dependency's section: healthy, degraded, recovered.
fn dependency(
    y: &mut String,
    s: &Sizing,
    evidence: Option<&Evidence>,
    opens_bound: Option<f64>,
) -> Result<Timeline, SizeError> {
    let o = &s.open_window;
    let mut phases = String::new();
    let route;
    let healthy_s;
    let degraded_s;
    match evidence.filter(|e| e.degraded().is_some()) {
        Some(e) => {
            let h = e.healthy();
            let d = e.degraded().expect("filtered on a degradation");
            let mut healthy = DepBucket::default();
            for b in &e.buckets[h.start..h.end] {
                merge(&mut healthy, b);
            }
            healthy.latency = e.healthy_latency.clone();
            route = strip(&import::behaviour(&healthy, 1.0));
            // The record's healthy stretch, at most HEALTHY_MAX_S of it: the degradation is what is replayed.
            healthy_s = ((d.start - h.start) as f64 * e.bucket_s).clamp(e.bucket_s, HEALTHY_MAX_S);
            let _ = writeln!(
                phases,
                "    - {{ name: healthy, at: 0s }}\n    # The degradation as recorded, a phase per {} of the record.",
                secs(e.bucket_s)
            );
            for (i, b) in e.buckets[d.start..d.end].iter().enumerate() {
                let name = if i == 0 {
                    "degraded".to_string()
                } else {
                    format!("degraded.{i}")
                };
                let _ = writeln!(
                    phases,
                    "    - {{ name: {name}, at: {}, routes: {{ pricing: {} }} }}",
                    secs(healthy_s + i as f64 * e.bucket_s),
                    import::behaviour(b, 1.0)
                );
            }
            degraded_s = (d.end - d.start) as f64 * e.bucket_s;
        }
        None => {
            let p99 = s.numbers.p99_s.map_or(0.0, |p| p.value);
            // Only the p99 is known: the median is taken at half of it.
            route = format!(
                "latency: {{ p50: {}, p99: {} }}",
                secs(p99 / 2.0),
                secs(p99)
            );
            healthy_s = HEALTHY_MAX_S;
            let _ = writeln!(phases, "    - {{ name: healthy, at: 0s }}");
            let degraded = match s.numbers.degraded_s {
                Some(d) => format!("{{ latency: {{ fixed: {} }} }}", secs(d.value)),
                None => "{ errors: [ { share: 100%, status: 503 } ] }".to_string(),
            };
            if s.numbers.degraded_s.is_none() {
                let _ = writeln!(
                    phases,
                    "    # No degraded latency was given (--degraded): the dependency fails every call instead."
                );
            }
            // Long enough for the breaker to open and the fast answers to be judged.
            degraded_s = opens_bound.map_or(20.0, |b| (b + 10.0).max(15.0));
            let _ = writeln!(
                phases,
                "    - {{ name: degraded, at: {}, routes: {{ pricing: {degraded} }} }}",
                secs(healthy_s)
            );
        }
    }
    let recovered_at = healthy_s + degraded_s;
    let _ = writeln!(
        phases,
        "    - {{ name: recovered, at: {}, routes: {{ pricing: healthy }} }}",
        secs(recovered_at)
    );
    // After the recovery: the open window, a probe, and room to see it close.
    let duration = ceil_s(recovered_at + o.seconds + 5.0);
    let _ = writeln!(y, "duration: {}\nseed: 1", secs(duration));
    let _ = writeln!(y, "\ndependency:\n  routes:");
    let _ = writeln!(y, "    pricing: {{ path: /price/*, {route} }}");
    let _ = writeln!(y, "  phases:");
    y.push_str(&phases);
    Ok(Timeline {
        degraded_s,
        recovered_at,
    })
}

/// Adds `b`'s outcomes and latency to `into`.
fn merge(into: &mut DepBucket, b: &DepBucket) {
    into.latency.merge(&b.latency);
    for (o, c) in &b.outcomes {
        *into.outcomes.entry(*o).or_insert(0) += c;
    }
}

/// A flow mapping without its braces.
fn strip(flow: &str) -> String {
    flow.trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim()
        .to_string()
}

/// The service with the recommended settings.
fn service(y: &mut String, s: &Sizing, target: &Target) {
    let (t, f, b, o) = (
        s.timeout.as_ref().map_or(0.0, |t| t.seconds),
        s.in_flight.as_ref().map_or(1, |f| f.pool),
        &s.breaker,
        &s.open_window,
    );
    let _ = writeln!(y, "sut:");
    match target {
        Target::Demo => {
            let fallback = match o.fallback {
                Fallback::Stale => "stale".to_string(),
                Fallback::Default => "default".to_string(),
                Fallback::None => {
                    format!("{{ unavailable: {{ retry_after: {} }} }}", secs(o.seconds))
                }
            };
            let _ = writeln!(y, "  demo:\n    operations:");
            let _ = writeln!(
                y,
                "      pricing: {{ timeout: {}, pool: {f}, fallback: {fallback},\n                 breaker: {{ failure_rate: {}, window: {}, min_calls: {}, open_for: {}, half_open_calls: {}, close_after: {} }} }}\n",
                secs(t),
                percent(b.failure_rate),
                secs(b.window_s),
                b.min_calls,
                secs(o.seconds),
                s.half_open.probes,
                s.half_open.close_after
            );
        }
        Target::Command(c) => {
            let _ = writeln!(
                y,
                "  # The settings reach the service as these variables; map them onto its breaker's options. The\n  # durations are in milliseconds and follow --time-scale ({{ms:..}})."
            );
            let words: Vec<String> = c.command.iter().map(|w| yaml_quoted(w)).collect();
            let _ = writeln!(y, "  command: [ {} ]", words.join(", "));
            let _ = writeln!(y, "  url: http://127.0.0.1:{{sut.port}}");
            let _ = writeln!(y, "  env:");
            let _ = writeln!(y, "    {}: \"{{sut.port}}\"", c.port_env);
            let _ = writeln!(y, "    {}: \"{{faultd.url}}\"", c.dependency_env);
            let _ = writeln!(y, "    BREAKER_TIMEOUT_MS: \"{{ms:{}}}\"", secs(t));
            let _ = writeln!(
                y,
                "    BREAKER_FAILURE_RATE_PERCENT: \"{}\"",
                count(b.failure_rate * 100.0)
            );
            let _ = writeln!(y, "    BREAKER_WINDOW_MS: \"{{ms:{}}}\"", secs(b.window_s));
            let _ = writeln!(y, "    BREAKER_MIN_CALLS: \"{}\"", b.min_calls);
            let _ = writeln!(y, "    BREAKER_OPEN_MS: \"{{ms:{}}}\"", secs(o.seconds));
            let _ = writeln!(y, "    BREAKER_HALF_OPEN_CALLS: \"{}\"", s.half_open.probes);
            let _ = writeln!(y, "    POOL_SIZE: \"{f}\"\n");
        }
    }
}

/// The load: the rate one instance sees, after a short warm-up.
fn load(y: &mut String, s: &Sizing, rate: f64, target: &Target) {
    let degraded = s.numbers.degraded_s.map_or(0.0, |d| d.value);
    let _ = writeln!(y, "load:");
    let r = count(rate);
    if rate >= 50.0 {
        let _ = writeln!(
            y,
            "  # One instance's share, after a warm-up: connections open before the breaker's window counts in earnest.\n  rate: [ {{ at: 0s, rate: {}/s }}, {{ at: 1s, ramp_to: {r}/s, over: 3s }} ]",
            count((rate / 5.0).max(1.0).round())
        );
    } else {
        let _ = writeln!(y, "  # One instance's share.\n  rate: {r}/s");
    }
    let _ = writeln!(
        y,
        "  # Longer than the degraded calls, so that the load generator never frees a slot itself.\n  timeout: {}",
        secs(ceil_s((degraded * 1.5).max(4.0) + 1.0))
    );
    let get = match target {
        Target::Demo => "/product/{rand:1..1000}".to_string(),
        Target::Command(c) => c.get.clone(),
    };
    let _ = writeln!(y, "  requests: [ {{ get: {} }} ]", yaml_quoted(&get));
    if matches!(target, Target::Demo) {
        let _ = writeln!(y, "  fallback_header: X-Fallback");
    }
    let _ = writeln!(y);
}

/// The breakers watched and the expectations, with the proof for the demo.
fn expectations(
    y: &mut String,
    s: &Sizing,
    tl: &Timeline,
    opens: Option<(f64, f64)>,
    target: &Target,
) {
    let f = s.in_flight.as_ref().map_or(1, |f| f.pool);
    let o = &s.open_window;
    let _ = writeln!(y, "breakers:");
    match target {
        Target::Demo => {
            let _ = writeln!(y, "  pricing: {{ webhook: {{}} }}\n");
        }
        Target::Command(_) => {
            let _ = writeln!(
                y,
                "  # Inferred from the traffic at faultd; if the service exports its breaker's state, watch that instead\n  # (docs/your-service.md).\n  pricing: {{ inferred: true }}\n"
            );
        }
    }
    let _ = writeln!(y, "expect:");
    if let Some((at, bound)) = opens {
        let _ = writeln!(
            y,
            "  # It opens about {} in ({}); the bound adds a fifth, at least 1s.\n  - {{ id: opens, breaker: pricing, opens_within: {}, after: degraded }}",
            secs(at),
            if s.breaker.opens_on_record_s.is_some() {
                "the recorded degradation played through its window"
            } else {
                "the timeout, then the failure rate's share of the window"
            },
            secs(bound)
        );
    }
    let with = s
        .in_flight
        .as_ref()
        .and_then(|f| f.with_timeout)
        .map_or(String::new(), |w| {
            format!(" (with the timeout at most {})", count(w))
        });
    let _ = writeln!(
        y,
        "  # Little's law{with}: the pool of {f} must never be full.\n  - {{ id: pool, dependency: pricing, max_in_flight_below: {f} }}"
    );
    if let Some((at, _)) = opens {
        // The calls in flight when it opens end in the open span, up to a timeout later: a share of the span's
        // requests that the percentile judged must leave out, twice over.
        let t = s.timeout.as_ref().map_or(0.0, |t| t.seconds);
        let late =
            t.min(s.numbers.degraded_s.map_or(t, |d| d.value)) / (tl.degraded_s - at).max(1e-3);
        if let Some(q) = [99u32, 95, 90, 75, 50]
            .into_iter()
            .find(|q| f64::from(100 - q) / 100.0 >= 2.0 * late)
        {
            let _ = writeln!(
                y,
                "  # While open the fallback answers from memory; the calls in flight at the opening ({} of the open span's requests)\n  # end within a timeout and stay above the p{q}.\n  - {{ id: fails-fast, sut_latency: p{q}, below: 100ms, during: degraded, while_open: true }}",
                percent(late)
            );
        }
    }
    if opens.is_some() {
        let _ = writeln!(
            y,
            "  # It opened before the recovery ({}): half-open at most {} later, and a healthy probe closes it.\n  - {{ id: recovers, breaker: pricing, closes_within: {}, after: recovered }}",
            secs(tl.recovered_at),
            secs(o.seconds),
            secs(ceil_s(o.seconds + 2.0))
        );
        let _ = writeln!(
            y,
            "  - {{ id: probes, breaker: pricing, probes_per_half_open_at_most: {} }}",
            s.half_open.probes
        );
    }
    let overflows = s
        .in_flight
        .as_ref()
        .is_some_and(|f| f.without_timeout.is_some_and(|w| w > f64::from(f.pool)));
    if matches!(target, Target::Demo) && overflows {
        let _ = writeln!(
            y,
            "\n# The incident the timeout prevents: without it the degraded calls hold the pool until it is full.\nproof:\n  mistake: [ no_timeout ]\n  fails: [ pool ]"
        );
    }
}
