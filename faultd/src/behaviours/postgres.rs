//! PostgreSQL statement faults: entries of a TCP route speaking `protocol: postgres` that strike single
//! statements (a simple query, or an extended-protocol Execute with the text its Parse gave).
//!
//! For: the `postgres:` list of such a route and of a phase that names it, `{ name, match: { statement: REGEX },
//! share | every | calls | first, per, error: { sqlstate, message } | delay: 200ms | terminate: true }`, and its
//! checks. A phase's list replaces the route's; `[]` clears it. Not for: carrying the fault out (see
//! `crate::tcp::protocol::postgres`) or HTTP routes (validation refuses the field there).

use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Fault, Invalid, Per};

/// One entry: which statements it takes and what they get.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresFault {
    /// The entry's name in the recording; `postgres[i]` (its place in the list) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The statements it may take; every statement when absent.
    #[serde(rename = "match", default)]
    pub conditions: StatementMatch,
    /// Takes this share of the matching statements, drawn from the seed per statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// Takes every Nth matching statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Takes the matching statements with these numbers, counted from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<u64>>,
    /// Takes the first N matching statements of each connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    /// What `every` and `calls` count: `route` (the default) or `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<Per>,
    /// Answer the statement with this error instead of running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<PostgresError>,
    /// Hold the statement's reply this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Dur>,
    /// Close the connection instead of answering (the client sees it lost mid-query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
}

/// The conditions on a statement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatementMatch {
    /// A regular expression the statement's text must match (`^UPDATE accounts`); `(?i)` for any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// The error a taken statement gets: an ErrorResponse of severity ERROR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresError {
    /// The SQLSTATE: five digits or capital letters (`40001`, `40P01`, `57014`).
    pub sqlstate: String,
    /// The message.
    #[serde(default = "default_message")]
    pub message: String,
}

fn default_message() -> String {
    "injected by faultd".into()
}

/// What a taken statement gets, one variant per choice.
#[derive(Debug, Clone, PartialEq)]
pub enum StatementFault {
    /// An ErrorResponse in place of the answer.
    Error(PostgresError),
    /// The answer held this long.
    Delay(std::time::Duration),
    /// The connection closed.
    Terminate,
}

impl PostgresFault {
    /// The fault, assuming a validated entry.
    pub fn fault(&self) -> StatementFault {
        match (&self.error, self.delay, self.terminate) {
            (Some(e), _, _) => StatementFault::Error(e.clone()),
            (None, Some(d), _) => StatementFault::Delay(d.get()),
            _ => StatementFault::Terminate,
        }
    }

    /// The entry's name in the recording.
    pub fn label(&self, i: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("postgres[{i}]"))
    }

    /// Its trigger fields, checked and compiled as every wire's entries are.
    pub(crate) fn trigger_fields(&self) -> super::matched::TriggerFields<'_> {
        super::matched::TriggerFields {
            share: Some(self.share.is_some()),
            every: self.every,
            calls: self.calls.as_deref(),
            first: self.first,
            per: self.per,
        }
    }
}

impl Fault for PostgresFault {
    fn validate(&self) -> Result<(), Invalid> {
        if self.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(Invalid::new("name", "a name cannot be empty"));
        }
        if let Some(re) = &self.conditions.statement {
            check_len("match.statement", re)?;
            regex::Regex::new(re)
                .map_err(|e| Invalid::new("match.statement", format!("not a regular expression: {e}")))?;
        }
        self.trigger_fields().check("statement")?;
        let effects: Vec<&str> = [
            ("error", self.error.is_some()),
            ("delay", self.delay.is_some()),
            ("terminate", self.terminate == Some(true)),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect();
        match effects[..] {
            [] => {
                return Err(Invalid::new(
                    "error",
                    "give what a taken statement gets: error: { sqlstate, message }, delay: 200ms or terminate: true",
                ))
            }
            [_] => {}
            [a, b, ..] => {
                return Err(Invalid::new(b, format!("give one of error, delay or terminate, not both {a} and {b}")))
            }
        }
        if let Some(e) = &self.error {
            let ok = e.sqlstate.len() == 5
                && e.sqlstate.bytes().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
            if !ok {
                return Err(Invalid::new(
                    "error.sqlstate",
                    format!("{:?} is not a SQLSTATE (five digits or capital letters, such as 40001)", e.sqlstate),
                ));
            }
            check_len("error.message", &e.message)?;
            if e.message.contains('\0') {
                return Err(Invalid::new("error.message", "a message cannot hold a NUL byte"));
            }
        }
        Ok(())
    }

    fn scale_time(&mut self, factor: f64) {
        if let Some(d) = &mut self.delay {
            *d = d.scaled(factor);
        }
    }
}

/// The longest pattern or message an entry may hold.
const MAX_TEXT: usize = 4096;

fn check_len(field: &str, text: &str) -> Result<(), Invalid> {
    if text.len() > MAX_TEXT {
        return Err(Invalid::new(field, format!("{} bytes, over the limit of {MAX_TEXT}", text.len())));
    }
    Ok(())
}

/// Checks a list: each entry, and that names are unique; fields are named relative to the list (`[1].every`).
pub fn validate_list(list: &[PostgresFault]) -> Result<(), Invalid> {
    for (i, entry) in list.iter().enumerate() {
        Fault::validate(entry).map_err(|e| e.at(&format!("[{i}]")))?;
        let name = entry.label(i);
        if let Some(j) = (0..i).find(|&j| list[j].label(j) == name) {
            return Err(Invalid::new(
                format!("[{i}].name"),
                format!("{name:?} already names entry {j}: the recording counts each entry by its name"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(yaml: &str) -> PostgresFault {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn an_entry_needs_one_trigger_one_effect_a_regex_and_a_sqlstate() {
        let ok = entry("{ match: { statement: '^UPDATE' }, share: 10%, error: { sqlstate: '40001', message: m } }");
        assert!(Fault::validate(&ok).is_ok());
        assert_eq!(Fault::validate(&entry("{ every: 2 }")).unwrap_err().field, "error");
        assert_eq!(
            Fault::validate(&entry("{ every: 2, share: 5%, terminate: true }")).unwrap_err().field,
            "every"
        );
        assert_eq!(
            Fault::validate(&entry("{ delay: 1s, terminate: true }")).unwrap_err().field,
            "terminate"
        );
        assert_eq!(
            Fault::validate(&entry("{ match: { statement: '(' }, terminate: true }")).unwrap_err().field,
            "match.statement"
        );
        assert_eq!(
            Fault::validate(&entry("{ error: { sqlstate: '4001' } }")).unwrap_err().field,
            "error.sqlstate"
        );
        assert_eq!(Fault::validate(&entry("{ per: route, terminate: true }")).unwrap_err().field, "per");
        let dup = vec![entry("{ name: a, terminate: true }"), entry("{ name: a, delay: 1s }")];
        assert_eq!(validate_list(&dup).unwrap_err().field, "[1].name");
    }
}
