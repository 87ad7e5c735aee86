//! Reading a configuration: parse it (YAML, or JSON from the control API), hold it to the plan's rules, and point
//! an error at its file, line, column and field.
//!
//! Not for: the rules themselves (`rules`) or the configuration's types (`crate::config`).

use super::rules;
use crate::config::{parse_json, Config, ConfigError};
use faultline_units::yaml_index::YamlIndex;

impl Config {
    /// Parses and validates YAML (JSON is YAML too). Errors name `file`, the line and column, and the field.
    pub fn from_yaml(text: &str, file: &str) -> Result<Config, ConfigError> {
        let index = YamlIndex::build(text);
        let config: Config = serde_saphyr::from_str(text).map_err(|e| {
            let plain = e.without_snippet();
            let location = plain.location();
            let (line, column) = match location {
                Some(l) if l.line() > 0 => (Some(l.line() as usize), Some(l.column() as usize)),
                _ => (None, None),
            };
            let field = line
                .map(|l| index.field_at(l, column.unwrap_or(1)))
                .unwrap_or_default();
            ConfigError {
                file: Some(file.to_string()),
                line,
                column,
                field,
                message: first_line_of(&plain.to_string()),
            }
        })?;
        config.validate().map_err(|mut e| {
            e.file = Some(file.to_string());
            if let Some((line, column)) = index.locate(&e.field) {
                e.line = Some(line);
                e.column = Some(column);
            }
            e
        })?;
        Ok(config)
    }

    /// Parses and validates JSON (a control-API body). Errors name the field by its path.
    pub fn from_json(body: &[u8], label: &str) -> Result<Config, ConfigError> {
        let config: Config = parse_json(body).map_err(|(field, message)| ConfigError {
            file: Some(label.to_string()),
            line: None,
            column: None,
            field,
            message,
        })?;
        config.validate().map_err(|mut e| {
            e.file = Some(label.to_string());
            e
        })?;
        Ok(config)
    }

    /// Checks everything that parsing cannot: faultd's limits ([`crate::limits`]), patterns and methods, shares
    /// add up to at most 100%, phases in ascending time with unique names, phases naming known routes, ramps
    /// that end before the next phase. No route at all is valid: such a faultd answers every call 404 (counted as
    /// unmatched) until a runner or the control API configures it. These are the rules [`super::Plan::compile`] holds a
    /// configuration to before compiling it; compiling itself waits for the files the configuration names, which
    /// are read after it is validated ([`Config::read_files`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        rules::check(self)
    }
}

/// The first line of a parser message, without its trailing " at line L, column C" (the error prints those
/// up front already).
fn first_line_of(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim();
    match line.rfind(" at line ") {
        Some(i) if line[i..].contains(", column ") => line[..i].to_string(),
        _ => line.to_string(),
    }
}
