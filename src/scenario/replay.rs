//! Trace replay: a recorded incident's CSV (seconds, p50, p99, error share) read and turned into phases of the
//! dependency's schedule, ramped between rows. Not for playing the phases (faultd does) nor for checking the rest of
//! the schedule (`validate` does, once the phases are in).

use std::collections::BTreeMap;
use std::path::Path;

use faultline_units::input::{read_capped_text, MAX_CONFIG_SIZE};
use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::locate::locate;
use super::{Scenario, ScenarioError};

/// A trace to replay: rows of `seconds,p50_ms,p99_ms,error_share` (a header line, then one row per sample, as a
/// monitoring export gives them). Row 0 becomes the phase `phase` at `at` + its seconds; each later row k becomes the
/// phase `phase.k`, which ramps from the previous row's values to its own over the gap between the two rows (it
/// begins 1 ms after the previous row, as phases need strictly ascending starts). Expectations may name `phase` for
/// the whole trace (`during: incident` covers every `incident.k`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// The CSV file, relative to the scenario file.
    pub trace: String,
    /// The dependency route whose behaviour the trace sets.
    pub route: String,
    /// When the trace's time 0 falls in the run.
    pub at: Dur,
    /// The name of the trace's first phase (default `incident`).
    #[serde(default)]
    pub phase: Option<String>,
    /// The status of the trace's errors (default 503).
    #[serde(default)]
    pub status: Option<u16>,
}

/// One row of a replayed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    pub at: Dur,
    pub p50: Dur,
    pub p99: Dur,
    pub errors: faultline_units::Share,
}

/// Reads a trace: a header line naming the columns (seconds, p50_ms, p99_ms, error_share, in this order), then rows.
/// Error shares may be fractions (0.3) or percentages (30%).
pub fn parse_trace(text: &str) -> Result<Vec<TraceRow>, String> {
    let mut rows = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let (_, header) = lines.next().ok_or("the trace is empty")?;
    let columns: Vec<String> = header
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    if columns != ["seconds", "p50_ms", "p99_ms", "error_share"] {
        return Err(format!(
            "line 1: expected the header `seconds,p50_ms,p99_ms,error_share`, found `{header}`"
        ));
    }
    for (i, line) in lines {
        let n = i + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != 4 {
            return Err(format!(
                "line {n}: expected 4 columns, found {}",
                cells.len()
            ));
        }
        let num = |c: &str, what: &str| -> Result<f64, String> {
            let v: f64 = c
                .parse()
                .map_err(|_| format!("line {n}: {what} {c:?} is not a number"))?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("line {n}: {what} must be a non-negative number"));
            }
            Ok(v)
        };
        let at = num(cells[0], "seconds")?;
        let p50 = num(cells[1], "p50_ms")?;
        let p99 = num(cells[2], "p99_ms")?;
        if p99 < p50 {
            return Err(format!("line {n}: p99_ms ({p99}) is below p50_ms ({p50})"));
        }
        let errors = if cells[3].ends_with('%') {
            cells[3]
                .parse::<faultline_units::Share>()
                .map_err(|e| format!("line {n}: {e}"))?
        } else {
            let f = num(cells[3], "error_share")?;
            if f > 1.0 {
                return Err(format!(
                    "line {n}: error_share {f} is over 1 (write 30% or 0.3)"
                ));
            }
            faultline_units::Share::from_fraction(f)
        };
        if let Some(prev) = rows.last() {
            let prev: &TraceRow = prev;
            if Dur::from_secs_f64(at) <= prev.at {
                return Err(format!("line {n}: seconds must increase from row to row"));
            }
        }
        rows.push(TraceRow {
            at: Dur::from_secs_f64(at),
            p50: Dur::from_secs_f64(p50 / 1e3),
            p99: Dur::from_secs_f64(p99 / 1e3),
            errors,
        });
    }
    if rows.is_empty() {
        return Err("the trace has a header but no rows".into());
    }
    Ok(rows)
}

impl ReplaySpec {
    /// The phases this trace adds to the schedule.
    pub fn phases(&self, rows: &[TraceRow]) -> Result<Vec<faultd::Phase>, String> {
        let name = self.phase.clone().unwrap_or_else(|| "incident".into());
        let status = self.status.unwrap_or(503);
        let mut phases = Vec::new();
        for (k, row) in rows.iter().enumerate() {
            let mut behaviour = serde_json::json!({ "latency": { "p50": row.p50.to_string(), "p99": row.p99.to_string() } });
            behaviour["errors"] = if row.errors.fraction() > 0.0 {
                serde_json::json!([ { "share": row.errors.to_string(), "status": status } ])
            } else {
                serde_json::json!([])
            };
            let set: faultd::PhaseRoute =
                serde_json::from_value(behaviour).map_err(|e| format!("row {}: {e}", k + 1))?;
            let (phase_name, at, ramp) = if k == 0 {
                (name.clone(), self.at.get() + row.at.get(), None)
            } else {
                let prev = rows[k - 1].at.get();
                let start = self.at.get() + prev + std::time::Duration::from_millis(1);
                (
                    format!("{name}.{k}"),
                    start,
                    Some(Dur(row.at.get()
                        - prev
                        - std::time::Duration::from_millis(1))),
                )
            };
            phases.push(faultd::Phase {
                name: phase_name,
                at: Dur(at),
                ramp,
                routes: BTreeMap::from([(self.route.clone(), set)]),
            });
        }
        Ok(phases)
    }
}

impl Scenario {
    /// Reads the trace `replay` names (relative to `base`, the scenario's folder) and adds its phases to the
    /// dependency's schedule, in time order. Errors point at `replay.trace` or `replay.route` in `text`.
    pub(super) fn replay_trace(
        &mut self,
        text: &str,
        file: &str,
        base: &Path,
    ) -> Result<(), ScenarioError> {
        let Some(replay) = self.replay.clone() else {
            return Ok(());
        };
        let at = |m: String| locate(text, file, "replay.trace", "trace:", m);
        let path = base.join(&replay.trace);
        let csv = read_capped_text(&path, MAX_CONFIG_SIZE).map_err(|e| at(e.to_string()))?;
        let rows = parse_trace(&csv).map_err(|m| at(format!("{}: {m}", path.display())))?;
        let phases = replay
            .phases(&rows)
            .map_err(|m| at(format!("{}: {m}", path.display())))?;
        if !self.dependency.routes.contains_key(&replay.route) {
            return Err(locate(
                text,
                file,
                "replay.route",
                "route:",
                format!("`{}` is not under `dependency.routes`", replay.route),
            ));
        }
        self.dependency.phases.extend(phases);
        self.dependency.phases.sort_by_key(|p| p.at);
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_becomes_a_step_then_ramps_between_rows() {
        let rows = parse_trace(
            "seconds,p50_ms,p99_ms,error_share\n0,120,200,0\n60,2000,14000,0\n90,14000,15000,10%\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].errors.fraction(), 0.1);
        let spec = ReplaySpec {
            trace: "t.csv".into(),
            route: "reviews".into(),
            at: "10s".parse().unwrap(),
            phase: None,
            status: None,
        };
        let phases = spec.phases(&rows).unwrap();
        let summary: Vec<(String, String, Option<String>)> = phases
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.at.to_string(),
                    p.ramp.map(|r| r.to_string()),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("incident".to_string(), "10s".to_string(), None),
                (
                    "incident.1".to_string(),
                    "10.001s".to_string(),
                    Some("59.999s".to_string())
                ),
                (
                    "incident.2".to_string(),
                    "70.001s".to_string(),
                    Some("29.999s".to_string())
                ),
            ]
        );
    }

    #[test]
    fn a_bad_trace_names_its_line() {
        assert!(parse_trace("").unwrap_err().contains("empty"));
        assert!(parse_trace("t,p50,p99,e\n").unwrap_err().contains("header"));
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,120,200,0\n5,abc,200,0\n")
            .unwrap_err();
        assert!(e.starts_with("line 3: p50_ms"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n5,120,200,0\n5,120,200,0\n")
            .unwrap_err();
        assert!(e.contains("must increase"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,300,200,0\n").unwrap_err();
        assert!(e.contains("below p50_ms"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,100,200,1.5\n").unwrap_err();
        assert!(e.contains("over 1"), "{e}");
    }
}
