//! `summary.txt`: the run in plain text, as printed at the end of `faultline run`: phases with their rates, a
//! percentile table per phase, the dependency's peak in flight, the breaker timelines and the verdict table.

use std::fmt::Write;

use super::ms_figure;
use super::result::{ReplicasSummary, ResultFile};
use crate::run::Ending;

/// The summary of a saved result: its sections in the order they print.
pub fn text(r: &ResultFile) -> String {
    let mut o = String::new();
    heading(&mut o, r);
    ending(&mut o, &r.ending);
    latency(&mut o, r);
    outcomes(&mut o, r);
    if let Some(d) = &r.distributed {
        agents(&mut o, d);
    }
    if !r.dependency.is_empty() {
        dependency(&mut o, r);
    }
    if let Some(tls) = &r.tls {
        tls_handshakes(&mut o, tls);
    }
    if let Some(dns) = &r.dns {
        dns_answers(&mut o, dns);
    }
    if !r.breakers.is_empty() {
        breakers(&mut o, r);
    }
    if !r.disagreements.is_empty() {
        disagreements(&mut o, r);
    }
    if let Some(f) = &r.requests {
        followed(&mut o, f);
    }
    expectations(&mut o, r);
    if !r.not_exported.is_empty() {
        not_exported(&mut o, &r.not_exported);
    }
    o
}

/// The scenario, its time scale when not 1, when it started, how long it lasted and its seed.
fn heading(o: &mut String, r: &ResultFile) {
    let _ = writeln!(o, "scenario {} ({})", r.scenario.name, r.scenario.file);
    if r.scenario.time_scale != 1.0 {
        let _ = writeln!(
            o,
            "time scale {} (every duration x{}, every rate /{})",
            r.scenario.time_scale, r.scenario.time_scale, r.scenario.time_scale
        );
    }
    let _ = writeln!(
        o,
        "started {}, {:.1} s, seed {}",
        r.started_at,
        r.scenario.duration_s,
        r.scenario
            .seed
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into())
    );
}

/// How the run ended, when it did not complete, with the SUT's last lines when it died.
fn ending(o: &mut String, ending: &Ending) {
    let Some(e) = ending.sentence() else {
        return;
    };
    let said = format!("{}{}", e.head.to_uppercase(), e.rest);
    match ending {
        Ending::SutDied { last_lines, .. } => {
            let _ = writeln!(o, "{said} Its last output:");
            for l in last_lines.lines() {
                let _ = writeln!(o, "  | {l}");
            }
        }
        _ => {
            let _ = writeln!(o, "{said}");
        }
    }
}

/// SUT latency from the intended send time per phase, with the offered and achieved rates.
fn latency(o: &mut String, r: &ResultFile) {
    let _ = writeln!(
        o,
        "\nSUT latency from the intended send time (ms), per phase"
    );
    let _ = writeln!(
        o,
        "  {:<14} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "phase", "offered/s", "done/s", "count", "p50", "p90", "p99", "p99.9", "max"
    );
    for p in &r.phases {
        let l = &p.sut_latency;
        let _ = writeln!(
            o,
            "  {:<14} {:>8.1} {:>8.1} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            p.name,
            p.offered_rate,
            p.achieved_rate,
            l.count,
            ms_figure(l.p50_ms),
            ms_figure(l.p90_ms),
            ms_figure(l.p99_ms),
            ms_figure(l.p999_ms),
            ms_figure(l.max_ms)
        );
    }
    if let Some(g) = &r.totals.generator_late {
        let _ = writeln!(o, "  {}", g.words());
    }
}

/// What became of the requests: the classes, whether they add up, and the connect errors by reason.
fn outcomes(o: &mut String, r: &ResultFile) {
    let _ = writeln!(o, "\nOutcomes");
    let classes: Vec<(&String, &u64)> = r.totals.outcomes.iter().filter(|(_, n)| **n > 0).collect();
    let _ = writeln!(
        o,
        "  {} sent of {} scheduled: {}{}",
        r.totals.sent,
        r.totals.intended,
        classes
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        if r.totals.still_in_flight > 0 {
            format!(", {} still in flight", r.totals.still_in_flight)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        o,
        "  conservation (sent = sum of classes + in flight): {}",
        if r.totals.conserved {
            "holds"
        } else {
            "BROKEN"
        }
    );
    if !r.totals.connect_errors.is_empty() {
        let _ = writeln!(
            o,
            "  connect_error by reason: {}",
            counts(&r.totals.connect_errors)
        );
    }
}

/// The agents that shared the load: each one's clock, its share and whether it was lost.
fn agents(o: &mut String, d: &crate::agents::Distributed) {
    let _ = writeln!(
        o,
        "\nAgents: {}, agent i sending arrival k of the timetable when k mod {} = i (counts and histograms added;\n  the most in flight per bucket is the sum of the agents' peaks, an upper bound)",
        d.agents.len(),
        d.agents.len()
    );
    for a in &d.agents {
        let _ = writeln!(
            o,
            "  {:>3} {:<24} clock {:+.3} ms ±{:.3}{}  {} arrivals, {} with an outcome{}",
            a.index,
            a.host,
            a.clock_offset_ms,
            a.clock_uncertainty_ms,
            if a.late_ms > 0.0 {
                format!(", armed {:.1} ms late", a.late_ms)
            } else {
                String::new()
            },
            a.intended,
            a.outcomes,
            match &a.lost {
                Some(why) => format!("  LOST: {why}"),
                None => String::new(),
            }
        );
    }
    let _ = writeln!(
        o,
        "  {} buckets merged while the run went on, {:.2} ms each at p99",
        d.buckets_merged, d.bucket_merge_p99_ms
    );
}

/// The dependency's routes as faultd measured them: calls and peaks in flight, overall and per phase.
fn dependency(o: &mut String, r: &ResultFile) {
    match &r.dependency_replicas {
        None => {
            let _ = writeln!(o, "\nDependency (measured by faultd)");
        }
        Some(rs) => {
            let _ = writeln!(
                o,
                "\nDependency (measured by {} faultd replicas, their recordings merged)",
                rs.count
            );
        }
    }
    for (route, d) in &r.dependency {
        let per_phase: Vec<String> = r
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    p.name,
                    p.dependency_max_in_flight.get(route).copied().unwrap_or(0)
                )
            })
            .collect();
        let late = d
            .faultd_late
            .map(|l| format!("; {}", l.words()))
            .unwrap_or_default();
        match (&r.dependency_replicas, d.max_in_flight_is_upper_bound) {
            (Some(rs), true) => {
                let _ = writeln!(
                    o,
                    "  {route}: {} calls, {} (per phase, at most: {}){late}",
                    d.arrivals,
                    rs.peak_words(d),
                    per_phase.join(", ")
                );
            }
            _ => {
                let _ = writeln!(
                    o,
                    "  {route}: {} calls, at most {} in flight ({}){late}",
                    d.arrivals,
                    d.max_in_flight,
                    per_phase.join(", ")
                );
            }
        }
        if !d.instances.is_empty() {
            let each: Vec<String> = (1..)
                .zip(&d.instances)
                .map(|(k, i)| format!("#{k} {} calls, at most {}", i.arrivals, i.max_in_flight))
                .collect();
            let _ = writeln!(o, "    instances: {}", each.join("; "));
        }
    }
    if let Some(rs) = &r.dependency_replicas {
        replicas(o, rs);
    }
    if let Some(w) = r.unmatched.warning() {
        let _ = writeln!(o, "  {w}");
    }
}

/// Each replica's own calls and peaks, and how far apart their schedules started.
fn replicas(o: &mut String, rs: &ReplicasSummary) {
    for (i, r) in rs.replicas.iter().enumerate() {
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|(route, x)| {
                format!(
                    "{route} {} calls, at most {} in flight",
                    x.arrivals, x.max_in_flight
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "  replica {} ({}): {}",
            i + 1,
            r.control,
            if routes.is_empty() {
                "no calls".to_string()
            } else {
                routes.join("; ")
            }
        );
    }
    if let Some(spread) = rs.start_spread_ms_at_most {
        let _ = writeln!(
            o,
            "  their schedules started at most {spread:.1} ms apart (from the first start request sent to the last answer)"
        );
    }
}

/// The resolver's queries and answers per name, over the run and per phase.
fn dns_answers(o: &mut String, dns: &super::result::DnsSummary) {
    let _ = writeln!(o, "\nDNS (faultd's resolver at {})", dns.listen);
    let other = std::iter::once(("(other names)", &dns.other)).filter(|(_, n)| n.queries > 0);
    for (name, n) in dns.names.iter().map(|(k, v)| (k.as_str(), v)).chain(other) {
        let delayed = if n.delayed > 0 {
            format!("; {} delayed, longest {:.1} ms", n.delayed, n.delay_max_ms)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  {name}: {} queries ({}){}{delayed}",
            n.queries,
            counts(&n.types),
            if n.answers.is_empty() {
                String::new()
            } else {
                format!(", answered {}", counts(&n.answers))
            },
        );
        for p in n.phases.iter().filter(|p| p.queries > 0) {
            let _ = writeln!(
                o,
                "    {}: {} queries, {}",
                p.name,
                p.queries,
                counts(&p.answers)
            );
        }
    }
}

/// TLS handshakes: loadgen's to the SUT and the dependency listener's, per phase.
fn tls_handshakes(o: &mut String, tls: &super::result::TlsSummary) {
    let _ = writeln!(o, "\nTLS handshakes");
    if let Some(l) = &tls.load {
        let _ = writeln!(
            o,
            "  loadgen to the SUT: {} full, {} resumed, {} failed",
            l.full, l.resumed, l.failed
        );
    }
    if let Some(d) = &tls.dependency {
        let _ = writeln!(
            o,
            "  dependency, {} listener (measured by faultd): {} attempts{}{}",
            d.listener,
            d.attempts,
            if d.outcomes.is_empty() {
                String::new()
            } else {
                format!(": {}", counts(&d.outcomes))
            },
            if d.delayed > 0 {
                format!("; {} delayed", d.delayed)
            } else {
                String::new()
            }
        );
        for p in &d.phases {
            let _ = writeln!(
                o,
                "    {:<14} {:>8} attempts{}",
                p.name,
                p.attempts,
                if p.outcomes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", counts(&p.outcomes))
                }
            );
        }
    }
}

/// Each breaker's transitions, its inferred timeline and its other sources.
fn breakers(o: &mut String, r: &ResultFile) {
    let _ = writeln!(o, "\nBreakers");
    for (name, b) in &r.breakers {
        let t = &b.observed;
        if t.transitions.is_empty() {
            let _ = writeln!(o, "  {name}: stayed closed");
        }
        for tr in &t.transitions {
            let _ = writeln!(
                o,
                "  {name}: {:>8.3} s  {} -> {}  ({}, ±{})",
                tr.at.as_secs_f64(),
                tr.from,
                tr.to,
                tr.source,
                crate::expect::secs(tr.resolution)
            );
        }
        if let Some(inf) = &b.inferred {
            let opens = inf
                .transitions
                .iter()
                .filter(|tr| tr.to == crate::breaker::BreakerState::Open)
                .count();
            let _ = writeln!(
                o,
                "  {name}: inferred from traffic: {} transitions, {opens} openings (resolution {})",
                inf.transitions.len(),
                crate::expect::secs(inf.resolution)
            );
        }
        for source in b.sources.iter().filter(|t| t.source != b.observed.source) {
            let _ = writeln!(
                o,
                "  {name}: also {}: {} transitions (resolution {})",
                source.source.map(|s| s.to_string()).unwrap_or_default(),
                source.transitions.len(),
                crate::expect::secs(source.resolution)
            );
        }
    }
}

/// Where a breaker's sources disagree, the first few of them.
fn disagreements(o: &mut String, r: &ResultFile) {
    const SHOWN: usize = 10;
    let _ = writeln!(
        o,
        "\nWhere the breaker's sources disagree ({})",
        r.disagreements.len()
    );
    for d in r.disagreements.iter().take(SHOWN) {
        let _ = writeln!(o, "  {}", d.sentence());
    }
    if r.disagreements.len() > SHOWN {
        let _ = writeln!(
            o,
            "  ... and {} more in result.json (disagreements)",
            r.disagreements.len() - SHOWN
        );
    }
}

/// The verdicts, the run's own errors and the tally with the exit code.
fn expectations(o: &mut String, r: &ResultFile) {
    let _ = writeln!(o, "\nExpectations");
    if r.verdicts.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for v in &r.verdicts {
        let _ = writeln!(o, "  {} {}", v.outcome().word(), v.finding());
        if let Some(p) = &v.per_request {
            per_request(o, p);
        }
    }
    for e in &r.run_errors {
        let _ = writeln!(o, "  RUN  {e}");
    }
    let passed = r.verdicts.iter().filter(|v| v.passed).count();
    let inconclusive = r.verdicts.iter().filter(|v| v.inconclusive()).count();
    let _ = writeln!(
        o,
        "\n{} of {} expectations held{}; exit code {}",
        passed,
        r.verdicts.len(),
        if inconclusive > 0 {
            format!(", {inconclusive} could not be judged")
        } else {
            String::new()
        },
        r.exit_code
    );
}

/// A per-request verdict's worst requests, by trace id, under its sentence.
fn per_request(o: &mut String, p: &crate::expect::PerRequest) {
    for w in p.worst.iter().take(3) {
        let _ = writeln!(
            o,
            "       {} {} {}: {}",
            w.trace_id,
            crate::expect::words::trim2(w.figure),
            p.figure,
            w.what
        );
    }
}

/// The requests followed through the SUT: how many calls the join attributed, and how many it could not.
fn followed(o: &mut String, f: &crate::correlate::summary::FollowedSummary) {
    let _ = writeln!(
        o,
        "\nRequests followed\n  {} requests; {} of {} dependency calls carried the trace id of one ({} none, {} another's)",
        f.requests, f.attributed, f.calls, f.untraced, f.foreign
    );
}

/// What the run's exports could not do, after a blank line.
fn not_exported(o: &mut String, problems: &[String]) {
    let _ = writeln!(o);
    for p in problems {
        let _ = writeln!(o, "not exported: {p}");
    }
}

/// "ok 12, expired 3": counts by name, in the map's order.
fn counts(by: &std::collections::BTreeMap<String, u64>) -> String {
    by.iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
