//! Where a sweep's parameters reach the SUT. For the bundled demo each is one field of one operation's config
//! (`sut.demo.operations.OP.FIELD`), merged into the scenario as a patch before it is read, so that a value is
//! checked and time-scaled exactly as if the file said it; the fields a sweep knows are the ones the demo's own
//! `OperationOverrides` declares, read from its JSON Schema. For a command or URL SUT each is a `{param.NAME}`
//! placeholder, whatever its name (the scenario's validation refuses a name the SUT never reads).
//!
//! Not for checking values (loading the scenario with them does) nor for running.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::vary::{Combination, Vary};
use super::SweepError;
use crate::scenario::{merge, Overrides, SutSpec};

/// How a sweep's parameters reach its SUT.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The bundled demo: each parameter one field of one operation's config, in the order of the `--vary` options.
    Demo(Vec<DemoField>),
    /// A command or URL SUT: each parameter the placeholder `{param.NAME}`.
    Placeholders,
}

/// A parameter that sets one field of one of the demo's operations.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoField {
    /// The parameter as `--vary` named it: `timeout`, `pricing.open_for`.
    pub name: String,
    /// The operation's key: `pricing`, `account-read`.
    pub operation: String,
    /// The field's path in the operation's config: `["breaker", "open_for"]`.
    pub path: Vec<String>,
}

impl Target {
    /// How the parameters of `varies` reach `sut`: the demo's fields, each name resolved (`[OP.]FIELD`, the
    /// operation the only one the scenario's demo calls when left out), or placeholders for any other SUT.
    pub fn resolve(sut: &SutSpec, varies: &[Vary]) -> Result<Target, SweepError> {
        let Some(demo) = &sut.demo else {
            return Ok(Target::Placeholders);
        };
        let called: Vec<String> = demo
            .operations
            .configured()
            .map(|(op, _)| op.key().to_string())
            .collect();
        let fields = demo_fields();
        varies
            .iter()
            .map(|v| DemoField::resolve(&v.name, &fields, &called))
            .collect::<Result<_, _>>()
            .map(Target::Demo)
    }

    /// Where parameter `name` reaches the SUT, for people: `sut.demo.operations.pricing.timeout`, or
    /// `{param.timeout}`.
    pub fn reaches(&self, name: &str) -> String {
        match self {
            Target::Demo(fields) => fields
                .iter()
                .find(|f| f.name == name)
                .map(DemoField::place)
                .unwrap_or_default(),
            Target::Placeholders => format!("{{param.{name}}}"),
        }
    }

    /// `base` with the combination's values: merged into the demo's operations as a patch, or given as
    /// `{param.NAME}` values.
    pub fn overrides(&self, base: &Overrides, combination: &Combination) -> Overrides {
        let mut overrides = base.clone();
        match self {
            Target::Demo(fields) => {
                let mut patch = Value::Object(Map::new());
                for setting in &combination.0 {
                    let Some(f) = fields.iter().find(|f| f.name == setting.name) else {
                        continue;
                    };
                    let path = ["sut", "demo", "operations", f.operation.as_str()]
                        .into_iter()
                        .chain(f.path.iter().map(String::as_str));
                    let one = path.rev().fold(yaml_value(&setting.value), |inner, key| {
                        Value::Object(Map::from_iter([(key.to_string(), inner)]))
                    });
                    merge(&mut patch, &one);
                }
                overrides.patch = Some(patch);
            }
            Target::Placeholders => {
                overrides.params = combination
                    .0
                    .iter()
                    .map(|s| (s.name.clone(), s.value.clone()))
                    .collect::<BTreeMap<_, _>>();
            }
        }
        overrides
    }
}

impl DemoField {
    /// Reads `[OP.]FIELD` against the demo's `fields` and the operations the scenario's demo `called`.
    fn resolve(name: &str, fields: &[String], called: &[String]) -> Result<DemoField, SweepError> {
        let (operation, field) = match field_path(name, fields) {
            Some(path) => (None, path),
            None => match name.split_once('.') {
                Some((op, rest)) if is_operation(op) => {
                    let path = field_path(rest, fields).ok_or_else(|| unknown(name, fields))?;
                    (Some(op), path)
                }
                _ => return Err(unknown(name, fields)),
            },
        };
        let operation = match (operation, called) {
            (Some(op), _) if called.iter().any(|c| c == op) => op.to_string(),
            (Some(op), _) => {
                return Err(SweepError::NotCalled {
                    name: name.to_string(),
                    operation: op.to_string(),
                    called: called.join(", "),
                })
            }
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(SweepError::WhichOperation {
                    name: name.to_string(),
                    called: called.join(", "),
                    example: format!(
                        "{}.{name}",
                        called.first().map_or("pricing", String::as_str)
                    ),
                })
            }
        };
        Ok(DemoField {
            name: name.to_string(),
            operation,
            path: field.split('.').map(String::from).collect(),
        })
    }

    /// `sut.demo.operations.pricing.breaker.open_for`.
    fn place(&self) -> String {
        format!(
            "sut.demo.operations.{}.{}",
            self.operation,
            self.path.join(".")
        )
    }
}

/// The field `given` names: a path of `fields` (`breaker.open_for`), or the last part of exactly one
/// (`open_for`).
fn field_path(given: &str, fields: &[String]) -> Option<String> {
    if fields.iter().any(|f| f == given) {
        return Some(given.to_string());
    }
    let mut ending = fields
        .iter()
        .filter(|f| f.rsplit('.').next() == Some(given));
    match (ending.next(), ending.next()) {
        (Some(one), None) => Some(one.clone()),
        _ => None,
    }
}

fn is_operation(key: &str) -> bool {
    demo::Operation::ALL.iter().any(|op| op.key() == key)
}

/// An unknown field, or the last part of several (`min_calls`: the breaker's and outlier ejection's).
fn unknown(name: &str, fields: &[String]) -> SweepError {
    let last = name.rsplit('.').next().unwrap_or(name);
    let candidates: Vec<&str> = fields
        .iter()
        .filter(|f| f.rsplit('.').next() == Some(last))
        .map(String::as_str)
        .collect();
    if candidates.len() > 1 {
        return SweepError::AmbiguousField {
            name: name.to_string(),
            last: last.to_string(),
            candidates: candidates.join(", "),
        };
    }
    SweepError::UnknownField {
        name: name.to_string(),
        fields: fields.join(", "),
    }
}

/// A value as YAML reads it (`200` a number, `250ms` a string, `{ unavailable: ... }` a mapping), so that the
/// patched scenario holds what the file would; text YAML cannot read stays text.
fn yaml_value(text: &str) -> Value {
    serde_saphyr::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The fields of an operation's config that a sweep can vary, as dotted paths (`timeout`, `breaker.open_for`,
/// `retries.max`), from the JSON Schema of the demo's `OperationOverrides`: a field whose schema is an object of
/// named fields (the breaker, the retries) is a group of fields, anything else (a duration, a count, the fallback)
/// is one field. A field the demo adds is sweepable without a change here.
pub fn demo_fields() -> Vec<String> {
    let schema = schemars::schema_for!(demo::config::OperationOverrides);
    let root = schema.as_value();
    let mut out = Vec::new();
    fields_of(root, &root["$defs"], "", &mut out);
    out
}

fn fields_of(schema: &Value, defs: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    for (name, field) in properties {
        let path = format!("{prefix}{name}");
        match group(field, defs) {
            Some(inner) => fields_of(inner, defs, &format!("{path}."), out),
            None => out.push(path),
        }
    }
}

/// The schema of the group of fields behind `field` (a struct, optional or not); `None` for one value.
fn group<'a>(field: &'a Value, defs: &'a Value) -> Option<&'a Value> {
    let resolved = |s: &'a Value| -> &'a Value {
        s["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .map_or(s, |name| &defs[name])
    };
    let choices: Vec<&Value> = match field["anyOf"].as_array() {
        Some(any) => any.iter().filter(|s| s["type"] != "null").collect(),
        None => vec![field],
    };
    match choices.as_slice() {
        [one] => Some(resolved(one)).filter(|s| s["properties"].is_object()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::vary::Setting;

    fn demo_sut(operations: &str) -> SutSpec {
        let demo = demo::DemoConfig::from_yaml(operations, "demo.yaml").unwrap();
        SutSpec {
            demo: Some(demo),
            ..SutSpec::default()
        }
    }

    fn vary(s: &str) -> Vary {
        s.parse().unwrap()
    }

    #[test]
    fn the_demo_fields_are_those_its_operation_overrides_declare() {
        let fields = demo_fields();
        for f in [
            "timeout",
            "pool",
            "fallback",
            "breaker.open_for",
            "breaker.failure_rate",
            "breaker.recovery_rate",
            "retries.max",
            "retries.budget",
        ] {
            assert!(fields.iter().any(|x| x == f), "{f} in {fields:?}");
        }
        assert!(
            !fields.iter().any(|x| x.contains("unavailable")),
            "{fields:?}"
        );
    }

    #[test]
    fn a_demo_parameter_names_a_field_of_the_only_operation_or_of_the_one_it_names() {
        let one = demo_sut("operations: { pricing: { timeout: 250ms } }");
        let t = Target::resolve(
            &one,
            &[
                vary("timeout=1s"),
                vary("open_for=5s"),
                vary("pricing.retries.max=2"),
            ],
        )
        .unwrap();
        let places: Vec<String> = ["timeout", "open_for", "pricing.retries.max"]
            .iter()
            .map(|n| t.reaches(n))
            .collect();
        assert_eq!(
            places,
            [
                "sut.demo.operations.pricing.timeout",
                "sut.demo.operations.pricing.breaker.open_for",
                "sut.demo.operations.pricing.retries.max"
            ]
        );
        let two = demo_sut("operations: { pricing: {}, account-read: {} }");
        let t = Target::resolve(&two, &[vary("account-read.breaker.window=5s")]).unwrap();
        assert_eq!(
            t.reaches("account-read.breaker.window"),
            "sut.demo.operations.account-read.breaker.window"
        );
    }

    #[test]
    fn an_unknown_field_an_uncalled_operation_or_an_unnamed_one_among_several_is_refused() {
        let one = demo_sut("operations: { pricing: {} }");
        let e = Target::resolve(&one, &[vary("tmeout=1s")]).unwrap_err();
        assert!(
            matches!(&e, SweepError::UnknownField { fields, .. } if fields.contains("breaker.open_for")),
            "{e}"
        );
        let e = Target::resolve(&one, &[vary("reviews.timeout=1s")]).unwrap_err();
        assert!(
            matches!(&e, SweepError::NotCalled { called, .. } if called == "pricing"),
            "{e}"
        );
        let all = demo_sut("{}");
        let e = Target::resolve(&all, &[vary("timeout=1s")]).unwrap_err();
        assert!(
            matches!(&e, SweepError::WhichOperation { called, example, .. } if called.contains("reviews") && example == "pricing.timeout"),
            "{e}"
        );
    }

    #[test]
    fn a_demo_combination_becomes_one_patch_of_typed_values_under_its_operation() {
        let one = demo_sut("operations: { pricing: {} }");
        let t = Target::resolve(
            &one,
            &[
                vary("timeout=1s"),
                vary("open_for=5s"),
                vary("pool=20"),
                vary("breaker.min_calls=10"),
            ],
        )
        .unwrap();
        // `min_calls` alone is the breaker's and outlier ejection's.
        let both = Target::resolve(&one, &[vary("min_calls=10")]).unwrap_err();
        assert!(
            both.to_string()
                .contains("`min_calls` ends several fields (breaker.min_calls, outlier.min_calls)"),
            "{both}"
        );
        let setting = |name: &str, value: &str| Setting {
            name: name.into(),
            value: value.into(),
        };
        let c = Combination(vec![
            setting("timeout", "250ms"),
            setting("open_for", "5s"),
            setting("pool", "20"),
            setting("breaker.min_calls", "10"),
        ]);
        let o = t.overrides(&Overrides::default(), &c);
        assert_eq!(
            o.patch,
            Some(
                serde_json::json!({ "sut": { "demo": { "operations": { "pricing": {
                "timeout": "250ms", "pool": 20, "breaker": { "open_for": "5s", "min_calls": 10 }
            } } } } })
            )
        );
        assert!(o.params.is_empty());
    }

    #[test]
    fn a_command_sut_gets_every_parameter_as_a_placeholder_value() {
        let command = SutSpec {
            command: Some(vec!["./svc".into()]),
            url: Some("http://127.0.0.1:{sut.port}".into()),
            ..SutSpec::default()
        };
        let t = Target::resolve(&command, &[vary("anything=1s")]).unwrap();
        assert_eq!(t, Target::Placeholders);
        assert_eq!(t.reaches("anything"), "{param.anything}");
        let c = Combination(vec![Setting {
            name: "anything".into(),
            value: "1s".into(),
        }]);
        let o = t.overrides(&Overrides::default(), &c);
        assert_eq!(o.params.get("anything").map(String::as_str), Some("1s"));
        assert!(o.patch.is_none());
    }
}
