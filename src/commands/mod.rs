//! The runner's commands, one file each: what `faultline run`, `prove`, `sweep`, `validate`, `schema`, `report`,
//! `compare`, `list`, `import`, `init`, `size`, `k8s`, `completions` and `man` do once their arguments are parsed. Each returns the process exit code, so that it can
//! be tested without a process: 0 every expectation held (or the command did its job), 1 an expectation failed, 2 the
//! scenario or the command was wrong, 3 the run itself broke, 4 nothing failed but an expectation could not be judged
//! (inconclusive), 130 interrupted.
//!
//! Not for parsing arguments: the `faultline` binary owns the command line and calls these.

mod agent;
mod compare;
mod import;
mod init;
mod k8s;
mod list;
mod prove;
mod report;
mod run;
mod schema;
mod shell;
mod size;
mod sweep;
mod validate;
mod written;

pub use agent::agent;
pub use compare::compare;
pub use import::import;
pub use init::{init, InitOptions};
pub use k8s::{k8s, MANIFESTS_FILE};
pub use list::list;
pub use prove::prove;
pub use report::{report, Format};
pub use run::{run_command, Exports, INCONCLUSIVE};
pub use schema::schema;
pub use shell::{completions, man, Shell};
pub use size::{size, SizeOptions};
pub use sweep::{sweep, SweepOptions, CONFIRM_ABOVE};
pub use validate::validate;
