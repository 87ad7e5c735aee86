//! The sweep's table for the terminal (stdout): a line per run, a column per expectation (its id, else its name),
//! each cell the outcome and the margin, then which combinations passed every expectation.
//!
//! Not for the files (`markdown`, `html`, sweep.json) nor for deciding anything: the table arrives complete.

use std::fmt::Write as _;

use super::table::{Row, Status, SweepTable};

/// The table as text, columns aligned.
pub fn text(t: &SweepTable) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", heading(t));
    let _ = writeln!(
        o,
        "margin: how far each figure was from its bound, in the bound's unit and relative to it (+ room left, - shortfall)\n"
    );
    let mut lines: Vec<Vec<String>> = vec![["combination", "run"]
        .into_iter()
        .map(String::from)
        .chain(t.expectations.iter().map(|c| c.key.clone()))
        .collect()];
    for row in &t.runs {
        let mut line = vec![row.label.clone(), run_words(row)];
        line.extend(t.expectations.iter().map(|c| {
            row.cell(&c.key)
                .map_or_else(|| "-".to_string(), |cell| cell.words())
        }));
        lines.push(line);
    }
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .map(|l| l.get(i).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        let _ = writeln!(o, "{}", cells.join("   ").trim_end());
    }
    let _ = writeln!(o, "\n{}", verdict(t));
    o
}

/// `slow-dependency, 2 of 2 runs over timeout (sut.demo.operations.pricing.timeout), time scale 0.5, seed 7`.
pub fn heading(t: &SweepTable) -> String {
    let over: Vec<String> = t
        .parameters
        .iter()
        .map(|p| format!("{} ({})", p.name, p.reaches))
        .collect();
    let mut h = format!(
        "sweep of {}: {} of {} runs over {}",
        t.scenario,
        t.runs.len(),
        t.planned,
        over.join(", ")
    );
    if t.time_scale != 1.0 {
        let _ = write!(h, ", time scale {}", t.time_scale);
    }
    if let Some(seed) = t.seed {
        let _ = write!(h, ", seed {seed}");
    }
    h
}

/// How the run went, with its exit code when that says more than the word.
pub fn run_words(row: &Row) -> String {
    match row.status {
        Status::Passed | Status::Failed => row.status.word().to_string(),
        _ => format!("{} (exit {})", row.status.word(), row.exit_code),
    }
}

/// The sweep's conclusion: the combinations that passed every expectation, or that none did, and why the sweep
/// stopped early if it did.
pub fn verdict(t: &SweepTable) -> String {
    let passing: Vec<&str> = t.passing().map(|r| r.label.as_str()).collect();
    let mut v = if passing.is_empty() {
        "no combination passed every expectation".to_string()
    } else {
        format!("passed every expectation: {}", passing.join("; "))
    };
    if t.interrupted || t.runs.len() < t.planned {
        let _ = write!(
            v,
            "\nstopped after {} of {} runs{}",
            t.runs.len(),
            t.planned,
            if t.interrupted { " (interrupted)" } else { "" }
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::tests::two_runs;

    #[test]
    fn the_text_table_has_a_line_per_run_and_a_column_per_expectation_aligned() {
        let out = text(&two_runs());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "sweep of slow-dependency: 2 of 2 runs over timeout (sut.demo.operations.pricing.timeout), time scale 0.5, seed 7"
        );
        let header = lines
            .iter()
            .position(|l| l.starts_with("combination"))
            .unwrap();
        assert_eq!(
            &lines[header..header + 3],
            [
                "combination     run      opens-fast         pool",
                "timeout=250ms   passed   PASS +0.4 (+13%)   PASS +75 (+38%)",
                "timeout=5s      failed   INCONCLUSIVE       FAIL -0 (-0.0%)",
            ]
        );
        assert!(
            out.ends_with("passed every expectation: timeout=250ms\n"),
            "{out}"
        );
    }

    #[test]
    fn an_interrupted_sweep_says_how_far_it_got() {
        let mut t = two_runs();
        t.planned = 4;
        t.interrupted = true;
        t.runs[1].status = Status::Interrupted;
        t.runs[1].exit_code = 130;
        let out = text(&t);
        assert!(
            out.contains("timeout=5s      interrupted (exit 130)"),
            "{out}"
        );
        assert!(
            out.contains("stopped after 2 of 4 runs (interrupted)"),
            "{out}"
        );
    }
}
