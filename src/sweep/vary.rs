//! `--vary NAME=V1,V2,...` and the combinations a sweep runs: each option read into a [`Vary`], and their
//! cartesian product, bounded, in the order the options were given.
//!
//! Not for what a name means to the SUT (`target`) nor for checking a value (loading the scenario with it does).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::SweepError;

/// The most runs one sweep may plan, confirmed or not: past it the product of a few long lists would keep a machine
/// busy for days.
pub const MAX_RUNS: usize = 1000;

/// One `--vary NAME=V1,V2,...`: a parameter and the values it takes, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vary {
    /// The parameter's name as written: `timeout`, `pricing.open_for`, `retries.max`, or any name a command SUT
    /// reads as `{param.NAME}`.
    pub name: String,
    /// Its values as written, each at least one character.
    pub values: Vec<String>,
}

impl FromStr for Vary {
    type Err = SweepError;

    /// Reads `NAME=V1,V2,...`. Commas inside brackets, braces or quotes belong to their value, so that a YAML
    /// value such as `{ unavailable: { retry_after: 5s } }` can be one.
    fn from_str(given: &str) -> Result<Vary, SweepError> {
        let syntax = || SweepError::Syntax {
            given: given.to_string(),
        };
        let (name, values) = given.split_once('=').ok_or_else(syntax)?;
        let name = name.trim();
        let well_named = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        if name.is_empty() || !name.chars().all(well_named) {
            return Err(syntax());
        }
        let values = split_values(values);
        if values.iter().any(String::is_empty) {
            return Err(SweepError::EmptyValue {
                name: name.to_string(),
            });
        }
        if let Some(twice) = values
            .iter()
            .enumerate()
            .find(|(i, v)| values[..*i].contains(v))
        {
            return Err(SweepError::SameValueTwice {
                name: name.to_string(),
                value: twice.1.clone(),
            });
        }
        Ok(Vary {
            name: name.to_string(),
            values,
        })
    }
}

/// `text` split at the commas that stand outside brackets, braces and quotes, each value trimmed.
fn split_values(text: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                values.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    values.push(current.trim().to_string());
    values
}

/// One setting of a combination: a parameter and the value it takes in this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The parameter, as `--vary` named it.
    pub name: String,
    /// Its value, as written.
    pub value: String,
}

/// One run of a sweep: a value for each varied parameter, in the order of the `--vary` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combination(pub Vec<Setting>);

impl Combination {
    /// `timeout=250ms open_for=5s`: how tables name the run.
    pub fn label(&self) -> String {
        self.0
            .iter()
            .map(|s| format!("{}={}", s.name, s.value))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The run's folder in the sweep's: its place in the sweep (which keeps folders apart and in order) and its
    /// label, with anything a file name should not hold written as `_`: `02-timeout=250ms,open_for=5s`.
    pub fn folder(&self, index: usize) -> String {
        let label: String = self
            .0
            .iter()
            .map(|s| format!("{}={}", s.name, s.value))
            .collect::<Vec<_>>()
            .join(",")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.=,-%".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect();
        format!("{:02}-{label}", index + 1)
    }
}

/// Every combination of the values of `varies`, the first option's values changing slowest: `a=1,2 b=x,y` gives
/// `a=1 b=x`, `a=1 b=y`, `a=2 b=x`, `a=2 b=y`. A parameter varied twice, or more than [`MAX_RUNS`] combinations,
/// is refused.
pub fn combinations(varies: &[Vary]) -> Result<Vec<Combination>, SweepError> {
    if varies.is_empty() {
        return Err(SweepError::NothingVaried);
    }
    for (i, v) in varies.iter().enumerate() {
        if varies[..i].iter().any(|w| w.name == v.name) {
            return Err(SweepError::VariedTwice {
                name: v.name.clone(),
            });
        }
    }
    let runs = varies
        .iter()
        .try_fold(1usize, |n, v| n.checked_mul(v.values.len()))
        .filter(|n| *n <= MAX_RUNS)
        .ok_or_else(|| SweepError::TooManyRuns {
            lists: varies
                .iter()
                .map(|v| v.values.len().to_string())
                .collect::<Vec<_>>()
                .join(" x "),
        })?;
    let mut all = vec![Combination(Vec::new())];
    for v in varies {
        all = all
            .into_iter()
            .flat_map(|c| {
                v.values.iter().map(move |value| {
                    let mut settings = c.0.clone();
                    settings.push(Setting {
                        name: v.name.clone(),
                        value: value.clone(),
                    });
                    Combination(settings)
                })
            })
            .collect();
    }
    debug_assert_eq!(all.len(), runs);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vary(s: &str) -> Vary {
        s.parse().unwrap()
    }

    #[test]
    fn a_vary_option_is_a_name_and_its_values_in_the_order_given() {
        assert_eq!(
            vary("timeout=100ms, 250ms,1s"),
            Vary {
                name: "timeout".into(),
                values: vec!["100ms".into(), "250ms".into(), "1s".into()]
            }
        );
        assert_eq!(vary("pricing.open_for=5s").values, vec!["5s"]);
    }

    #[test]
    fn commas_inside_braces_brackets_and_quotes_belong_to_their_value() {
        assert_eq!(
            vary("fallback=stale,{ unavailable: { retry_after: 5s } },'a,b',[1, 2]").values,
            vec![
                "stale",
                "{ unavailable: { retry_after: 5s } }",
                "'a,b'",
                "[1, 2]"
            ]
        );
    }

    #[test]
    fn a_vary_option_without_a_name_or_with_an_empty_or_repeated_value_is_refused() {
        for wrong in ["timeout", "=1s", "time out=1s", "a/b=1"] {
            assert!(
                matches!(wrong.parse::<Vary>(), Err(SweepError::Syntax { .. })),
                "{wrong}"
            );
        }
        assert!(matches!(
            "timeout=1s,,2s".parse::<Vary>(),
            Err(SweepError::EmptyValue { .. })
        ));
        assert!(matches!(
            "timeout=".parse::<Vary>(),
            Err(SweepError::EmptyValue { .. })
        ));
        assert!(matches!(
            "timeout=1s,2s,1s".parse::<Vary>(),
            Err(SweepError::SameValueTwice { value, .. }) if value == "1s"
        ));
    }

    #[test]
    fn combinations_are_the_product_with_the_first_option_changing_slowest() {
        let all = combinations(&[vary("a=1,2"), vary("b=x,y,z")]).unwrap();
        let labels: Vec<String> = all.iter().map(Combination::label).collect();
        assert_eq!(
            labels,
            ["a=1 b=x", "a=1 b=y", "a=1 b=z", "a=2 b=x", "a=2 b=y", "a=2 b=z"]
        );
    }

    #[test]
    fn a_parameter_varied_twice_nothing_varied_or_too_many_runs_are_refused() {
        assert!(matches!(
            combinations(&[vary("a=1"), vary("a=2")]),
            Err(SweepError::VariedTwice { .. })
        ));
        assert!(matches!(combinations(&[]), Err(SweepError::NothingVaried)));
        let ten = |n: &str| vary(&format!("{n}=0,1,2,3,4,5,6,7,8,9"));
        assert_eq!(
            combinations(&[ten("a"), ten("b"), ten("c")]).unwrap().len(),
            MAX_RUNS
        );
        assert!(matches!(
            combinations(&[ten("a"), ten("b"), ten("c"), vary("d=1,2")]),
            Err(SweepError::TooManyRuns { lists }) if lists == "10 x 10 x 10 x 2"
        ));
        let huge: Vec<Vary> = (0..40).map(|i| ten(&format!("p{i}"))).collect();
        assert!(matches!(
            combinations(&huge),
            Err(SweepError::TooManyRuns { .. })
        ));
    }

    #[test]
    fn a_run_folder_holds_its_place_and_its_label_in_characters_a_file_name_can_hold() {
        let c = Combination(vec![
            Setting {
                name: "timeout".into(),
                value: "250ms".into(),
            },
            Setting {
                name: "fallback".into(),
                value: "{ unavailable: { retry_after: 5s } }".into(),
            },
        ]);
        assert_eq!(
            c.label(),
            "timeout=250ms fallback={ unavailable: { retry_after: 5s } }"
        );
        assert_eq!(
            c.folder(1),
            "02-timeout=250ms,fallback=__unavailable____retry_after__5s____"
        );
    }
}
