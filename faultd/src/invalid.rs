//! A validation failure: the dotted path of the field that is wrong and what is wrong with it.
//!
//! For: every layer that checks input (path patterns, behaviours, the configuration) reporting the field relative
//! to where it looked, so the layer above can prefix it and the configuration can add the file and line. Not for:
//! parse errors (the YAML and JSON parsers report those) or run-time failures.

/// A validation failure: the dotted path of the field (relative to where validation started)
/// and what is wrong with it. The config layer prefixes the path and adds the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Dotted path, e.g. `latency.p99` or `errors[1].status`.
    pub field: String,
    /// What is wrong, for a person.
    pub message: String,
}

impl Invalid {
    /// A failure of `field` (may be empty for "this very value").
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Invalid {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same failure seen from one level up: `at("latency")` turns `p99` into `latency.p99`.
    pub fn at(mut self, prefix: &str) -> Invalid {
        self.field = match (prefix.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => prefix.to_string(),
            (false, false) if self.field.starts_with('[') => format!("{prefix}{}", self.field),
            (false, false) => format!("{prefix}.{}", self.field),
        };
        self
    }
}

/// Checks that the shares of a list of faults, by field name (`None`: not set), add up to at most 100%; the error
/// names the fields that take one.
pub fn check_shares<'a>(
    shares: impl Iterator<Item = (&'a str, Option<f64>)> + Clone,
) -> Result<(), Invalid> {
    let total: f64 = shares.clone().filter_map(|(_, s)| s).sum();
    if total <= 1.0 + 1e-9 {
        return Ok(());
    }
    let names: Vec<&str> = shares
        .filter(|(_, s)| s.is_some())
        .map(|(n, _)| n)
        .collect();
    Err(Invalid::new(
        "",
        format!(
            "the shares of {} add up to {}%, over 100%",
            names.join(", "),
            (total * 1e4).round() / 1e2
        ),
    ))
}
