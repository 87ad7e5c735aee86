//! The run in Markdown, for CI pages: the verdict table (outcome, sentence, measured, bound), the phase table and
//! where the report folder is, as appended to GitHub Actions' `$GITHUB_STEP_SUMMARY` and printed by
//! `faultline report --format markdown`; and the workflow annotations (`::error` per failed expectation, `::warning`
//! per inconclusive one) that point at the expectation's line in the scenario file.
//!
//! Not for deciding when to write them (`commands::run` does, from the environment) nor for the text summary.

use std::fmt::Write;
use std::path::Path;

use super::ms_figure;
use super::result::ResultFile;
use crate::expect::Outcome;
use crate::run::Ending;

/// The summary of a saved result in GitHub-flavoured Markdown; `dir` is the run's report folder. Its sections in the
/// order they print.
pub fn markdown(r: &ResultFile, dir: &Path) -> String {
    let mut o = String::new();
    heading(&mut o, r);
    ending(&mut o, &r.ending);
    expectations(&mut o, r);
    phases(&mut o, r);
    if let Some(tls) = &r.tls {
        tls_handshakes(&mut o, tls);
    }
    if let Some(d) = &r.distributed {
        agents(&mut o, d);
    }
    if let Some(rs) = &r.dependency_replicas {
        replicas(&mut o, r, rs);
    }
    if let Some(w) = r.unmatched.warning() {
        unmatched(&mut o, &w);
    }
    let _ = writeln!(
        o,
        "Report folder: `{}` (report.html, result.json, junit.xml, .hgrm, sut.hlog).\n",
        dir.display()
    );
    o
}

/// The title with the outcome and exit code, and the scenario's file, start, length, seed and time scale.
fn heading(o: &mut String, r: &ResultFile) {
    let state = match (r.exit_code, r.passed) {
        (_, true) => "passed",
        (1, _) => "FAILED",
        (crate::run::INCONCLUSIVE, _) => "INCONCLUSIVE",
        (130, _) => "INTERRUPTED",
        _ => "BROKE",
    };
    let _ = writeln!(
        o,
        "### faultline: `{}` {state} (exit code {})\n",
        r.scenario.name, r.exit_code
    );
    let _ = writeln!(
        o,
        "Scenario `{}`, started {}, {:.1} s{}{}.\n",
        r.scenario.file,
        r.started_at,
        r.scenario.duration_s,
        r.scenario
            .seed
            .map(|s| format!(", seed {s}"))
            .unwrap_or_default(),
        if r.scenario.time_scale != 1.0 {
            format!(", time scale {}", r.scenario.time_scale)
        } else {
            String::new()
        }
    );
}

/// How the run ended, when it did not complete, as a quote with the headline in bold.
fn ending(o: &mut String, ending: &Ending) {
    let Some(e) = ending.sentence() else {
        return;
    };
    // The SUT's last lines would break the quote: they are in summary.txt.
    let more = match ending {
        Ending::SutDied { .. } => " Its last output is in `summary.txt`.",
        _ => "",
    };
    let _ = writeln!(o, "> **{}**{}{more}\n", e.head, cell(&e.rest));
}

/// The verdict table, then the run's own errors and what could not be exported.
fn expectations(o: &mut String, r: &ResultFile) {
    let held = r.verdicts.iter().filter(|v| v.passed).count();
    let _ = writeln!(
        o,
        "#### Expectations: {held} of {} held\n",
        r.verdicts.len()
    );
    if r.verdicts.is_empty() {
        let _ = writeln!(o, "(none)\n");
    } else {
        let _ = writeln!(o, "| | expectation | measured | bound |");
        let _ = writeln!(o, "| --- | --- | ---: | ---: |");
        for v in &r.verdicts {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                mark(v.outcome()),
                cell(v.finding()),
                figure(v.measured),
                figure(v.bound)
            );
        }
        let _ = writeln!(o);
    }
    for e in &r.run_errors {
        let _ = writeln!(o, "- **the run itself:** {}", cell(e));
    }
    for p in &r.not_exported {
        let _ = writeln!(o, "- **not exported:** {}", cell(p));
    }
    if !r.run_errors.is_empty() || !r.not_exported.is_empty() {
        let _ = writeln!(o);
    }
}

/// The phase table of SUT latency, the lateness notes under it, and whether the requests were conserved.
fn phases(o: &mut String, r: &ResultFile) {
    let _ = writeln!(
        o,
        "#### Phases (SUT latency from the intended send time, ms)\n"
    );
    let _ = writeln!(
        o,
        "| phase | from s | to s | offered/s | done/s | count | p50 | p90 | p99 | p99.9 | max |"
    );
    let _ = writeln!(
        o,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for p in &r.phases {
        let l = &p.sut_latency;
        let _ = writeln!(
            o,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} |",
            cell(&p.name),
            p.start_s,
            p.end_s,
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
        let _ = writeln!(o, "\n{}", g.note());
    }
    if let Some(note) = r.faultd_late_note() {
        let _ = writeln!(o, "\n{note}");
    }
    let _ = writeln!(
        o,
        "\n{} sent of {} scheduled; conservation {}.\n",
        r.totals.sent,
        r.totals.intended,
        if r.totals.conserved {
            "holds"
        } else {
            "**BROKEN**"
        }
    );
}

/// TLS handshakes on both sides of the SUT, in one line.
fn tls_handshakes(o: &mut String, tls: &super::result::TlsSummary) {
    let mut sides = Vec::new();
    if let Some(l) = &tls.load {
        sides.push(format!(
            "loadgen to the SUT {} full, {} resumed, {} failed",
            l.full, l.resumed, l.failed
        ));
    }
    if let Some(d) = &tls.dependency {
        let outcomes: Vec<String> = d.outcomes.iter().map(|(k, n)| format!("{k} {n}")).collect();
        sides.push(format!(
            "the dependency (measured by faultd) {} attempts{}",
            d.attempts,
            if outcomes.is_empty() {
                String::new()
            } else {
                format!(": {}", outcomes.join(", "))
            }
        ));
    }
    let _ = writeln!(o, "TLS handshakes: {}.\n", cell(&sides.join("; ")));
}

/// The agents that shared the load: how many, how many were lost, the largest clock offset.
fn agents(o: &mut String, d: &crate::agents::Distributed) {
    let lost = d.agents.iter().filter(|a| a.lost.is_some()).count();
    let offset = d
        .agents
        .iter()
        .map(|a| a.clock_offset_ms.abs())
        .fold(0.0, f64::max);
    let _ = writeln!(
        o,
        "Load from {} agents{}, histograms merged exactly; the largest clock offset {offset:.3} ms.\n",
        d.agents.len(),
        if lost > 0 {
            format!(" (**{lost} lost**)")
        } else {
            String::new()
        }
    );
}

/// The faultd replicas behind the dependency and each route's merged peak.
fn replicas(o: &mut String, r: &ResultFile, rs: &super::result::ReplicasSummary) {
    let peaks: Vec<String> = r
        .dependency
        .iter()
        .map(|(route, d)| format!("{}: {}", cell(route), rs.peak_words(d)))
        .collect();
    let _ = writeln!(
        o,
        "Dependency: {} faultd replicas behind one address, their recordings merged{}{}.\n",
        rs.count,
        if peaks.is_empty() { "" } else { "; " },
        peaks.join("; ")
    );
}

/// Calls that matched no route: a GitHub alert, a warning when answered 404 and a note when forwarded.
fn unmatched(o: &mut String, w: &str) {
    let (kind, text) = match w.strip_prefix("note: ") {
        Some(text) => ("NOTE", text),
        None => ("WARNING", w.trim_start_matches("warning: ")),
    };
    let _ = writeln!(o, "> [!{kind}]\n> {text}\n");
}

/// The workflow annotations of a result: `::error` for each failed expectation and `::warning` for each
/// inconclusive one, located at `lines[i]` (the 1-based line of the i-th `expect:` entry) in `file` where known.
pub fn annotations(r: &ResultFile, file: &str, lines: &[u64]) -> Vec<String> {
    r.verdicts
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let level = match v.outcome() {
                Outcome::Pass => return None,
                Outcome::Fail => "error",
                Outcome::Inconclusive => "warning",
            };
            let label = v.id.as_deref().unwrap_or(&v.name);
            let title = format!("{} {label}", v.outcome().word());
            let line = lines
                .get(i)
                .map(|l| format!(",line={l}"))
                .unwrap_or_default();
            Some(format!(
                "::{level} file={}{line},title={}::{}",
                property(file),
                property(&title),
                data(v.finding())
            ))
        })
        .collect()
}

pub(crate) fn mark(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "✅ PASS",
        Outcome::Fail => "❌ FAIL",
        Outcome::Inconclusive => "⚠️ INCONCLUSIVE",
    }
}

/// Text made safe for one table cell: no pipe ends the cell, no newline ends the row.
pub(crate) fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\r', '\n'], " ")
}

fn figure(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.3}"),
    }
}

/// A workflow command's message, escaped as the runner unescapes it.
fn data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as `data`, and no `:` or `,` to end it early.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::expect::Verdict;
    use crate::report::result::{Percentiles, PhaseSummary, ScenarioInfo, Series, Totals};
    use std::collections::BTreeMap;

    fn verdict(
        id: &str,
        outcome: Outcome,
        sentence: &str,
        m: Option<f64>,
        b: Option<f64>,
    ) -> Verdict {
        Verdict {
            id: Some(id.into()),
            name: format!("the {id} expectation"),
            sentence: format!("{sentence}: {}", outcome.word()),
            passed: outcome == Outcome::Pass,
            outcome: Some(outcome),
            measured: m,
            bound: b,
            per_request: None,
        }
    }

    /// A result of two phases and three verdicts (a pass, a failure, an inconclusive one), for the tests of
    /// whatever renders results.
    pub(crate) fn result() -> ResultFile {
        let phase = |name: &str, start_s: f64, end_s: f64, p99: f64| PhaseSummary {
            name: name.into(),
            start_s,
            end_s,
            offered_rate: 200.0,
            achieved_rate: 199.5,
            sut_latency: Percentiles {
                count: 400,
                p50_ms: 12.0,
                p90_ms: 30.0,
                p99_ms: p99,
                p999_ms: p99 * 1.5,
                max_ms: p99 * 2.0,
            },
            sut_service_time: Percentiles::default(),
            outcomes: BTreeMap::new(),
            dependency_max_in_flight: BTreeMap::new(),
            dependency_latency: BTreeMap::new(),
        };
        ResultFile {
            version: crate::report::RESULT_VERSION,
            scenario: ScenarioInfo {
                name: "slow-dependency".into(),
                description: None,
                file: "scenarios/slow-dependency.yaml".into(),
                seed: Some(3),
                time_scale: 0.5,
                duration_s: 4.0,
            },
            started_at: "2026-12-01T04:00:00Z".into(),
            ending: Ending::Completed,
            exit_code: 1,
            unmatched: Default::default(),
            answers: Vec::new(),
            passed: false,
            verdicts: vec![
                verdict(
                    "opens",
                    Outcome::Pass,
                    "breaker pricing opened 1.2 s after brownout began; expected within 5 s",
                    Some(1.2),
                    Some(5.0),
                ),
                verdict(
                    "pool",
                    Outcome::Fail,
                    "at most 231 calls in flight at pricing | peak; expected below 200",
                    Some(231.0),
                    Some(200.0),
                ),
                verdict(
                    "probes",
                    Outcome::Inconclusive,
                    "breaker pricing never left closed, 50% of it",
                    None,
                    Some(3.0),
                ),
            ],
            run_errors: vec![],
            not_exported: vec![],
            phases: vec![
                phase("healthy", 0.0, 2.0, 40.0),
                phase("brownout", 2.0, 4.0, 310.0),
            ],
            totals: Totals {
                intended: 800,
                sent: 800,
                outcomes: BTreeMap::new(),
                still_in_flight: 0,
                conserved: true,
                connect_errors: BTreeMap::new(),
                generator_late: None,
            },
            dependency: BTreeMap::new(),
            breakers: BTreeMap::new(),
            disagreements: vec![],
            series: Series::default(),
            sut_metrics: BTreeMap::new(),
            ca: None,
            tls: None,
            dns: None,
            distributed: None,
            dependency_replicas: None,
            requests: None,
            postgres: BTreeMap::new(),
        }
    }

    #[test]
    fn the_summary_has_a_row_per_verdict_and_per_phase_and_names_the_report_folder() {
        let md = markdown(&result(), Path::new("reports/slow-dependency/run1"));
        assert!(
            md.starts_with("### faultline: `slow-dependency` FAILED (exit code 1)"),
            "{md}"
        );
        assert!(md.contains("#### Expectations: 1 of 3 held"), "{md}");
        assert!(md.contains("| ✅ PASS | breaker pricing opened 1.2 s after brownout began; expected within 5 s | 1.200 | 5 |"), "{md}");
        // A pipe in a sentence stays inside its cell.
        assert!(md.contains("| ❌ FAIL | at most 231 calls in flight at pricing \\| peak; expected below 200 | 231 | 200 |"), "{md}");
        assert!(
            md.contains(
                "| ⚠️ INCONCLUSIVE | breaker pricing never left closed, 50% of it | - | 3 |"
            ),
            "{md}"
        );
        assert!(md.contains("| healthy | 0.0 | 2.0 | 200.0 | 199.5 | 400 | 12.00 | 30.00 | 40.00 | 60.00 | 80.00 |"), "{md}");
        assert!(md.contains("| brownout | 2.0 | 4.0 |"), "{md}");
        assert!(
            md.contains("Report folder: `reports/slow-dependency/run1`"),
            "{md}"
        );
        // Every table row has as many cells as its header.
        for table in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = table
                .lines()
                .map(|l| l.replace("\\|", "").matches('|').count())
                .collect();
            assert!(widths.iter().all(|w| *w == widths[0]), "{table}");
        }
    }

    #[test]
    fn what_could_not_be_exported_is_listed_in_the_summary_and_the_text_summary() {
        let mut r = result();
        let clean = markdown(&r, Path::new("run"));
        assert!(!clean.contains("not exported"), "{clean}");
        r.not_exported = vec!["metrics not served: cannot listen on 127.0.0.1:9464: in use".into()];
        let md = markdown(&r, Path::new("run"));
        assert!(
            md.contains(
                "- **not exported:** metrics not served: cannot listen on 127.0.0.1:9464: in use"
            ),
            "{md}"
        );
        let text = crate::report::summary::text(&r);
        assert!(
            text.ends_with(
                "\nnot exported: metrics not served: cannot listen on 127.0.0.1:9464: in use\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn tls_handshakes_and_the_agents_are_said_when_the_run_had_them() {
        let mut r = result();
        let plain = markdown(&r, Path::new("run"));
        assert!(!plain.contains("TLS handshakes") && !plain.contains("agents"));
        r.tls = Some(crate::report::result::TlsSummary {
            load: Some(crate::record::LoadHandshakes {
                full: 4,
                resumed: 96,
                failed: 1,
            }),
            dependency: Some(crate::report::result::ListenerHandshakes {
                listener: "data".into(),
                attempts: 55,
                outcomes: BTreeMap::from([("ok".into(), 50), ("expired".into(), 5)]),
                ..Default::default()
            }),
        });
        let agent = |index: u32, lost: Option<&str>| crate::agents::AgentSummary {
            index,
            host: "vm pid 1".into(),
            clock_offset_ms: if index == 0 { -0.012 } else { 0.004 },
            clock_uncertainty_ms: 0.05,
            late_ms: 0.0,
            intended: 10,
            sent: 10,
            outcomes: 10,
            in_flight: 0,
            lost: lost.map(String::from),
        };
        r.distributed = Some(crate::agents::Distributed {
            agents: vec![agent(0, None), agent(1, Some("it died"))],
            buckets_merged: 10,
            bucket_merge_p99_ms: 0.5,
        });
        let md = markdown(&r, Path::new("run"));
        assert!(
            md.contains("TLS handshakes: loadgen to the SUT 4 full, 96 resumed, 1 failed; the dependency (measured by faultd) 55 attempts: expired 5, ok 50."),
            "{md}"
        );
        assert!(
            md.contains("Load from 2 agents (**1 lost**), histograms merged exactly; the largest clock offset 0.012 ms."),
            "{md}"
        );
    }

    #[test]
    fn a_passing_run_says_so_and_an_early_stop_is_explained() {
        let mut r = result();
        r.verdicts.truncate(1);
        r.passed = true;
        r.exit_code = 0;
        assert!(markdown(&r, Path::new("x")).contains("`slow-dependency` passed (exit code 0)"));
        r.ending = Ending::StoppedOnFailure {
            expectation: "pool: at most 231".into(),
        };
        assert!(
            markdown(&r, Path::new("x")).contains("**Stopped early**: pool: at most 231 failed")
        );
    }

    #[test]
    fn every_format_says_an_early_end_in_the_same_sentence_styled_its_own_way() {
        let mut r = result();
        r.ending = Ending::AgentLost {
            agent: "agent 1 (vm pid 7)".into(),
            why: "it died | at once".into(),
        };
        let said = "agent 1 (vm pid 7): it died | at once. The figures are what the other agents recorded.";
        let text = crate::report::summary::text(&r);
        assert!(
            text.contains(&format!("\nAN AGENT WAS LOST: {said}\n")),
            "{text}"
        );
        let md = markdown(&r, Path::new("run"));
        assert!(
            md.contains(&format!("\n> **An agent was lost**: {}\n", cell(said))),
            "{md}"
        );
        let xml = crate::report::junit::junit(&r);
        assert!(xml.contains(&format!("An agent was lost: {said}")), "{xml}");

        r.ending = Ending::SutDied {
            status: "killed by SIGKILL".into(),
            last_lines: "fatal: the pool is exhausted".into(),
        };
        let text = crate::report::summary::text(&r);
        assert!(
            text.contains("\nTHE SUT DIED during the run (killed by SIGKILL). Its last output:\n  | fatal: the pool is exhausted\n"),
            "{text}"
        );
        let md = markdown(&r, Path::new("run"));
        assert!(
            md.contains("> **The SUT died** during the run (killed by SIGKILL). Its last output is in `summary.txt`."),
            "{md}"
        );
        let xml = crate::report::junit::junit(&r);
        assert!(
            xml.contains("The SUT died during the run (killed by SIGKILL). Its last output:\nfatal: the pool is exhausted"),
            "{xml}"
        );
    }

    #[test]
    fn failed_verdicts_are_errors_and_inconclusive_ones_warnings_at_their_lines() {
        let a = annotations(&result(), "scenarios/slow, dependency.yaml", &[30, 31, 33]);
        assert_eq!(
            a,
            vec![
                "::error file=scenarios/slow%2C dependency.yaml,line=31,title=FAIL pool::at most 231 calls in flight at pricing | peak; expected below 200".to_string(),
                "::warning file=scenarios/slow%2C dependency.yaml,line=33,title=INCONCLUSIVE probes::breaker pricing never left closed, 50%25 of it".to_string(),
            ]
        );
    }

    #[test]
    fn without_lines_an_annotation_still_names_the_file_and_escapes_newlines() {
        let mut r = result();
        r.verdicts[1].sentence = "two\nlines: FAIL".into();
        r.verdicts[1].id = None;
        let a = annotations(&r, "s.yaml", &[]);
        assert_eq!(
            a[0],
            "::error file=s.yaml,title=FAIL the pool expectation::two%0Alines"
        );
    }

    #[test]
    fn unmatched_calls_are_a_warning_when_answered_404_and_a_note_when_forwarded() {
        let mut r = result();
        let dir = std::path::Path::new("reports/x");
        assert!(!markdown(&r, dir).contains("matched no route"));
        r.unmatched = crate::report::result::UnmatchedSummary {
            calls: 7,
            paths: vec![faultd::UnmatchedPath {
                method: "GET".into(),
                path: "/prices/1".into(),
                calls: 7,
            }],
            routes: vec!["pricing * /price/*".into()],
            forwarded_to: None,
        };
        let text = markdown(&r, dir);
        assert!(
            text.contains("> [!WARNING]\n> 7 calls to the dependency matched no route and were answered 404: GET /prices/1 (7). The routes are: pricing * /price/*. Check the URL"),
            "{text}"
        );
        r.unmatched.forwarded_to = Some("http://127.0.0.1:8081".into());
        let text = markdown(&r, dir);
        assert!(
            text.contains("> [!NOTE]\n> 7 calls to the dependency matched no route and were forwarded to http://127.0.0.1:8081, without faults: GET /prices/1 (7)."),
            "{text}"
        );
        assert!(!text.contains("Check the URL"), "{text}");
    }
}
