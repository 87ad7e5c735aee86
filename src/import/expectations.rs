//! The expectations an imported scenario carries: those faultd, standing in for the service, is sure to meet
//! (active, bounded by the sampling of a draw), and what the record's own service did (commented, for the user's).
//! Not for the scenario's other parts: `writer` writes them and calls these.

use std::fmt::Write;

use super::phases::PhaseSpan;
use super::timeline::{sut_over, Histogram, Source, Timeline};
use super::yaml_text::{fraction, ms_text, share};
use super::CallOutcome;

/// How many standard deviations of a draw the expectations that the replay reproduces the record leave room for:
/// three, so a bound that holds on the mean misses about once in 700 runs.
const SIGMAS: f64 = 3.0;
/// The p99 of fewer requests than this is one or two of them: no expectation on it.
const P99_MIN_REQUESTS: u64 = 100;
/// What the host adds to a latency faultd plays, as the load generator measures it: a timer on a busy machine is
/// late by up to ~4 ms at its p99, the request and its answer cross loopback and two event loops, and a shared
/// 2-core machine has held a call's answer back by several milliseconds more (faultd's `late` record).
const HOST_DELAY_S: f64 = 0.020;
/// The width of a bin of the importer's histograms (faultd draws anywhere inside one).
const BIN_WIDTH: f64 = 0.02;

/// The expectations the stand-in must meet, phase by phase: faultd plays each phase's recorded status mix and
/// latency histogram to the requests the load sends in it, so the service's 5xx share and p99 over the phase are
/// those of as many draws, plus the requests sent at the end of the phase before that are answered in it (the
/// previous phase's rate times its slowest call). Each bound is one that three standard deviations of such a draw
/// stay inside: a 5xx share below 1% (or the band's top, when spilled 5xx could reach it) where faultd plays under
/// 1%, above the band's low end where it plays more; a p99 below the value at the top of its sampling band (rank
/// 0.99 n + 3 sqrt(0.0099 n)), or the previous phase's slowest call when its spill could be 1% of the phase, plus
/// the bin's width and the host's delay, when the phase has 100 requests or more and faultd neither hangs nor
/// resets a call in it or in the spill (those end at the load's timeout or as connection errors).
pub(super) fn reproduced(
    y: &mut String,
    t: &Timeline,
    phases: &[PhaseSpan],
    source: &Source,
    speed: f64,
) {
    struct Played {
        requests: f64,
        share_5xx: f64,
        unanswered: u64,
        latency: Histogram,
        seconds: f64,
    }
    let played: Vec<Played> = phases
        .iter()
        .map(|p| {
            let b = source.over(t, p.start, p.end);
            let calls = b.calls().max(1) as f64;
            let failed: u64 = b
                .outcomes
                .iter()
                .filter(|(o, _)| matches!(o, CallOutcome::Status(s) if *s >= 500))
                .map(|(_, c)| c)
                .sum();
            Played {
                requests: sut_over(t, p.start, p.end).arrivals as f64,
                share_5xx: failed as f64 / calls,
                unanswered: b.outcomes.get(&CallOutcome::Timeout).copied().unwrap_or(0)
                    + b.outcomes.get(&CallOutcome::Reset).copied().unwrap_or(0),
                latency: b.latency,
                seconds: (p.end - p.start) as f64 * t.bucket,
            }
        })
        .collect();
    let mut lines: Vec<String> = Vec::new();
    for (i, (p, own)) in phases.iter().zip(&played).enumerate() {
        let n = own.requests;
        if n == 0.0 || own.latency.count() == 0 && own.share_5xx == 0.0 {
            continue;
        }
        // The previous phase's requests answered in this one.
        let before = i.checked_sub(1).map(|k| &played[k]);
        let spill = before.map_or(0.0, |b| {
            let slowest = b.latency.quantile(1.0).unwrap_or(0.0);
            (b.requests / b.seconds.max(1e-9) * slowest).min(b.requests)
        });
        let spill_share = before.map_or(0.0, |b| b.share_5xx);
        let all = n + spill;
        let (e, es) = (own.share_5xx, spill_share);
        let mean = n * e + spill * es;
        let sd = (n * e * (1.0 - e) + spill * es * (1.0 - es)).sqrt();
        if e < 0.01 {
            let top = ((mean + SIGMAS * sd) / all).max(0.01);
            lines.push(format!(
                "  - {{ sut_share: server_error, below: {}, during: {} }}   # faultd plays {} 5xx in it",
                percent_up(top),
                p.name,
                fraction(e).unwrap_or("no".into())
            ));
        } else if mean > SIGMAS * sd {
            if let Some(low) = fraction((mean - SIGMAS * sd) / all) {
                lines.push(format!(
                    "  - {{ sut_share: server_error, above: {low}, during: {} }}   # faultd plays {} 5xx, {n} requests",
                    p.name,
                    fraction(e).unwrap_or("0%".into())
                ));
            }
        }
        let spill_counts = spill + SIGMAS * spill.sqrt() >= 0.01 * all;
        let spill_unanswered = spill_counts && before.is_some_and(|b| b.unanswered > 0);
        if all < P99_MIN_REQUESTS as f64 || own.unanswered > 0 || spill_unanswered {
            continue;
        }
        let top = ((0.99 * all + SIGMAS * (0.0099 * all).sqrt()) / all).min(1.0);
        let Some(mut v) = own.latency.quantile(top) else {
            continue;
        };
        if spill_counts {
            v = v.max(before.and_then(|b| b.latency.quantile(1.0)).unwrap_or(0.0));
        }
        let bound_ms = ((v * (1.0 + BIN_WIDTH) / speed + HOST_DELAY_S) * 1e3).ceil();
        lines.push(format!(
            "  - {{ sut_latency: p99, below: {bound_ms}ms, during: {} }}   # faultd plays p99 {} over {n} requests{}",
            p.name,
            ms_text(own.latency.quantile(0.99).unwrap_or(0.0) / speed),
            if spill_counts {
                format!(", and ~{spill:.0} of the phase before")
            } else {
                String::new()
            }
        ));
    }
    let _ = writeln!(
        y,
        "\n# What the replay must reproduce, phase by phase: faultd plays each phase's recorded status mix and latency,"
    );
    let _ = writeln!(
        y,
        "# so these hold within the sampling of as many requests (3 standard deviations) and 20 ms of the host's delay."
    );
    if lines.is_empty() {
        let _ = writeln!(
            y,
            "# (no phase has enough requests for a bound that is sure to hold)"
        );
        return;
    }
    let _ = writeln!(y, "expect:");
    for l in lines {
        let _ = writeln!(y, "{l}");
    }
}

/// A share rounded up to a tenth of a percent: `1%`, `1.3%`.
fn percent_up(f: f64) -> String {
    let tenths = (f.clamp(0.0, 1.0) * 1000.0 - 1e-9).ceil().max(0.0) as u64;
    let text = format!("{}.{}", tenths / 10, tenths % 10);
    format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
}

/// What the record shows the SUT did, phase by phase, as commented-out expectations: for the service that replaces
/// the stand-in, which only the record's own service is sure to meet.
pub(super) fn recorded(
    y: &mut String,
    t: &Timeline,
    phases: &[PhaseSpan],
    speed: f64,
    stand_in: bool,
) {
    let _ = writeln!(
        y,
        "\n# What the record shows its service did, phase by phase, as starting expectations for yours{}:",
        if stand_in {
            " (under `expect:`, in place of those above)"
        } else {
            ""
        }
    );
    let _ = writeln!(y, "# expect:");
    let mut any = false;
    for p in phases {
        let s = sut_over(t, p.start, p.end);
        let answered: u64 = s.statuses.values().sum();
        if answered > 0 {
            any = true;
            let errors: u64 = s.statuses.range(500..).map(|(_, c)| c).sum();
            let e = errors as f64 / answered as f64;
            if e >= 0.01 {
                let _ = writeln!(
                    y,
                    "#   - {{ sut_share: server_error, above: {}, during: {} }}   # recorded: {}",
                    fraction(e * 0.8).unwrap_or("0%".into()),
                    p.name,
                    share(errors, answered).unwrap_or("0%".into())
                );
            } else {
                let _ = writeln!(
                    y,
                    "#   - {{ sut_share: server_error, below: 1%, during: {} }}   # recorded: {}",
                    p.name,
                    share(errors, answered).unwrap_or("0%".into())
                );
            }
        }
        if let Some(p99) = s.latency.quantile(0.99) {
            any = true;
            let _ = writeln!(
                y,
                "#   - {{ sut_latency: p99, below: {}, during: {} }}   # recorded: {}",
                ms_text(p99 * 1.2 / speed),
                p.name,
                ms_text(p99 / speed)
            );
        }
    }
    if !any {
        let _ = writeln!(
            y,
            "#   (the record has neither the SUT's statuses nor its durations)"
        );
    }
}
