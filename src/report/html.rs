//! `report.html`: the run on one page that opens offline. Charts of SUT latency percentiles over time (log scale),
//! offered vs achieved vs fallback vs error rates, calls in flight at the dependency against the pool limit, the
//! breaker state as a coloured band per breaker, phases shaded and named on every time chart, the verdict table,
//! and HdrHistogram's percentile distribution plot per phase (latency against percentile on a 1/(1-p) axis).
//!
//! The page carries everything it needs: the vendored uPlot library (src/report/assets, MIT, from the npm
//! registry) and its stylesheet are inlined, and the figures travel as one compact JSON blob in a
//! `<script type="application/json">` element, built by `data`. The tables are rendered here, one function per
//! section of the page, so they read without JavaScript. Not for computing figures: every number comes from
//! result.json or the saved recordings.

mod data;
mod display;
mod dns;
mod requests;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::result::{ReplicasSummary, ResultFile, TlsSummary, UnmatchedSummary};
use crate::expect::Outcome;

pub use data::data;

/// uPlot 1.6.32, `dist/uPlot.iife.min.js` from `npm pack uplot` (MIT, see assets/uPlot.LICENSE).
const UPLOT_JS: &str = include_str!("assets/uPlot.iife.min.js");
/// uPlot's stylesheet, same package.
const UPLOT_CSS: &str = include_str!("assets/uPlot.min.css");
/// The page's own drawing code: builds the charts from the JSON blob.
const REPORT_JS: &str = include_str!("assets/report.js");

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// JSON that is safe inside a `<script>` element: `<` only occurs in strings, where `\u003c` means the same, so
/// no `</script>` or `<!--` in a scenario's text can end the element early.
fn script_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

fn ms(v: f64, count: u64) -> String {
    if count == 0 {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The whole page: its sections in the order they show.
pub fn page(
    result: &ResultFile,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> String {
    let r = result;
    let mut h = String::with_capacity(256 * 1024);
    head(&mut h, r);
    header(&mut h, r);
    expectations_section(&mut h, r);
    phases_section(&mut h, r);
    unmatched_section(&mut h, &r.unmatched);
    answers_section(&mut h, &r.answers);
    if let Some(tls) = &r.tls {
        tls_section(&mut h, tls, &r.totals.connect_errors);
    }
    if let Some(dns) = &r.dns {
        dns::dns_section(&mut h, dns);
    }
    over_time_section(&mut h, r);
    if let Some(f) = &r.requests {
        requests::section(&mut h, f);
    }
    distributions_section(&mut h);
    summary_section(&mut h, r);
    scripts(&mut h, &data(r, load, dependency));
    h
}

/// The document's head: the title and the inlined stylesheets.
fn head(h: &mut String, r: &ResultFile) {
    let title = format!("faultline: {}", r.scenario.name);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\">\n<style>{}</style>\n<style>{}</style>\n</head><body>\n",
        escape(&title),
        UPLOT_CSS,
        PAGE_CSS
    );
}

/// The page's header: the scenario with its outcome badge, its description and figures, and how the run ended
/// when it did not complete.
fn header(h: &mut String, r: &ResultFile) {
    let passed = r.verdicts.iter().filter(|v| v.passed).count();
    let (class, word) = if r.passed {
        ("pass", "PASSED")
    } else if r.exit_code == crate::run::INCONCLUSIVE {
        ("inconclusive", "INCONCLUSIVE")
    } else {
        ("fail", "FAILED")
    };
    let _ = write!(
        h,
        "<header><h1>{} <span class=\"badge {class}\">{word}</span></h1>",
        escape(&r.scenario.name),
    );
    if let Some(d) = &r.scenario.description {
        let _ = write!(h, "<p class=\"desc\">{}</p>", escape(d.trim()));
    }
    let scale = if r.scenario.time_scale != 1.0 {
        format!(" · time scale {}", r.scenario.time_scale)
    } else {
        String::new()
    };
    let _ = write!(
        h,
        "<p class=\"meta\">{} · started {} · {:.1} s{} · seed {} · {} of {} expectations held · exit code {}</p>",
        escape(&r.scenario.file),
        escape(&r.started_at),
        r.scenario.duration_s,
        escape(&scale),
        r.scenario.seed.map_or_else(|| "-".to_string(), |s| s.to_string()),
        passed,
        r.verdicts.len(),
        r.exit_code
    );
    if let Some(e) = r.ending.sentence() {
        let _ = write!(
            h,
            "<p class=\"warn\">{}{}</p>",
            escape(e.head),
            escape(&e.rest)
        );
    }
    h.push_str("</header>\n");
}

/// The verdict table, with the run's own errors as rows of their own.
fn expectations_section(h: &mut String, r: &ResultFile) {
    h.push_str("<section><h2>Expectations</h2><table class=\"verdicts\"><thead><tr><th></th><th>expectation: what was measured against its bound</th></tr></thead><tbody>");
    for v in &r.verdicts {
        let (class, word) = match v.outcome() {
            Outcome::Pass => ("pass", "PASS"),
            Outcome::Fail => ("fail", "FAIL"),
            Outcome::Inconclusive => ("inconclusive", "INCONCLUSIVE"),
        };
        let sentence = v.finding();
        // The sentence carries the measured value and the bound with their units; the bare numbers of
        // result.json (seconds, fractions) would only be misread here.
        let _ = write!(
            h,
            "<tr class=\"{class}\"><td><span class=\"badge {class}\">{word}</span></td><td><div class=\"vname\">{}</div><div class=\"sentence\">{}</div></td></tr>",
            escape(&v.name),
            escape(sentence)
        );
    }
    for e in &r.run_errors {
        let _ = write!(
            h,
            "<tr class=\"fail\"><td><span class=\"badge fail\">RUN</span></td><td>{}</td></tr>",
            escape(e)
        );
    }
    if r.verdicts.is_empty() && r.run_errors.is_empty() {
        h.push_str("<tr><td></td><td>no expectations</td></tr>");
    }
    h.push_str("</tbody></table></section>\n");
}

/// The phase table: rates, SUT latency, fallbacks, errors and the dependency's peaks, with the lateness notes.
fn phases_section(h: &mut String, r: &ResultFile) {
    h.push_str(
        "<section><h2>Phases</h2><table class=\"phases\"><thead><tr><th>phase</th><th>from s</th><th>to s</th><th>offered/s</th><th>done/s</th>\
         <th>answered</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>fallback</th><th>errors</th>",
    );
    match &r.dependency_replicas {
        None => h.push_str("<th>dependency peak in flight</th>"),
        Some(rs) => {
            let _ = write!(
                h,
                "<th>dependency peak in flight, at most ({})</th>",
                escape(&ReplicasSummary::upper_bound_words(rs.count))
            );
        }
    }
    h.push_str("</tr></thead><tbody>");
    for p in &r.phases {
        let l = &p.sut_latency;
        let count = |names: &[&str]| {
            names
                .iter()
                .map(|c| p.outcomes.get(*c).copied().unwrap_or(0))
                .sum::<u64>()
        };
        let peaks: Vec<String> = p
            .dependency_max_in_flight
            .iter()
            .map(|(route, n)| format!("{} {n}", escape(route)))
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&p.name),
            p.start_s,
            p.end_s,
            p.offered_rate,
            p.achieved_rate,
            l.count,
            ms(l.p50_ms, l.count),
            ms(l.p90_ms, l.count),
            ms(l.p99_ms, l.count),
            ms(l.p999_ms, l.count),
            ms(l.max_ms, l.count),
            count(&["fallback"]),
            count(&["client_error", "server_error", "timeout", "connect_error"]),
            peaks.join(", ")
        );
    }
    h.push_str("</tbody></table>");
    if let Some(g) = &r.totals.generator_late {
        let _ = write!(h, "<p class=\"note\">{}</p>", escape(&g.note()));
    }
    if let Some(note) = r.faultd_late_note() {
        let _ = write!(h, "<p class=\"note\">{}</p>", escape(&note));
    }
    h.push_str("</section>\n");
}

/// The time charts' places (the script draws into them) and where the breaker's sources disagree.
fn over_time_section(h: &mut String, r: &ResultFile) {
    // Over several replicas, each bucket's maximum is the sum of theirs: the chart says it is an upper bound.
    let inflight_note = match &r.dependency_replicas {
        None => String::new(),
        Some(rs) => format!(
            "<p class=\"note\">Measured by {} faultd replicas behind one address: each point is the sum of the replicas' own peaks in its bucket, an upper bound (their peaks need not have coincided).</p>",
            rs.count
        ),
    };
    let _ = write!(
        h,
        "<section><h2>Over time</h2>\
         <h3>SUT latency from the intended send time, ms (log scale)</h3><div class=\"chart\" id=\"chart-latency\"></div>\
         <h3>Requests per second: offered, achieved, fallback, errors; calls per second at the dependency</h3><div class=\"chart\" id=\"chart-rates\"></div>\
         <h3>Calls in flight at the dependency (measured by faultd) against the pool limit</h3>{inflight_note}<div class=\"chart\" id=\"chart-inflight\"></div>\
         <h3>Breaker state</h3><div class=\"chart\" id=\"chart-breakers\"></div>\
         <p class=\"legend\"><span class=\"sw closed\"></span>closed <span class=\"sw half\"></span>half-open <span class=\"sw open\"></span>open \
         <span class=\"sw gap\"></span>not observed</p>",
    );
    if !r.sut_metrics.is_empty() {
        h.push_str("<h3>The SUT's own metrics the expectations read, as scraped</h3><div id=\"sut-metrics\"></div>");
    }
    if !r.series.instance_arrivals.is_empty() {
        h.push_str("<h3>Calls per second at each instance (measured by faultd at the instance's own listener): an instance taken out of rotation drops to zero</h3><div class=\"chart\" id=\"chart-instances\"></div>");
    }
    if !r.series.handshakes.is_empty() {
        h.push_str("<h3>TLS handshakes per second at the dependency (measured by faultd), by outcome</h3><div class=\"chart\" id=\"chart-handshakes\"></div>");
    }
    if !r.disagreements.is_empty() {
        let _ = write!(
            h,
            "<h3>Where the breaker's sources disagree</h3><p class=\"note\">Changes of state one timeline shows and another does not, beyond their resolutions. A coarser source missing what a finer one saw is expected at its resolution; a finer one missing a change puts that change in doubt.</p><ul class=\"disagreements\">"
        );
        for d in &r.disagreements {
            let _ = write!(h, "<li>{}</li>", escape(&d.sentence()));
        }
        h.push_str("</ul>");
    }
    h.push_str("</section>\n");
}

/// The place of the percentile distribution plots, one per phase (the script draws them).
fn distributions_section(h: &mut String) {
    h.push_str(
        "<section><h2>Percentile distribution per phase</h2><p class=\"note\">Latency against percentile on HdrHistogram's 1/(1-p) axis; \
         the same data as the .hgrm files beside this page.</p><div id=\"distributions\"></div></section>\n",
    );
}

/// summary.txt itself, folded away.
fn summary_section(h: &mut String, r: &ResultFile) {
    let _ = writeln!(
        h,
        "<section><details><summary>summary.txt</summary><pre>{}</pre></details></section>",
        escape(&super::summary::text(r))
    );
}

/// The charts' figures, uPlot and the script that draws the charts, which end the page.
fn scripts(h: &mut String, data: &Value) {
    let _ = writeln!(
        h,
        "<script type=\"application/json\" id=\"report-data\">{}</script>",
        script_json(data)
    );
    let _ = write!(
        h,
        "<script>{UPLOT_JS}</script>\n<script>{REPORT_JS}</script>\n</body></html>\n"
    );
}

/// The handshakes table: loadgen's to the SUT in a line, the dependency's listener per phase with a column per
/// outcome seen.
fn tls_section(h: &mut String, tls: &TlsSummary, connect_errors: &BTreeMap<String, u64>) {
    h.push_str("<section><h2>TLS handshakes</h2>");
    if let Some(l) = &tls.load {
        let _ = write!(
            h,
            "<p>loadgen to the SUT: {} full, {} resumed, {} failed.</p>",
            l.full, l.resumed, l.failed
        );
    }
    if !connect_errors.is_empty() {
        let reasons: Vec<String> = connect_errors
            .iter()
            .map(|(reason, n)| format!("{} {n}", escape(reason)))
            .collect();
        let _ = write!(
            h,
            "<p>SUT requests that ended <code>connect_error</code>, by reason: {}.</p>",
            reasons.join(", ")
        );
    }
    if let Some(d) = &tls.dependency {
        let outcomes: Vec<&String> = d.outcomes.keys().collect();
        let _ = write!(
            h,
            "<p>The dependency's <code>{}</code> listener, measured by faultd: {} attempts, {} delayed.</p><table class=\"handshakes\"><thead><tr><th>phase</th><th>attempts</th>",
            escape(&d.listener),
            d.attempts,
            d.delayed
        );
        for o in &outcomes {
            let _ = write!(h, "<th>{}</th>", escape(o));
        }
        h.push_str("</tr></thead><tbody>");
        for p in &d.phases {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td>",
                escape(&p.name),
                p.attempts
            );
            for o in &outcomes {
                let _ = write!(
                    h,
                    "<td class=\"num\">{}</td>",
                    p.outcomes.get(*o).copied().unwrap_or(0)
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("</section>\n");
}

const PAGE_CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d2330;margin:0 auto;padding:16px 24px;max-width:1360px;background:#fff}\
h1{font-size:22px;margin:4px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #e3e6ec;padding-bottom:4px}h3{font-size:14px;font-weight:600;margin:14px 0 2px;color:#394150}\
.desc{color:#4a5263;margin:4px 0;max-width:1100px}.meta{color:#6a7283;font-size:13px;margin:4px 0}.warn{background:#fff3cd;padding:6px 10px;border-radius:4px}\
.badge{display:inline-block;padding:1px 7px;border-radius:4px;font-size:12px;font-weight:700;color:#fff;vertical-align:middle}.badge.pass{background:#1e8e3e}.badge.fail{background:#c5221f}.badge.inconclusive{background:#b06000}\
table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}th{color:#5a6273;font-weight:600}\
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.fail td{background:#fdf0ef}.vname{font-weight:600}.sentence{color:#4a5263}\
.chart{min-height:40px}.legend{font-size:12px;color:#5a6273;margin:2px 0 0 70px}.sw{display:inline-block;width:14px;height:10px;margin:0 4px 0 10px;vertical-align:middle;border-radius:2px}\
.sw.closed{background:#7cc68d}.sw.half{background:#f2b33d}.sw.open{background:#d9534f}.sw.gap{background:repeating-linear-gradient(45deg,#bbb 0 3px,#eee 3px 6px)}\
#distributions{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:8px 24px}.note{color:#6a7283;font-size:12px;margin:0}\
pre{font-size:12px;background:#f6f7f9;padding:10px;overflow:auto}.error{color:#c5221f;font-weight:600}\
.answers th,.answers td:nth-child(-n+3){white-space:nowrap}\
.followed{margin:10px 0 14px}.followed svg{display:block;background:#fafbfc;border:1px solid #eceef2}.calls{font-size:12px;color:#4a5263;margin:4px 0 0;padding-left:22px}";

/// The first answer of each class per request template, as the SUT sent it. Nothing when none were kept.
fn answers_section(h: &mut String, answers: &[loadgen::AnswerSample]) {
    if answers.is_empty() {
        return;
    }
    h.push_str(
        "<section class=\"answers\"><h2>Sample answers</h2><p class=\"note\">The first answer of each outcome \
         class for each request, as the service under test sent it; a gRPC message is decoded by its request's \
         <code>.proto</code> files when it names them.</p><table><thead><tr><th>request</th><th>class</th>\
         <th>at s</th><th>status</th><th>answer</th></tr></thead><tbody>",
    );
    for a in answers {
        let status = match (&a.grpc_status, &a.grpc_message) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.clone(),
            (None, _) => a.status.to_string(),
        };
        let answer = match a.shown_as.as_str() {
            "none" => "<span class=\"note\">no message</span>".to_string(),
            "hex" => format!(
                "<code>{}</code> <span class=\"note\">(hex)</span>",
                escape(&a.answer)
            ),
            _ => format!("<code>{}</code>", escape(&a.answer)),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{:.1}</td><td>{}</td><td>{answer}</td></tr>",
            escape(&a.request),
            escape(a.class.name()),
            a.at_s,
            escape(&status),
        );
    }
    h.push_str("</tbody></table></section>\n");
}

/// Calls that matched no route at faultd: a SUT calling the wrong URL or path of its dependency. Nothing when none.
fn unmatched_section(h: &mut String, u: &UnmatchedSummary) {
    if u.calls == 0 {
        return;
    }
    let _ = write!(
        h,
        "<section class=\"unmatched\"><h2>Calls that matched no route</h2><p class=\"{}\">{} calls reached \
         faultd on no route and were {}. The routes: {}.</p><table><thead><tr><th>method</th><th>path</th>\
         <th>calls</th></tr></thead><tbody>",
        if u.forwarded_to.is_some() { "note" } else { "warn" },
        u.calls,
        escape(&match &u.forwarded_to {
            Some(_) => format!("{}, without faults", u.fate()),
            None => format!(
                "{}: check the URL and path the SUT calls its dependency with",
                u.fate()
            ),
        }),
        escape(&if u.routes.is_empty() {
            "none".to_string()
        } else {
            u.routes.join("; ")
        })
    );
    for p in &u.paths {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&p.method),
            escape(&p.path),
            p.calls
        );
    }
    h.push_str("</tbody></table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markup_in_text_is_escaped() {
        assert_eq!(
            escape("<b>\"x\" & 'y'</b>"),
            "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;"
        );
        assert_eq!(
            script_json(&json!({ "a": "</script><!--" })),
            r#"{"a":"\u003c/script>\u003c!--"}"#
        );
    }
}
