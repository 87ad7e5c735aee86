//! `junit.xml`: the run's verdicts as JUnit test cases, so CI shows them beside its other tests. One testsuite per
//! scenario, one testcase per expectation, and one more, "the run itself", when the run broke or ended abnormally.
//!
//! Not for the figures: JUnit carries verdicts only; the numbers are in result.json and summary.txt.

use std::fmt::Write;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::result::ResultFile;
use crate::expect::Outcome;
use crate::run::Ending;

/// One testsuite per scenario, one testcase per expectation; a failure carries the sentence, and an inconclusive
/// verdict is an `<error>` rather than a `<failure>`. Run errors and an abnormal ending are a testcase of their own,
/// so CI shows them too.
pub fn junit(r: &ResultFile) -> String {
    let mut suite = TestSuite::new(r.scenario.name.clone());
    for v in &r.verdicts {
        let status = match v.outcome() {
            Outcome::Pass => TestCaseStatus::success(),
            Outcome::Fail => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(v.sentence.clone()).set_type("expectation");
                s
            }
            // Not a failure of the breaker: the evidence could not decide, which CI shows as an error.
            Outcome::Inconclusive => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(v.sentence.clone()).set_type("inconclusive");
                s
            }
        };
        let mut case = TestCase::new(v.name.clone(), status);
        case.set_classname(format!("faultline.{}", r.scenario.name));
        case.set_system_out(v.sentence.clone());
        suite.add_test_case(case);
    }
    let problems = run_problems(r);
    if !problems.is_empty() {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
        s.set_message(problems.join("\n")).set_type("run");
        let mut case = TestCase::new("the run itself", s);
        case.set_classname(format!("faultline.{}", r.scenario.name));
        suite.add_test_case(case);
    }
    let mut report = Report::new("faultline");
    report.add_test_suite(suite);
    report.to_string().unwrap_or_default()
}

/// What "the run itself" reports: the run's own errors, then how it ended unless it completed. A run stopped on a
/// failed expectation is not one more problem: that expectation is a failed testcase already.
fn run_problems(r: &ResultFile) -> Vec<String> {
    let mut problems = r.run_errors.clone();
    if matches!(r.ending, Ending::StoppedOnFailure { .. }) {
        return problems;
    }
    if let Some(e) = r.ending.sentence() {
        let mut said = format!("{}{}", e.head, e.rest);
        if let Ending::SutDied { last_lines, .. } = &r.ending {
            let _ = write!(said, " Its last output:\n{last_lines}");
        }
        problems.push(said);
    }
    problems
}
