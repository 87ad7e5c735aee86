//! A sweep's results as one table (sweep.json): a row per run, in the order of the combinations, a cell per
//! expectation with its outcome and margin, and what the sweep's exit code follows from them. Every figure comes
//! from the runs' `ResultFile`s; the rows grow one run at a time, so the table of the runs done can be written
//! whenever the sweep stops.
//!
//! Not for rendering (`text`, `markdown`, `html`) nor for running.

use serde::{Deserialize, Serialize};

use super::vary::{Combination, Setting};
use crate::expect::{Outcome, Verdict};
use crate::report::ResultFile;

/// The version of sweep.json's layout.
pub const SWEEP_VERSION: u32 = 1;

/// A sweep's table, as sweep.json holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepTable {
    /// [`SWEEP_VERSION`].
    pub version: u32,
    /// The scenario's name.
    pub scenario: String,
    /// The scenario file, as given.
    pub file: String,
    /// The time scale every run had.
    pub time_scale: f64,
    /// The seed every run had (the scenario's, or `--seed`).
    pub seed: Option<u64>,
    /// What was varied, in the order of the `--vary` options.
    pub parameters: Vec<Parameter>,
    /// How many runs the sweep planned: one per combination.
    pub planned: usize,
    /// The expectations, the table's columns, in the scenario's order.
    pub expectations: Vec<Column>,
    /// The runs done, in the order of the combinations.
    pub runs: Vec<Row>,
    /// True when a signal stopped the sweep: during a run, which is then marked interrupted, or between two.
    pub interrupted: bool,
}

/// One varied parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    /// As `--vary` named it.
    pub name: String,
    /// Where it reaches the SUT: `sut.demo.operations.pricing.timeout`, or `{param.timeout}`.
    pub reaches: String,
    /// Its values, in the order given.
    pub values: Vec<String>,
}

/// One expectation: a column of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// What the column is headed with and cells refer to: the expectation's id, else its name.
    pub key: String,
    /// The expectation's short name.
    pub name: String,
}

/// One run of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `timeout=250ms open_for=5s`.
    pub label: String,
    /// The value of each parameter in this run.
    pub combination: Vec<Setting>,
    /// How the run went.
    pub status: Status,
    /// The run's exit code, as `faultline run` would have given it.
    pub exit_code: i32,
    /// The run's report folder; absent when the run broke before it had one.
    pub report: Option<String>,
    /// One per expectation the run judged, in the order of the columns.
    pub cells: Vec<Cell>,
    /// The run's own failures (a SUT that died, requests not conserved), as sentences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_errors: Vec<String>,
}

/// How a run of the sweep went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every expectation held.
    Passed,
    /// An expectation failed.
    Failed,
    /// Nothing failed, but an expectation could not be judged.
    Inconclusive,
    /// The run itself broke (the SUT would not start or died, a port was taken, requests were not conserved).
    Broke,
    /// A signal stopped the run; its cells judge the part that ran.
    Interrupted,
}

impl Status {
    /// The status of a run that ended with `exit_code`.
    fn of(exit_code: i32) -> Status {
        match exit_code {
            0 => Status::Passed,
            1 => Status::Failed,
            crate::run::INCONCLUSIVE => Status::Inconclusive,
            130 => Status::Interrupted,
            _ => Status::Broke,
        }
    }

    /// The word tables show.
    pub fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Inconclusive => "inconclusive",
            Status::Broke => "broke",
            Status::Interrupted => "interrupted",
        }
    }
}

/// One expectation in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The column's key.
    pub expectation: String,
    /// Pass, fail or inconclusive.
    pub outcome: Outcome,
    /// The measured figure, in the bound's unit, when there is one.
    pub measured: Option<f64>,
    /// The bound.
    pub bound: Option<f64>,
    /// How far the figure was from its bound, in the bound's unit: the room left when it passed (positive), the
    /// shortfall when it failed (negative). Absent when the verdict is inconclusive or lacks either figure.
    pub margin: Option<f64>,
    /// The margin as a share of the bound (0.375 is 37.5%); absent also when the bound is 0.
    pub relative_margin: Option<f64>,
    /// The verdict's sentence.
    pub sentence: String,
}

impl Cell {
    /// The cell of one verdict.
    pub fn of(key: String, v: &Verdict) -> Cell {
        let outcome = v.outcome();
        let margin = margin(outcome, v.measured, v.bound);
        Cell {
            expectation: key,
            outcome,
            measured: v.measured,
            bound: v.bound,
            margin,
            relative_margin: margin
                .zip(v.bound)
                .filter(|(_, b)| *b != 0.0)
                .map(|(m, b)| m / b.abs()),
            sentence: v.sentence.clone(),
        }
    }
}

impl Cell {
    /// The margin for people, absolute and relative: `+75 (+38%)`, `-0.4 (-13%)`; `None` without one.
    pub fn margin_words(&self) -> Option<String> {
        let m = self.margin?;
        Some(match self.relative_margin {
            Some(r) => format!("{} ({})", signed(m), signed_percent(r)),
            None => signed(m),
        })
    }

    /// The outcome and the margin: `PASS +75 (+38%)`, `INCONCLUSIVE`.
    pub fn words(&self) -> String {
        let word = self.outcome.word();
        match self.margin_words() {
            Some(m) => format!("{word} {m}"),
            None => word.to_string(),
        }
    }
}

/// A figure with at most three decimals and no trailing zeros: `75`, `0.4`, `0.125`, `1234.5`.
pub fn number(x: f64) -> String {
    let s = if x.abs() >= 100.0 {
        let s = format!("{x:.1}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        crate::expect::words::trim(x)
    };
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A margin with its sign, `-0` for a failure exactly at its bound (an exclusive bound reached).
fn signed(m: f64) -> String {
    let sign = if m.is_sign_negative() { '-' } else { '+' };
    format!("{sign}{}", number(m.abs()))
}

/// A share with its sign: whole percents from 10% on, one decimal below.
fn signed_percent(share: f64) -> String {
    let p = share * 100.0;
    let sign = if p.is_sign_negative() { '-' } else { '+' };
    if p.abs() >= 10.0 {
        format!("{sign}{:.0}%", p.abs())
    } else {
        format!("{sign}{:.1}%", p.abs())
    }
}

/// `|bound - measured|`, positive when the expectation held and negative when it failed; `None` for an
/// inconclusive verdict or a missing (or infinite) figure. The distance is the same whichever side of the bound
/// passes, which is why the outcome, not the order of the two, gives the sign.
pub fn margin(outcome: Outcome, measured: Option<f64>, bound: Option<f64>) -> Option<f64> {
    let (m, b) = (measured?, bound?);
    if !m.is_finite() || !b.is_finite() {
        return None;
    }
    let distance = (b - m).abs();
    match outcome {
        Outcome::Pass => Some(distance),
        Outcome::Fail => Some(-distance),
        Outcome::Inconclusive => None,
    }
}

/// The key of a verdict's column: its id, else its name.
fn key(v: &Verdict) -> String {
    v.id.clone().unwrap_or_else(|| v.name.clone())
}

impl SweepTable {
    /// A table of no runs yet.
    pub fn new(
        scenario: String,
        file: String,
        time_scale: f64,
        seed: Option<u64>,
        parameters: Vec<Parameter>,
        planned: usize,
    ) -> SweepTable {
        SweepTable {
            version: SWEEP_VERSION,
            scenario,
            file,
            time_scale,
            seed,
            parameters,
            planned,
            expectations: Vec::new(),
            runs: Vec::new(),
            interrupted: false,
        }
    }

    /// Adds the run of `combination` that ended with `exit_code` and left `result` in `report`; a new expectation
    /// becomes a new column.
    pub fn add(
        &mut self,
        combination: &Combination,
        exit_code: i32,
        report: &std::path::Path,
        result: &ResultFile,
    ) {
        for v in &result.verdicts {
            let key = key(v);
            if !self.expectations.iter().any(|c| c.key == key) {
                self.expectations.push(Column {
                    key,
                    name: v.name.clone(),
                });
            }
        }
        self.runs.push(Row {
            label: combination.label(),
            combination: combination.0.clone(),
            status: Status::of(exit_code),
            exit_code,
            report: Some(report.display().to_string()),
            cells: result
                .verdicts
                .iter()
                .map(|v| Cell::of(key(v), v))
                .collect(),
            run_errors: result.run_errors.clone(),
        });
    }

    /// Adds the run of `combination` that broke before it left a report, with the exit code it gave.
    pub fn add_broken(&mut self, combination: &Combination, exit_code: i32) {
        self.runs.push(Row {
            label: combination.label(),
            combination: combination.0.clone(),
            status: Status::Broke,
            exit_code,
            report: None,
            cells: Vec::new(),
            run_errors: Vec::new(),
        });
    }

    /// The rows whose every expectation held.
    pub fn passing(&self) -> impl Iterator<Item = &Row> {
        self.runs.iter().filter(|r| r.status == Status::Passed)
    }

    /// The sweep's exit code: 130 a signal stopped it, 3 a run broke, 0 at least one combination passed every
    /// expectation, 1 none did.
    pub fn exit_code(&self) -> i32 {
        if self.interrupted || self.runs.iter().any(|r| r.status == Status::Interrupted) {
            130
        } else if self.runs.iter().any(|r| r.status == Status::Broke) {
            3
        } else if self.passing().next().is_some() {
            0
        } else {
            1
        }
    }
}

impl Row {
    /// The cell of the column `key`, if the run judged that expectation.
    pub fn cell(&self, key: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| c.expectation == key)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A verdict as the judging gives it.
    pub fn verdict(
        id: &str,
        outcome: Outcome,
        measured: Option<f64>,
        bound: Option<f64>,
    ) -> Verdict {
        let mut v = Verdict::with_outcome(
            format!("{id} as a name"),
            outcome,
            format!("{id} measured {measured:?} against {bound:?}"),
            measured,
            bound,
        );
        v.id = Some(id.to_string());
        v
    }

    /// A result that holds `verdicts`.
    pub fn result(verdicts: Vec<Verdict>) -> ResultFile {
        let mut r = crate::report::markdown::tests::result();
        r.verdicts = verdicts;
        r
    }

    pub fn combination(label: &str) -> Combination {
        let (name, value) = label.split_once('=').unwrap();
        Combination(vec![Setting {
            name: name.into(),
            value: value.into(),
        }])
    }

    /// The slow-dependency sweep as it reads: 250ms holds everything, 5s fills the pool.
    pub fn two_runs() -> SweepTable {
        let mut t = SweepTable::new(
            "slow-dependency".into(),
            "scenarios/slow-dependency.yaml".into(),
            0.5,
            Some(7),
            vec![Parameter {
                name: "timeout".into(),
                reaches: "sut.demo.operations.pricing.timeout".into(),
                values: vec!["250ms".into(), "5s".into()],
            }],
            2,
        );
        t.add(
            &combination("timeout=250ms"),
            0,
            std::path::Path::new("sweep/01-timeout=250ms"),
            &result(vec![
                verdict("opens-fast", Outcome::Pass, Some(2.6), Some(3.0)),
                verdict("pool", Outcome::Pass, Some(125.0), Some(200.0)),
            ]),
        );
        t.add(
            &combination("timeout=5s"),
            1,
            std::path::Path::new("sweep/02-timeout=5s"),
            &result(vec![
                verdict("opens-fast", Outcome::Inconclusive, None, Some(3.0)),
                verdict("pool", Outcome::Fail, Some(200.0), Some(200.0)),
            ]),
        );
        t
    }

    #[test]
    fn a_margin_is_the_room_left_when_it_passed_and_the_shortfall_when_it_failed() {
        // An upper bound: 125 in flight below 200 leaves 75; 230 misses by 30.
        assert_eq!(margin(Outcome::Pass, Some(125.0), Some(200.0)), Some(75.0));
        assert_eq!(margin(Outcome::Fail, Some(230.0), Some(200.0)), Some(-30.0));
        // A lower bound: a 70% fallback share over 50% leaves 0.2.
        let room = margin(Outcome::Pass, Some(0.7), Some(0.5)).unwrap();
        assert!((room - 0.2).abs() < 1e-12);
        assert_eq!(margin(Outcome::Inconclusive, Some(1.0), Some(2.0)), None);
        assert_eq!(margin(Outcome::Fail, None, Some(2.0)), None);
        assert_eq!(margin(Outcome::Pass, Some(f64::INFINITY), Some(2.0)), None);
        let cell = Cell::of(
            "pool".into(),
            &verdict("pool", Outcome::Pass, Some(125.0), Some(200.0)),
        );
        assert_eq!(cell.relative_margin, Some(0.375));
        let zero = Cell::of(
            "x".into(),
            &verdict("x", Outcome::Pass, Some(0.0), Some(0.0)),
        );
        assert_eq!((zero.margin, zero.relative_margin), (Some(0.0), None));
    }

    #[test]
    fn a_cell_reads_as_its_outcome_with_the_margin_absolute_and_relative() {
        let t = two_runs();
        let words = |row: usize, key: &str| t.runs[row].cell(key).unwrap().words();
        assert_eq!(words(0, "pool"), "PASS +75 (+38%)");
        assert_eq!(words(0, "opens-fast"), "PASS +0.4 (+13%)");
        assert_eq!(words(1, "pool"), "FAIL -0 (-0.0%)");
        assert_eq!(words(1, "opens-fast"), "INCONCLUSIVE");
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(1234.56), "1234.6");
        assert_eq!(number(-0.0001), "0");
    }

    #[test]
    fn the_exit_code_is_0_when_a_combination_passed_1_when_none_3_when_a_run_broke_130_when_stopped(
    ) {
        let mut t = two_runs();
        assert_eq!(t.exit_code(), 0);
        t.runs.remove(0);
        assert_eq!(t.exit_code(), 1);
        t.add_broken(&combination("timeout=1s"), 3);
        assert_eq!(t.exit_code(), 3);
        t.interrupted = true;
        assert_eq!(t.exit_code(), 130);
    }

    #[test]
    fn columns_are_the_expectations_by_id_and_rows_the_runs_in_order() {
        let t = two_runs();
        let keys: Vec<&str> = t.expectations.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["opens-fast", "pool"]);
        let statuses: Vec<Status> = t.runs.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [Status::Passed, Status::Failed]);
        assert_eq!(t.runs[1].cell("pool").unwrap().margin, Some(-0.0));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["runs"][1]["cells"][1]["outcome"], "fail");
        assert_eq!(json["runs"][0]["status"], "passed");
        assert_eq!(json["runs"][0]["combination"][0]["value"], "250ms");
        let back: SweepTable = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
    }
}
