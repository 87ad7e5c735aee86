//! Writes the imported scenario as YAML text with comments: what was read, the dependency's timeline (one phase
//! per change-point phase, or with `--phases buckets` one per bucket, named after the phase it falls in:
//! `degraded-1`, `degraded-1.1`, ...), the service that stands in, the load as a rate per bucket and the request
//! templates. The expectations are `expectations`' to write.
//!
//! Written by hand rather than serialised: the comments are half of what makes the file editable, and flow style
//! keeps one phase on one line.

use std::fmt::Write;
use std::path::PathBuf;

use super::phases::PhaseSpan;
use super::timeline::{
    lower_edge_us, sut_over, DepBucket, Histogram, Source, Timeline, BIN_EDGES_US,
};
use super::timetable::Written;
use super::yaml_text::{dur, ms_text, share, yaml_quoted};
use super::{CallOutcome, ImportOptions, PhaseMode};

/// How many request templates a scenario lists; the rest are named in a comment.
const LISTED_TEMPLATES: usize = 20;

/// The records' file names, without the folders they were read from (a scenario travels; the folder does not).
fn file_names(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| {
            p.file_name()
                .map_or_else(
                    || p.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                )
                .escape_debug()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A route name for a record's peer: its host without the port (a port is often a connection's ephemeral one,
/// and says nothing a reader can use), and `dependency` for an address (`127.0.0.1:37669`, `[::1]:9000`); a name
/// like `pricing.shop.svc:8080` gives `pricing-shop-svc`, a backend's name (HAProxy's) stays as it is.
pub fn peer_route_name(peer: &str) -> String {
    let peer = peer.split_once("://").map_or(peer, |(_, rest)| rest);
    let host = match peer.rsplit_once(':') {
        // `[v6]:port`, or `host:port`; a bare IPv6 address has colons but no brackets.
        Some((host, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && (host.ends_with(']') || !host.contains(':')) =>
        {
            host
        }
        _ => peer,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_ok() {
        "dependency".into()
    } else {
        route_name(host)
    }
}

/// The longest route name import writes, before a `-2`, `-3`, ... that sets apart two peers of one name: well
/// within faultd's limit on names, and as much of a peer as a reader takes in.
const ROUTE_NAME_BYTES: usize = 64;

/// A route name from a record's peer: its letters kept, other characters as `-`, at most [`ROUTE_NAME_BYTES`].
pub fn route_name(peer: &str) -> String {
    let mut s: String = peer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let mut s = s.trim_matches('-').to_string();
    // Only ASCII is left, so any byte is a character's edge.
    s.truncate(ROUTE_NAME_BYTES);
    let s = s.trim_end_matches('-').to_string();
    if s.is_empty() {
        "dependency".into()
    } else {
        s
    }
}

/// The histogram faultd plays: `[[edge, count], ...]`, each bin's lower edge written with count 0 when the bin
/// before it is empty. Times are divided by `speed`.
fn histogram(h: &Histogram, speed: f64) -> String {
    let ns = |us: u64| (us as f64 * 1000.0 / speed).round() as u64;
    let mut pairs: Vec<(u64, u64)> = Vec::new();
    for (b, c) in &h.bins {
        let lo = ns(lower_edge_us(*b));
        let hi = ns(BIN_EDGES_US[*b]).max(lo + 1);
        if pairs.last().is_none_or(|(e, _)| *e < lo) {
            pairs.push((lo, 0));
        }
        pairs.push((hi, *c));
    }
    let items: Vec<String> = pairs
        .iter()
        .map(|(e, c)| format!("[{}, {c}]", dur(*e)))
        .collect();
    format!("[{}]", items.join(", "))
}

/// One dependency's behaviour in one bucket, as a flow mapping.
pub fn behaviour(b: &DepBucket, speed: f64) -> String {
    let calls = b.calls();
    let mut parts: Vec<String> = Vec::new();
    if b.latency.count() > 0 {
        parts.push(format!(
            "latency: {{ histogram: {} }}",
            histogram(&b.latency, speed)
        ));
    }
    let errors: Vec<String> = b
        .outcomes
        .iter()
        .filter_map(|(o, c)| match o {
            CallOutcome::Status(s) if *s >= 400 => {
                share(*c, calls).map(|sh| format!("{{ share: {sh}, status: {s} }}"))
            }
            _ => None,
        })
        .collect();
    parts.push(format!("errors: [{}]", errors.join(", ")));
    for (kind, outcome) in [
        ("hang", CallOutcome::Timeout),
        ("reset", CallOutcome::Reset),
    ] {
        if let Some(sh) = b.outcomes.get(&outcome).and_then(|c| share(*c, calls)) {
            parts.push(format!("{kind}: {sh}"));
        }
    }
    format!("{{ {} }}", parts.join(", "))
}

/// What was read: the name the scenario gets, the records' files, their lines and the bad lines skipped.
pub struct Read<'a> {
    pub name: &'a str,
    pub paths: &'a [PathBuf],
    pub lines: usize,
    pub bad: usize,
}

/// The scenario's YAML; with `replay`, its load is that exact timetable rather than a rate per bucket.
pub fn write(
    t: &Timeline,
    phases: &[PhaseSpan],
    o: &ImportOptions,
    read: &Read<'_>,
    replay: Option<&Written>,
) -> String {
    let mut y = String::new();
    let speed = o.speed;
    let n = t.buckets();
    let routes = route_names(&t.dependencies());
    header(&mut y, t, phases, o, read, replay);
    let sources = dependency(&mut y, t, phases, o, &routes);
    // One route takes every path, so the recorded requests reach it as they are: faultd alone can stand in for the
    // service. With several, each route has a path of its own that the recorded requests do not hold.
    let stand_in = sources.len() == 1;
    sut(&mut y, stand_in, routes.is_empty());
    let _ = writeln!(y, "load:");
    let max_duration = sut_over(t, 0, n).latency.quantile(1.0).unwrap_or(0.0);
    let timeout = ms_text((max_duration * 2.0).max(30.0) / speed);
    if let Some(r) = replay {
        load_replay(&mut y, r, o, &timeout);
    } else {
        load_rate(&mut y, t, o, &timeout);
    }
    if stand_in {
        super::expectations::reproduced(&mut y, t, phases, &sources[0].0, speed);
    }
    super::expectations::recorded(&mut y, t, phases, speed, stand_in);
    // What the record holds is text, never a variable: a `${` in a path or a peer's name is written as `$${`.
    y.replace("${", "$${")
}

/// A bucket of the record in nanoseconds of the scenario (divided by the speed).
fn bucket_ns(t: &Timeline, speed: f64) -> u64 {
    (t.bucket * 1e9 / speed).round() as u64
}

/// A route name for each dependency of the record. Route names keep only letters and digits, so two peers can come
/// to one name: the later ones get `-2`, ...
fn route_names(deps: &[String]) -> Vec<(String, String)> {
    let mut routes: Vec<(String, String)> = Vec::new();
    for d in deps {
        let base = peer_route_name(d);
        let mut name = base.clone();
        let mut k = 1;
        while routes.iter().any(|(_, r)| *r == name) {
            k += 1;
            name = format!("{base}-{k}");
        }
        routes.push((d.clone(), name));
    }
    routes
}

/// The opening comments, the name, the description and the duration.
fn header(
    y: &mut String,
    t: &Timeline,
    phases: &[PhaseSpan],
    o: &ImportOptions,
    read: &Read<'_>,
    replay: Option<&Written>,
) {
    let Read {
        name,
        paths,
        lines,
        bad,
    } = *read;
    let speed = o.speed;
    let bucket_ns = bucket_ns(t, speed);
    let _ = writeln!(
        y,
        "# Imported by `faultline import` from {} ({} format): {lines} lines, {} requests, {bad} bad lines skipped.",
        file_names(paths),
        o.format,
        t.records()
    );
    let _ = writeln!(
        y,
        "# Bucket {} of the record; speed x{speed}, rate x{}{}. Rename the phases, replace the SUT, and keep or",
        dur((t.bucket * 1e9).round() as u64),
        o.scale_rate,
        if o.redact { ", query strings dropped" } else { "" }
    );
    let _ = writeln!(y, "# drop the expectations at the end.");
    let _ = writeln!(y, "name: {}", route_name(name));
    let _ = writeln!(y, "description: >");
    let summary: Vec<String> = phases
        .iter()
        .map(|p| format!("{} from {}", p.name, dur(bucket_ns * p.start as u64)))
        .collect();
    let _ = writeln!(
        y,
        "  Replay of {}: the load as recorded ({}) and each dependency's latency and status mix {}. Phases found from the record: {}.",
        file_names(paths),
        if replay.is_some() {
            "each request at its recorded time"
        } else {
            "a rate per bucket"
        },
        match o.phases {
            PhaseMode::Found => "phase by phase",
            PhaseMode::Buckets => "bucket by bucket",
        },
        summary.join(", ")
    );
    let _ = writeln!(y, "duration: {}", dur(bucket_ns * t.buckets() as u64));
    let _ = writeln!(y, "seed: 1\n");
}

/// The dependency: a route per dependency of the record (or one playing the service's own answers), each phase's
/// behaviour per route. What each route plays comes back, for the expectations.
fn dependency<'a>(
    y: &mut String,
    t: &Timeline,
    phases: &[PhaseSpan],
    o: &ImportOptions,
    routes: &'a [(String, String)],
) -> Vec<(Source<'a>, String)> {
    let speed = o.speed;
    let bucket_ns = bucket_ns(t, speed);
    let at = |k: usize| dur(bucket_ns * k as u64);
    let n = t.buckets();
    let _ = writeln!(y, "dependency:");
    let _ = writeln!(y, "  routes:");
    // What each route plays: a dependency's calls, or, when the record holds none, the service's own answers.
    let sources: Vec<(Source, String)> = if routes.is_empty() {
        let _ = writeln!(
            y,
            "    # The record holds no dependency information (no upstream, no client span): faultd plays the service's"
        );
        let _ = writeln!(
            y,
            "    # own answers, as recorded. Its base is the first phase's whole distribution."
        );
        vec![(Source::Sut, "dependency".to_string())]
    } else {
        routes
            .iter()
            .map(|(dep, route)| (Source::Dep(dep), route.clone()))
            .collect()
    };
    let first_healthy = phases.first().map_or((0, n), |p| (p.start, p.end));
    for (source, route) in &sources {
        let path = if sources.len() == 1 {
            "/**".to_string()
        } else {
            format!("/{route}/**")
        };
        if let Source::Dep(dep) = source {
            // The peer as the record wrote it, escaped: a comment cannot hold control characters.
            let _ = writeln!(
                y,
                "    # {}: its base is the first phase's whole distribution.",
                dep.escape_debug()
            );
        }
        let b = behaviour(&source.over(t, first_healthy.0, first_healthy.1), speed);
        let _ = writeln!(y, "    {route}: {{ path: {path}, {} }}", &b[2..b.len() - 2]);
    }
    let _ = writeln!(y, "  phases:");
    // Each phase of the scenario: its name, its first bucket and the buckets it plays.
    let steps: Vec<(String, usize, usize)> = match o.phases {
        PhaseMode::Found => phases
            .iter()
            .map(|p| (p.name.clone(), p.start, p.end))
            .collect(),
        PhaseMode::Buckets => phases
            .iter()
            .flat_map(|p| {
                (p.start..p.end).map(move |k| {
                    let name = if k == p.start {
                        p.name.clone()
                    } else {
                        format!("{}.{}", p.name, k - p.start)
                    };
                    (name, k, k + 1)
                })
            })
            .collect(),
    };
    let mut last: Vec<String> = vec![String::new(); sources.len()];
    for (phase_name, from, to) in &steps {
        let mut set: Vec<String> = Vec::new();
        for (i, (source, route)) in sources.iter().enumerate() {
            let b = source.over(t, *from, *to);
            if b.calls() > 0 {
                last[i] = behaviour(&b, speed);
            }
            if last[i].is_empty() {
                set.push(format!("{route}: healthy"));
            } else {
                set.push(format!("{route}: {}", last[i]));
            }
        }
        let _ = writeln!(
            y,
            "    - {{ name: {phase_name}, at: {}, routes: {{ {} }} }}",
            at(*from),
            set.join(", ")
        );
    }

    sources
}

/// The SUT: faultd itself when one route takes every path (`stand_in`), the demo otherwise, with how to name yours.
fn sut(y: &mut String, stand_in: bool, no_dependency: bool) {
    let _ = writeln!(y, "\nsut:");
    if stand_in {
        let _ = writeln!(
            y,
            "  # The record does not say what the service is. Until yours is named here, the load goes straight to faultd,"
        );
        let _ = writeln!(
            y,
            "  # which plays {} as recorded, and the expectations check that the replay reproduces the record.",
            if no_dependency {
                "the service's answers"
            } else {
                "the dependency"
            }
        );
        let _ = writeln!(y, "  # Yours, e.g.:");
        let _ = writeln!(
            y,
            "  # command: [ ./my-service, \"--port={{sut.port}}\", \"--dependency={{faultd.url}}\" ], url: http://127.0.0.1:{{sut.port}}"
        );
        let _ = writeln!(y, "  url: \"{{faultd.url}}\"\n");
    } else {
        let _ = writeln!(
            y,
            "  # The record does not say what the service is: the bundled demo stands in. Replace it with yours, e.g."
        );
        let _ = writeln!(
            y,
            "  # command: [ ./my-service, \"--port={{sut.port}}\", \"--dependency={{faultd.url}}\" ], url: http://127.0.0.1:{{sut.port}}"
        );
        let _ = writeln!(y, "  demo: {{}}\n");
    }
}

/// The load as an exact timetable: `load.replay`.
fn load_replay(y: &mut String, r: &Written, o: &ImportOptions, timeout: &str) {
    let file = r
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let _ = writeln!(
        y,
        "  # Each recorded request at its recorded time, with its method and path: {} requests in {file}",
        r.requests
    );
    let _ = writeln!(
        y,
        "  # (`TIME METHOD PATH` a line; `from` is the record's time 0){}{}.",
        if r.left_out > 0 {
            format!(
                "; {} requests left out (methods loadgen does not send, or not a URL path)",
                r.left_out
            )
        } else {
            String::new()
        },
        if r.late > 0 {
            format!(
                "; {} requests came over {}s out of order and play at the earliest time still open",
                r.late,
                super::timetable::REORDER
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        y,
        "  replay: {{ file: {file:?}, from: {:.6}, speed: {}, scale_rate: {} }}",
        r.from, o.speed, o.scale_rate
    );
    let _ = writeln!(y, "  timeout: {timeout}");
}

/// The load as a rate per bucket, with the request templates.
fn load_rate(y: &mut String, t: &Timeline, o: &ImportOptions, timeout: &str) {
    let speed = o.speed;
    let bucket_ns = (t.bucket * 1e9 / speed).round() as u64;
    let at = |k: usize| dur(bucket_ns * k as u64);
    let n = t.buckets();
    let _ = writeln!(
        y,
        "  # The arrivals as recorded, one rate per bucket (evenly spaced inside it)."
    );
    let _ = writeln!(y, "  rate:");
    let rate_factor = speed * o.scale_rate / t.bucket;
    let mut previous: Option<String> = None;
    for k in 0..n {
        let r =
            faultline_units::Rate::per_second(t.sut(k).arrivals as f64 * rate_factor).to_string();
        if previous.as_ref() != Some(&r) {
            let _ = writeln!(y, "    - {{ at: {}, rate: {r} }}", at(k));
            previous = Some(r);
        }
    }
    let _ = writeln!(y, "    - {{ at: {}, rate: 0/s }}", at(n));
    let _ = writeln!(y, "  arrivals: uniform");
    let _ = writeln!(y, "  timeout: {timeout}");
    let templates = t.templates.by_count();
    let supported = |m: &str| matches!(m, "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD");
    let listed: Vec<_> = templates
        .iter()
        .filter(|t| supported(&t.method))
        .take(LISTED_TEMPLATES)
        .collect();
    let left: u64 = templates.iter().map(|t| t.count).sum::<u64>()
        - listed.iter().map(|t| t.count).sum::<u64>()
        + t.templates.overflow;
    if left > 0 {
        let _ = writeln!(
            y,
            "  # {left} requests of rarer shapes (or methods loadgen does not send, or targets that are not URL paths) are left out of the mix."
        );
    }
    let _ = writeln!(y, "  requests:");
    if listed.is_empty() {
        let _ = writeln!(y, "    - {{ get: \"/\" }}");
    }
    // Weights are the requests each template stood for, scaled into loadgen's u32.
    let max = listed.iter().map(|t| t.count).max().unwrap_or(1).max(1);
    let scale = if max > 1_000_000 {
        max as f64 / 1_000_000.0
    } else {
        1.0
    };
    for tpl in &listed {
        let weight = ((tpl.count as f64 / scale).round() as u64).max(1);
        let _ = writeln!(
            y,
            "    - {{ {}: {}, weight: {weight} }}",
            tpl.method.to_ascii_lowercase(),
            yaml_quoted(&tpl.path())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_shares_are_written_in_the_scenarios_units() {
        assert_eq!(dur(250_000_000), "250ms");
        assert_eq!(dur(1_500_000), "1.5ms");
        assert_eq!(dur(2_000_000_000), "2s");
        assert_eq!(dur(1_234_567), "1.234567ms");
        assert_eq!(share(1, 3).unwrap(), "33.333%");
        assert_eq!(share(1, 1).unwrap(), "100%");
        assert_eq!(share(0, 5), None);
        assert_eq!(route_name("127.0.0.1:9000"), "127-0-0-1-9000");
        assert_eq!(peer_route_name("127.0.0.1:37669"), "dependency");
        assert_eq!(peer_route_name("[::1]:9000"), "dependency");
        assert_eq!(peer_route_name("::1"), "dependency");
        assert_eq!(peer_route_name("http://10.0.0.7:8080"), "dependency");
        assert_eq!(peer_route_name("pricing.shop.svc:8080"), "pricing-shop-svc");
        assert_eq!(peer_route_name("be_reviews"), "be-reviews");
        assert_eq!(route_name("Pricing"), "pricing");
        assert_eq!(
            yaml_quoted("/p/7\u{737}\"\\\u{11}\u{7F}\u{85}\u{2028}é"),
            "\"/p/7\u{737}\\\"\\\\\\u0011\\u007F\\u0085\\u2028é\""
        );
        let long = format!("{}.svc:8080", "a".repeat(63));
        assert_eq!(route_name(&long), "a".repeat(63));
        assert_eq!(route_name(&"x".repeat(300)).len(), ROUTE_NAME_BYTES);
    }
}
