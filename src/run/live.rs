//! The live line: one terminal line, redrawn four times a second, with the run time, the phase, requests sent and
//! completed, the SUT's p99 over the last second, calls in flight at the dependency, calls that matched no route
//! there (once there are any), each breaker's last observed state, and each expectation decided so far. Decided verdicts are also printed above it, once, as they fall.
//!
//! Only drawn when stderr is a terminal; CI logs get the verdict table at the end instead.

use std::time::Duration;

use super::watch::BreakerWatch;
use crate::expect::{ms, Expectation, Verdict};

/// Draws the line (overwriting the previous one).
#[allow(clippy::too_many_arguments)]
pub fn draw(
    t: Duration,
    phases: &[(String, Duration)],
    progress: &loadgen::Progress,
    in_flight: Option<u64>,
    unmatched: Option<u64>,
    breakers: &BreakerWatch,
    decided: &str,
) {
    let states: Vec<(String, String)> = breakers
        .names()
        .map(|name| {
            let state = breakers.current(name).map(|s| s.to_string());
            (name.to_string(), state.unwrap_or_else(|| "?".into()))
        })
        .collect();
    eprint!(
        "\r\x1b[2K{}",
        line(t, phases, progress, in_flight, unmatched, &states, decided)
    );
}

/// The line's text: `states` holds each breaker's name and last observed state.
fn line(
    t: Duration,
    phases: &[(String, Duration)],
    progress: &loadgen::Progress,
    in_flight: Option<u64>,
    unmatched: Option<u64>,
    states: &[(String, String)],
    decided: &str,
) -> String {
    let phase = phases
        .iter()
        .rfind(|(_, at)| *at <= t)
        .map(|(n, _)| n.as_str())
        .unwrap_or("-");
    let in_flight = in_flight
        .map(|n| n.to_string())
        .unwrap_or_else(|| "?".into());
    // A wrong path or port in the SUT shows at once, not only in the report at the end.
    let unmatched = match unmatched {
        Some(n) if n > 0 => format!("  no route {n}!"),
        _ => String::new(),
    };
    let states: Vec<String> = states.iter().map(|(n, s)| format!("{n}={s}")).collect();
    format!(
        "{:>6.1}s  {phase:<12} sent {:>7}  done {:>7}  p99(1s) {:>9}  in flight at dependency {:>5}{unmatched}  {}{}",
        t.as_secs_f64(),
        progress.sent,
        progress.completed,
        progress
            .p99_last_second
            .map(|d| ms(d.get()))
            .unwrap_or_else(|| "-".into()),
        in_flight,
        states.join(" "),
        decided
    )
}

/// Prints a verdict decided during the run above the live line.
pub fn announce(t: Duration, v: &Verdict) {
    let mark = if v.passed { "PASS" } else { "FAIL" };
    eprintln!(
        "\r\x1b[2K{:>6.1}s  {mark} {}",
        t.as_secs_f64(),
        v.id.as_deref().unwrap_or(&v.name)
    );
}

/// The decided expectations for the line: "  [2/6 decided: opens-fast PASS, pool FAIL]".
pub fn decided_words(expectations: &[Expectation], decided: &[Option<Verdict>]) -> String {
    let done: Vec<String> = expectations
        .iter()
        .zip(decided)
        .enumerate()
        .filter_map(|(i, (e, v))| {
            let v = v.as_ref()?;
            let label = e.id.clone().unwrap_or_else(|| format!("#{}", i + 1));
            Some(format!(
                "{label} {}",
                if v.passed { "PASS" } else { "FAIL" }
            ))
        })
        .collect();
    if expectations.is_empty() {
        String::new()
    } else {
        format!(
            "  [{}/{} decided{}{}]",
            done.len(),
            expectations.len(),
            if done.is_empty() { "" } else { ": " },
            done.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress() -> loadgen::Progress {
        loadgen::Progress {
            elapsed: faultline_units::Dur::from(Duration::from_secs(5)),
            intended: 500,
            sent: 500,
            completed: 490,
            in_flight: 10,
            dropped: 0,
            by_class: Default::default(),
            p99_last_second: Some(faultline_units::Dur::from(Duration::from_millis(42))),
            tls: None,
        }
    }

    #[test]
    fn the_line_shows_calls_without_a_route_once_there_are_any() {
        let phases = vec![
            ("healthy".to_string(), Duration::ZERO),
            ("brownout".to_string(), Duration::from_secs(4)),
        ];
        let states = vec![("pricing".to_string(), "closed".to_string())];
        let at = |unmatched| {
            line(
                Duration::from_millis(5_200),
                &phases,
                &progress(),
                Some(3),
                unmatched,
                &states,
                "  [0/1 decided]",
            )
        };
        let quiet = at(Some(0));
        assert_eq!(quiet, at(None));
        assert!(!quiet.contains("no route"), "{quiet}");
        assert!(quiet.contains("brownout"), "{quiet}");
        assert!(
            quiet.contains("in flight at dependency     3  pricing=closed  [0/1 decided]"),
            "{quiet}"
        );
        let wrong = at(Some(37));
        assert!(
            wrong.contains("in flight at dependency     3  no route 37!  pricing=closed"),
            "{wrong}"
        );
    }
}
