//! `faultline sweep`'s plan and its results: the combinations of the varied parameters (`vary`), how each reaches
//! the SUT (`target`: a field of the demo's operation config, or a `{param.NAME}` placeholder of a command SUT),
//! every combination's scenario loaded before the first run (`plan`), and the table of which combination passed which expectation by how much (`table`), written for the terminal
//! (`text`), as sweep.md (`markdown`), sweep.json (the table serialised) and sweep.html (`html`).
//!
//! Not for running: the `sweep` command runs each combination through the run command, one after another, and
//! nothing here starts a process, reads a clock or hears a signal.

mod html;
mod markdown;
mod plan;
mod table;
mod target;
mod text;
mod vary;

use std::path::Path;

pub use html::page;
pub use markdown::markdown;
pub use plan::Plan;
pub use table::{margin, Cell, Column, Parameter, Row, Status, SweepTable, SWEEP_VERSION};
pub use target::{demo_fields, DemoField, Target};
pub use text::text;
pub use vary::{combinations, Combination, Setting, Vary, MAX_RUNS};

/// Why a sweep cannot be planned; each is a usage error (exit 2), found before anything runs.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("--vary {given}: write NAME=V1,V2,... (e.g. --vary timeout=100ms,250ms,1s); a name is letters, digits, `_`, `.` and `-`")]
    Syntax { given: String },
    #[error("--vary {name}: a value is empty")]
    EmptyValue { name: String },
    #[error("--vary {name}: the value {value} is given twice")]
    SameValueTwice { name: String, value: String },
    #[error("--vary {name} is given twice: give all of its values in one option")]
    VariedTwice { name: String },
    #[error("a sweep needs at least one --vary NAME=V1,V2,...")]
    NothingVaried,
    #[error("{lists} values make more than {MAX_RUNS} runs: sweep fewer values, or one parameter at a time")]
    TooManyRuns { lists: String },
    #[error("--vary {name}: the demo's operations have no field `{name}`; vary one of: {fields} (as FIELD, OPERATION.FIELD, or the last part of a field's name, e.g. open_for)")]
    UnknownField { name: String, fields: String },
    #[error(
        "--vary {name}: `{last}` ends several fields ({candidates}); name the one to vary in full"
    )]
    AmbiguousField {
        name: String,
        last: String,
        candidates: String,
    },
    #[error("--vary {name}: the scenario's demo does not call `{operation}`; it calls {called}")]
    NotCalled {
        name: String,
        operation: String,
        called: String,
    },
    #[error("--vary {name}: the scenario's demo calls several operations ({called}); name the one to vary, e.g. --vary {example}=...")]
    WhichOperation {
        name: String,
        called: String,
        example: String,
    },
    #[error("the combination {label} is refused: {message}")]
    Refused { label: String, message: String },
    #[error("{0}")]
    Scenario(Box<crate::scenario::ScenarioError>),
    #[error("--vary {name}: the scenario does not list the demo's operations (it calls all of them by default), and a patch would leave only `{operation}`; list them under `sut.demo.operations`")]
    OperationsNotListed { name: String, operation: String },
}

/// Writes sweep.md, sweep.json and sweep.html into `dir` from the table as it stands.
pub fn write(dir: &Path, t: &SweepTable) -> Result<(), crate::report::ReportError> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|source| crate::report::ReportError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| crate::report::ReportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write("sweep.md", &markdown(t))?;
    write(
        "sweep.json",
        &serde_json::to_string_pretty(t).unwrap_or_default(),
    )?;
    write("sweep.html", &page(t))
}
