//! The live line: one terminal line, redrawn four times a second, with the run time, the phase, requests sent and
//! completed, the SUT's p99 over the last second, calls in flight at the dependency, each breaker's last observed
//! state, and each expectation decided so far. Decided verdicts are also printed above it, once, as they fall.
//!
//! Only drawn when stderr is a terminal; CI logs get the verdict table at the end instead.

use std::time::Duration;

use crate::breaker::watch::BreakerWatch;
use crate::expect::{ms, Expectation, Verdict};

/// Draws the line (overwriting the previous one).
pub fn draw(
    t: Duration,
    phases: &[(String, Duration)],
    progress: &loadgen::Progress,
    in_flight: Option<u64>,
    breakers: &BreakerWatch,
    decided: &str,
) {
    let phase = phases
        .iter()
        .rfind(|(_, at)| *at <= t)
        .map(|(n, _)| n.as_str())
        .unwrap_or("-");
    let in_flight = in_flight
        .map(|n| n.to_string())
        .unwrap_or_else(|| "?".into());
    let states: Vec<String> = breakers
        .names()
        .map(|name| {
            format!(
                "{name}={}",
                breakers
                    .current(name)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "?".into())
            )
        })
        .collect();
    eprint!(
        "\r\x1b[2K{:>6.1}s  {phase:<12} sent {:>7}  done {:>7}  p99(1s) {:>9}  in flight at dependency {:>5}  {}{}",
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
    );
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
