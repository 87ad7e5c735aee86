//! sweep.html: one self-contained page (no script, no network) comparing a sweep's combinations: a row per run,
//! linked to its own report.html, a cell per expectation coloured by its outcome and holding the measured figure,
//! the bound and the margin, the verdict's sentence as the cell's tooltip.
//!
//! Not for one run's figures over time (each run's report.html has them) nor for deciding anything.

use std::fmt::Write as _;
use std::path::Path;

use super::table::{number, Cell, Row, SweepTable};
use super::text::{run_words, verdict};
use crate::expect::Outcome;
use crate::report::html::escape;

/// The page.
pub fn page(t: &SweepTable) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>faultline sweep: {name}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">\
         \n<style>{CSS}</style>\n</head><body>\n<header><h1>sweep of {name}</h1>",
        name = escape(&t.scenario),
    );
    let mut meta = vec![
        escape(&t.file),
        format!("{} of {} runs", t.runs.len(), t.planned),
    ];
    if t.time_scale != 1.0 {
        meta.push(format!("time scale {}", t.time_scale));
    }
    if let Some(seed) = t.seed {
        meta.push(format!("seed {seed}"));
    }
    meta.push(format!("exit code {}", t.exit_code()));
    let _ = write!(h, "<p class=\"meta\">{}</p>", meta.join(" · "));
    h.push_str("<ul class=\"params\">");
    for p in &t.parameters {
        let _ = write!(
            h,
            "<li><code>{}</code> reaches <code>{}</code>: {}</li>",
            escape(&p.name),
            escape(&p.reaches),
            p.values
                .iter()
                .map(|v| format!("<code>{}</code>", escape(v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    h.push_str("</ul></header>\n");
    table(&mut h, t);
    let _ = write!(
        h,
        "<p class=\"verdict\">{}</p>\n<p class=\"note\">Each cell: the outcome, the measured figure against its bound \
         (in the bound's unit: seconds, calls, calls per second, or a share), and the margin, how far the figure was \
         from its bound (+ the room left when it held, - the shortfall when it failed) and relative to the bound. \
         Hover a cell for the verdict's sentence; a combination links to its run's report.</p>\n</body></html>\n",
        escape(&verdict(t)).replace('\n', "<br>")
    );
    h
}

/// The comparison: a row per run, a column per expectation.
fn table(h: &mut String, t: &SweepTable) {
    h.push_str("<div class=\"wrap\"><table><thead><tr><th>combination</th><th>run</th>");
    for c in &t.expectations {
        let _ = write!(
            h,
            "<th title=\"{}\">{}</th>",
            escape(&c.name),
            escape(&c.key)
        );
    }
    h.push_str("</tr></thead><tbody>\n");
    for row in &t.runs {
        let _ = write!(
            h,
            "<tr><th class=\"combo\">{}</th><td class=\"run {}\">{}</td>",
            combination(row),
            row.status.word(),
            escape(&run_words(row))
        );
        for c in &t.expectations {
            match row.cell(&c.key) {
                Some(cell) => cell_html(h, cell),
                None => h.push_str("<td class=\"none\">-</td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

/// The combination's label, linked to its run's report.html (a folder of the sweep's, so the link is relative)
/// when the run left a report.
fn combination(row: &Row) -> String {
    let label = escape(&row.label);
    let folder = row
        .report
        .as_deref()
        .and_then(|r| Path::new(r).file_name())
        .map(|f| f.to_string_lossy().into_owned());
    match folder {
        Some(f) => format!(
            "<a href=\"{}/report.html\">{label}</a>",
            escape(&percent_encoded(&f))
        ),
        _ => label,
    }
}

/// A folder name made safe as a relative URL: `%` and anything outside a small safe set written as `%XX`, so
/// that `50%` or a space in a value cannot break the link.
fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.=,".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn cell_html(h: &mut String, cell: &Cell) {
    let class = match cell.outcome {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::Inconclusive => "inconclusive",
    };
    let _ = write!(
        h,
        "<td class=\"{class}\" title=\"{}\"><b>{}</b>",
        escape(&cell.sentence),
        cell.outcome.word()
    );
    let figure = |v: Option<f64>| v.map_or_else(|| "-".to_string(), number);
    if cell.measured.is_some() || cell.bound.is_some() {
        let _ = write!(
            h,
            "<div class=\"fig\">{} vs {}</div>",
            figure(cell.measured),
            figure(cell.bound)
        );
    }
    if let Some(m) = cell.margin_words() {
        let _ = write!(h, "<div class=\"margin\">{}</div>", escape(&m));
    }
    h.push_str("</td>");
}

const CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d2330;margin:0 auto;\
padding:16px 24px;max-width:1360px;background:#fff}h1{font-size:19px;margin:4px 0}.meta,.note{color:#6a7283;\
font-size:13px;margin:4px 0}.params{margin:6px 0 14px;padding-left:20px}code{font-size:12px;background:#f3f4f7;\
padding:0 3px;border-radius:3px}table{border-collapse:separate;border-spacing:3px;font-size:13px}th,td{padding:5px \
8px;text-align:left;vertical-align:top;border-radius:4px}thead th{color:#5a6273;font-weight:600;border-bottom:2px \
solid #e3e6ec}th.combo{white-space:nowrap;font-weight:600}th.combo a{color:#1a55b3}td.pass{background:#e3f3e6;\
color:#14632b}td.fail{background:#fbe3e1;color:#8c1a16}td.inconclusive{background:#fdf0d5;color:#7a4300}\
td.none{color:#9aa1ae}td b{font-size:12px;letter-spacing:.02em}.fig,.margin{font-variant-numeric:tabular-nums;\
white-space:nowrap}.margin{font-weight:600}td.run{white-space:nowrap;color:#4a5263}td.run.passed{color:#14632b;\
font-weight:600}td.run.failed,td.run.broke{color:#8c1a16}td.run.interrupted{color:#7a4300;font-weight:600}\
.verdict{font-weight:600;margin:14px 0 4px}.wrap{overflow-x:auto}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::tests::two_runs;

    #[test]
    fn the_page_colours_each_cell_by_outcome_with_its_figures_and_links_each_run() {
        let page = page(&two_runs());
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(
            !page.contains("<script") && !page.contains("http"),
            "self-contained"
        );
        assert!(
            page.contains("<a href=\"01-timeout=250ms/report.html\">timeout=250ms</a>"),
            "{page}"
        );
        assert!(
            page.contains("<td class=\"pass\" title=\"pool measured Some(125.0) against Some(200.0): PASS\"><b>PASS</b><div class=\"fig\">125 vs 200</div><div class=\"margin\">+75 (+38%)</div></td>"),
            "{page}"
        );
        assert!(page.contains("<td class=\"fail\""), "{page}");
        assert!(page.contains("<td class=\"inconclusive\""), "{page}");
        assert!(page.contains("passed every expectation: timeout=250ms"));
    }

    #[test]
    fn text_from_the_scenario_is_escaped_and_a_folder_link_encoded() {
        let mut t = two_runs();
        t.scenario = "<b>x</b>".into();
        t.runs[0].report = Some("sweep/01-share=50%".into());
        let page = page(&t);
        assert!(!page.contains("<b>x</b>") && page.contains("&lt;b&gt;x&lt;/b&gt;"));
        assert!(
            page.contains("href=\"01-share=50%25/report.html\""),
            "{page}"
        );
    }
}
