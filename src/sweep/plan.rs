//! A sweep planned before anything runs: the scenario loaded as written, where the parameters reach its SUT, and
//! every combination loaded with its values, so that a value the scenario refuses (`timeout=fast`), a name the SUT
//! never reads or a patch that would change which operations the demo calls is a usage error (exit 2) before the
//! first run, not a surprise in the seventh.
//!
//! Not for running the plan (the `sweep` command does) nor for the table of results (`table`).

use std::path::Path;
use std::time::Duration;

use super::table::{Parameter, SweepTable};
use super::target::Target;
use super::vary::{combinations, Combination, Vary};
use super::SweepError;
use crate::scenario::{Overrides, Scenario, Validated};

/// Every run of a sweep, each scenario loaded with its combination's values.
#[derive(Debug)]
pub struct Plan {
    /// The scenario as written (with the sweep's seed and time scale), for its name and seed.
    pub base: Validated,
    /// Where the parameters reach the SUT.
    pub target: Target,
    /// What was varied, in the order of the `--vary` options.
    pub parameters: Vec<Parameter>,
    /// Each run in order: its combination and its scenario.
    pub runs: Vec<(Combination, Validated)>,
}

impl Plan {
    /// Loads the scenario at `path` with `base` (seed, time scale), resolves where `varies` reach its SUT, and loads
    /// it again with each combination's values.
    pub fn new(path: &Path, varies: &[Vary], base: &Overrides) -> Result<Plan, SweepError> {
        let scenario = |overrides: &Overrides| Scenario::load(path, overrides);
        let all = combinations(varies)?;
        // Loaded as the first run of a command SUT would be, whose placeholders need the parameters' values: only
        // then is it known whether the SUT is the demo, which ignores them.
        let first = all
            .first()
            .map_or_else(|| base.clone(), |c| Target::Placeholders.overrides(base, c));
        let loaded = scenario(&first).map_err(|e| SweepError::Scenario(Box::new(e)))?;
        let target = Target::resolve(&loaded.scenario.sut, varies)?;
        let mut runs = Vec::with_capacity(all.len());
        for combination in all {
            let v = scenario(&target.overrides(base, &combination))
                .map_err(|e| refused(&target, &combination, e))?;
            same_operations(&loaded, &v, &target)?;
            runs.push((combination, v));
        }
        let parameters = varies
            .iter()
            .map(|v| Parameter {
                name: v.name.clone(),
                reaches: target.reaches(&v.name),
                values: v.values.clone(),
            })
            .collect();
        Ok(Plan {
            base: loaded,
            target,
            parameters,
            runs,
        })
    }

    /// The load's length of every run together (each run also takes its SUT's start and the last requests'
    /// wait): the real time the sweep takes at least, time scale included.
    pub fn load_time(&self) -> Duration {
        self.runs
            .iter()
            .map(|(_, v)| v.scenario.duration.get())
            .sum()
    }

    /// The table of no runs yet, `time_scale` the one every run has.
    pub fn table(&self, time_scale: f64) -> SweepTable {
        SweepTable::new(
            self.base.scenario.name.clone(),
            self.base.file.clone(),
            time_scale,
            self.base.scenario.seed,
            self.parameters.clone(),
            self.runs.len(),
        )
    }
}

/// Why the scenario refuses a combination. A demo's values were merged into the file's text, whose line numbers
/// the error would give: it names the field instead. A command SUT's file is read as written, lines and all.
fn refused(
    target: &Target,
    combination: &Combination,
    e: crate::scenario::ScenarioError,
) -> SweepError {
    match target {
        Target::Placeholders => SweepError::Scenario(Box::new(e)),
        Target::Demo(_) => SweepError::Refused {
            label: combination.label(),
            message: e
                .entries()
                .iter()
                .map(|entry| {
                    let message = entry["message"].as_str().unwrap_or_default();
                    match entry["field"].as_str() {
                        Some(field) => format!("{field}: {message}"),
                        None => message.to_string(),
                    }
                })
                .collect::<Vec<_>>()
                .join("; "),
        },
    }
}

/// A demo whose operations the scenario leaves out calls all of them; a patch naming one would leave only that
/// one. Refused rather than run as a different scenario.
fn same_operations(
    base: &Validated,
    patched: &Validated,
    target: &Target,
) -> Result<(), SweepError> {
    let called = |v: &Validated| -> Vec<String> {
        v.scenario
            .sut
            .demo
            .iter()
            .flat_map(|d| {
                d.operations
                    .configured()
                    .map(|(op, _)| op.key().to_string())
            })
            .collect()
    };
    let (before, after) = (called(base), called(patched));
    match target {
        Target::Demo(fields) if before != after => {
            let f = fields.first();
            Err(SweepError::OperationsNotListed {
                name: f.map(|f| f.name.clone()).unwrap_or_default(),
                operation: f.map(|f| f.operation.clone()).unwrap_or_default(),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;

    /// A command SUT reading `{param.timeout.ms}` and `{param.mode}`.
    const COMMAND: &str = r#"
name: params
duration: 2s
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 5ms } }
sut:
  command: [ ./svc, "--timeout-ms={param.timeout.ms}" ]
  env: { MODE: "{param.mode}" }
  url: http://127.0.0.1:{sut.port}
load: { rate: 10/s, requests: [ { get: "/x" } ] }
"#;

    fn with_params(pairs: &[(&str, &str)]) -> Overrides {
        Overrides {
            params: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            time_scale: Some(0.5),
            ..Overrides::default()
        }
    }

    fn refusal(text: &str, o: &Overrides) -> String {
        Scenario::parse(text, "params.yaml", o)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_command_sut_gets_its_parameters_and_the_time_scale_they_follow() {
        let v = Scenario::parse(
            COMMAND,
            "params.yaml",
            &with_params(&[("timeout", "250ms"), ("mode", "eager")]),
        )
        .unwrap();
        assert_eq!(
            v.scenario.sut.params.get("mode").map(String::as_str),
            Some("eager")
        );
        assert_eq!(v.scenario.sut.time_scale, Some(0.5));
    }

    #[test]
    fn a_parameter_outside_a_sweep_unvaried_unread_or_not_a_duration_is_refused() {
        let outside = refusal(COMMAND, &Overrides::default());
        assert!(
            outside.contains("{param.timeout.ms} is a parameter of `faultline sweep`"),
            "{outside}"
        );
        let unvaried = refusal(COMMAND, &with_params(&[("timeout", "1s")]));
        assert!(
            unvaried
                .contains("{param.mode} names no parameter of this sweep; --vary gives timeout"),
            "{unvaried}"
        );
        let unread = refusal(
            COMMAND,
            &with_params(&[("timeout", "1s"), ("mode", "a"), ("retries", "2")]),
        );
        assert!(
            unread.contains("--vary retries: the SUT never reads this parameter"),
            "{unread}"
        );
        let no_duration = refusal(COMMAND, &with_params(&[("timeout", "soon"), ("mode", "a")]));
        assert!(
            no_duration
                .contains("{param.timeout.ms} scales a duration, and timeout=soon is not one"),
            "{no_duration}"
        );
    }

    fn scratch(name: &str, text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("faultline-sweep-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scenario.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn varies(given: &[&str]) -> Vec<Vary> {
        given.iter().map(|g| g.parse().unwrap()).collect()
    }

    #[test]
    fn each_demo_combination_is_loaded_with_its_value_time_scaled() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/slow-dependency.yaml");
        let base = Overrides {
            time_scale: Some(0.5),
            ..Overrides::default()
        };
        let plan = Plan::new(&path, &varies(&["timeout=250ms,5s"]), &base).unwrap();
        let timeouts: Vec<Duration> = plan
            .runs
            .iter()
            .map(|(_, v)| {
                let demo = v.scenario.sut.demo.as_ref().unwrap();
                demo.operations
                    .get(demo::Operation::Pricing)
                    .unwrap()
                    .timeout
                    .get()
            })
            .collect();
        assert_eq!(
            timeouts,
            [Duration::from_millis(125), Duration::from_millis(2500)]
        );
        assert_eq!(plan.load_time(), Duration::from_secs(90));
        assert_eq!(
            plan.parameters[0].reaches,
            "sut.demo.operations.pricing.timeout"
        );
        let fallbacks = Plan::new(
            &path,
            &varies(&["fallback=stale,{ unavailable: { retry_after: 5s } }"]),
            &base,
        )
        .unwrap();
        assert_eq!(fallbacks.runs.len(), 2);
        let e = Plan::new(&path, &varies(&["timeout=250ms,fast"]), &base).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "the combination timeout=fast is refused: sut.demo.operations.pricing.timeout: "
            ),
            "{e}"
        );
    }

    #[test]
    fn a_patch_that_would_leave_the_demo_fewer_operations_than_it_calls_is_refused() {
        let all = COMMAND.replace(
            "  command: [ ./svc, \"--timeout-ms={param.timeout.ms}\" ]\n  env: { MODE: \"{param.mode}\" }\n  url: http://127.0.0.1:{sut.port}\n",
            "  demo: {}\n",
        );
        let path = scratch("all-operations", &all);
        let e = Plan::new(
            &path,
            &varies(&["pricing.timeout=1s"]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(matches!(e, SweepError::OperationsNotListed { .. }), "{e}");
        let e = Plan::new(&path, &varies(&["timeout=1s"]), &Overrides::default()).unwrap_err();
        assert!(matches!(e, SweepError::WhichOperation { .. }), "{e}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
