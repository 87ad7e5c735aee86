//! `faultline compare RUN_A RUN_B`: the per-phase differences of the SUT's latency percentiles between two saved
//! runs, and the regression check a CI job runs before and after a configuration change.
//!
//! Phases are matched by name; a phase one run lacks is listed, not judged. Only the corrected latency (from the
//! intended send time) is compared, because that is what a user waited. Not for judging a single run: that is
//! what expectations are for.

use std::fmt::Write as _;

use serde::Serialize;

use super::result::{Percentiles, ResultFile};

/// The percentiles compared, in the order printed.
pub const COMPARED: [&str; 5] = ["p50", "p90", "p99", "p99.9", "max"];

/// One percentile of one phase in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PercentileChange {
    /// "p50", "p90", "p99", "p99.9" or "max".
    pub percentile: String,
    /// Run A's value, milliseconds.
    pub a_ms: f64,
    /// Run B's value, milliseconds.
    pub b_ms: f64,
    /// `b_ms - a_ms`: positive means B is slower.
    pub diff_ms: f64,
    /// `(b - a) / a`; `None` when A's value is zero (nothing to be relative to).
    pub relative: Option<f64>,
    /// True when B is slower than A by more than the threshold.
    pub regressed: bool,
}

/// One phase present in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseChange {
    /// The phase's name, the same in both runs.
    pub phase: String,
    /// Answered requests behind A's percentiles.
    pub a_count: u64,
    /// Answered requests behind B's percentiles.
    pub b_count: u64,
    /// One entry per [`COMPARED`] percentile; empty when either run answered no request in the phase.
    pub percentiles: Vec<PercentileChange>,
}

/// An expectation that held in one run and failed in the other.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictChange {
    /// The expectation's short name.
    pub name: String,
    /// Whether it held in run A.
    pub a_passed: bool,
    /// Whether it held in run B.
    pub b_passed: bool,
}

/// The comparison of run B against run A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Scenario name and start time of A.
    pub a: String,
    /// Scenario name and start time of B.
    pub b: String,
    /// The relative slowdown past which a percentile counts as a regression (0.1 = 10%).
    pub threshold: f64,
    /// The phases both runs have, in A's order.
    pub phases: Vec<PhaseChange>,
    /// Phases of A that B does not have.
    pub only_in_a: Vec<String>,
    /// Phases of B that A does not have.
    pub only_in_b: Vec<String>,
    /// Expectations (matched by name) whose verdict differs.
    pub verdicts: Vec<VerdictChange>,
}

fn values(p: &Percentiles) -> [f64; 5] {
    [p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms]
}

/// Compares B against A, phase by phase. `threshold` is relative: 0.1 flags any percentile of B more than 10%
/// above A's.
pub fn compare(a: &ResultFile, b: &ResultFile, threshold: f64) -> Comparison {
    let mut phases = Vec::new();
    let mut only_in_a = Vec::new();
    for pa in &a.phases {
        let Some(pb) = b.phases.iter().find(|p| p.name == pa.name) else {
            only_in_a.push(pa.name.clone());
            continue;
        };
        let (la, lb) = (&pa.sut_latency, &pb.sut_latency);
        let percentiles = if la.count == 0 || lb.count == 0 {
            Vec::new()
        } else {
            COMPARED
                .iter()
                .zip(values(la).into_iter().zip(values(lb)))
                .map(|(name, (va, vb))| {
                    let relative = (va > 0.0).then(|| (vb - va) / va);
                    PercentileChange {
                        percentile: (*name).to_string(),
                        a_ms: va,
                        b_ms: vb,
                        diff_ms: vb - va,
                        relative,
                        regressed: relative.is_some_and(|r| r > threshold),
                    }
                })
                .collect()
        };
        phases.push(PhaseChange {
            phase: pa.name.clone(),
            a_count: la.count,
            b_count: lb.count,
            percentiles,
        });
    }
    let only_in_b = b
        .phases
        .iter()
        .filter(|pb| !a.phases.iter().any(|pa| pa.name == pb.name))
        .map(|p| p.name.clone())
        .collect();
    let verdicts = a
        .verdicts
        .iter()
        .filter_map(|va| {
            let vb = b.verdicts.iter().find(|vb| vb.name == va.name)?;
            (va.passed != vb.passed).then(|| VerdictChange {
                name: va.name.clone(),
                a_passed: va.passed,
                b_passed: vb.passed,
            })
        })
        .collect();
    let label = |r: &ResultFile| format!("{} started {}", r.scenario.name, r.started_at);
    Comparison {
        a: label(a),
        b: label(b),
        threshold,
        phases,
        only_in_a,
        only_in_b,
        verdicts,
    }
}

impl Comparison {
    /// True when any compared percentile of B is slower than A's by more than the threshold.
    pub fn regressed(&self) -> bool {
        self.phases
            .iter()
            .flat_map(|p| &p.percentiles)
            .any(|c| c.regressed)
    }

    /// The comparison as a table for the terminal.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "A: {}\nB: {}", self.a, self.b);
        let _ = writeln!(o, "SUT latency from the intended send time (ms); a regression is B more than {} above A\n", percent(self.threshold));
        for p in &self.phases {
            let _ = writeln!(
                o,
                "phase {} ({} answered in A, {} in B)",
                p.phase, p.a_count, p.b_count
            );
            if p.percentiles.is_empty() {
                let _ = writeln!(o, "  not compared: a run answered no request in this phase");
                continue;
            }
            let _ = writeln!(
                o,
                "  {:<6} {:>10} {:>10} {:>10} {:>9}",
                "", "A", "B", "B - A", "change"
            );
            for c in &p.percentiles {
                let change = c.relative.map(signed_percent).unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    o,
                    "  {:<6} {:>10.3} {:>10.3} {:>+10.3} {:>9}{}",
                    c.percentile,
                    c.a_ms,
                    c.b_ms,
                    c.diff_ms,
                    change,
                    if c.regressed { "  REGRESSED" } else { "" }
                );
            }
        }
        for name in &self.only_in_a {
            let _ = writeln!(o, "phase {name}: only in A, not compared");
        }
        for name in &self.only_in_b {
            let _ = writeln!(o, "phase {name}: only in B, not compared");
        }
        if !self.verdicts.is_empty() {
            let _ = writeln!(o, "\nExpectations whose verdict changed");
            let word = |passed: bool| if passed { "PASS" } else { "FAIL" };
            for v in &self.verdicts {
                let _ = writeln!(
                    o,
                    "  {} -> {}  {}",
                    word(v.a_passed),
                    word(v.b_passed),
                    v.name
                );
            }
        }
        let regressions = self
            .phases
            .iter()
            .flat_map(|p| &p.percentiles)
            .filter(|c| c.regressed)
            .count();
        if regressions == 0 {
            let _ = writeln!(
                o,
                "\nno percentile of B is more than {} above A",
                percent(self.threshold)
            );
        } else {
            let _ = writeln!(
                o,
                "\nREGRESSION: {regressions} percentile(s) of B more than {} above A",
                percent(self.threshold)
            );
        }
        o
    }
}

fn percent(share: f64) -> String {
    let v = share * 100.0;
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}%")
    } else {
        format!("{v:.1}%")
    }
}

fn signed_percent(share: f64) -> String {
    format!("{:+.1}%", share * 100.0)
}

/// Reads a threshold as `10%` or `0.1`; `None` for anything else (negative, not a number).
pub fn parse_threshold(s: &str) -> Option<f64> {
    let s = s.trim();
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => s.parse::<f64>().ok()?,
    };
    (v.is_finite() && v >= 0.0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_read_as_percent_or_fraction() {
        assert_eq!(parse_threshold("10%"), Some(0.1));
        assert_eq!(parse_threshold("0.25"), Some(0.25));
        assert_eq!(parse_threshold(" 5 % "), Some(0.05));
        assert_eq!(parse_threshold("-1%"), None);
        assert_eq!(parse_threshold("fast"), None);
    }
}
