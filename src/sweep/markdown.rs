//! sweep.md: the sweep's table in GitHub-flavoured Markdown, for a pull request or a CI job's summary page: what
//! was varied and where it reaches the SUT, a row per run with a cell per expectation (outcome and margin), and
//! which combinations passed every expectation.
//!
//! Not for the terminal (`text`) nor for the page with the figures behind each margin (`html`).

use std::fmt::Write as _;

use super::table::SweepTable;
use super::text::{heading, run_words, verdict};
use crate::report::markdown::{cell, mark};

/// The table in Markdown.
pub fn markdown(t: &SweepTable) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## {}\n", cell(&heading(t)));
    for p in &t.parameters {
        let values: Vec<String> = p.values.iter().map(|v| format!("`{v}`")).collect();
        let _ = writeln!(
            o,
            "- `{}` reaches `{}`: {}",
            p.name,
            p.reaches,
            values.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "\nEach cell: the outcome, and how far the figure was from its bound in the bound's unit and relative to \
         it (+ room left, - shortfall).\n"
    );
    let header: Vec<String> = ["combination".to_string(), "run".to_string()]
        .into_iter()
        .chain(t.expectations.iter().map(|c| format!("`{}`", cell(&c.key))))
        .collect();
    let _ = writeln!(o, "| {} |", header.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(header.len()));
    for row in &t.runs {
        let mut cells = vec![format!("`{}`", cell(&row.label)), run_words(row)];
        cells.extend(t.expectations.iter().map(|c| match row.cell(&c.key) {
            Some(x) => match x.margin_words() {
                Some(m) => format!("{} {m}", mark(x.outcome)),
                None => mark(x.outcome).to_string(),
            },
            None => "-".to_string(),
        }));
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(o);
    for line in verdict(t).lines() {
        let _ = writeln!(o, "{line}  ");
    }
    let _ = writeln!(
        o,
        "\nThe runs' reports are in the sweep's folder, one folder per combination; sweep.html compares them."
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::tests::two_runs;

    #[test]
    fn the_markdown_table_has_a_row_per_run_with_marked_outcomes_and_margins() {
        let md = markdown(&two_runs());
        assert!(
            md.contains("- `timeout` reaches `sut.demo.operations.pricing.timeout`: `250ms`, `5s`"),
            "{md}"
        );
        assert!(
            md.contains("| combination | run | `opens-fast` | `pool` |\n|---|---|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| `timeout=250ms` | passed | ✅ PASS +0.4 (+13%) | ✅ PASS +75 (+38%) |"),
            "{md}"
        );
        assert!(
            md.contains("| `timeout=5s` | failed | ⚠️ INCONCLUSIVE | ❌ FAIL -0 (-0.0%) |"),
            "{md}"
        );
        assert!(
            md.contains("passed every expectation: timeout=250ms"),
            "{md}"
        );
    }

    #[test]
    fn a_pipe_in_a_value_does_not_end_its_cell() {
        let mut t = two_runs();
        t.runs[0].label = "mode=a|b".into();
        assert!(markdown(&t).contains("| `mode=a\\|b` |"));
    }
}
