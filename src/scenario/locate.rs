//! Errors placed in a scenario's text: the line and column of a field, so that an error found after parsing (in
//! validation, in a replayed trace) still points into the file. Where a field is comes from the YAML locator
//! (`faultline_units::yaml_index`, on the parser's own events); this only turns a position into a `ScenarioError`.

use faultline_units::yaml_index::YamlIndex;

use super::ScenarioError;

/// Builds an error for `field` (a dotted path such as `breakers.pricing.metrics` or `phases[1].at`), placing it at
/// that field in `text`; where the document does not hold that exact path, at the first line containing `needle`,
/// and failing that at the nearest enclosing field.
pub fn locate(text: &str, file: &str, field: &str, needle: &str, message: String) -> ScenarioError {
    let index = YamlIndex::build(text);
    let by_needle = || {
        text.lines()
            .enumerate()
            .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
    };
    let at = index
        .position(field)
        .or_else(by_needle)
        .or_else(|| index.locate(field));
    placed(file, field.to_string(), at, message)
}

/// Builds an error for item `index` of the list at the dotted path `list` (such as `faultd.replicas`), placed at
/// the item; failing that, at the list's key.
pub(super) fn locate_item(
    text: &str,
    file: &str,
    list: &str,
    index: usize,
    message: String,
) -> ScenarioError {
    let field = format!("{list}[{index}]");
    let at = YamlIndex::build(text).locate(&field);
    placed(file, field, at, message)
}

fn placed(file: &str, field: String, at: Option<(usize, usize)>, message: String) -> ScenarioError {
    match at {
        Some((line, column)) => ScenarioError::Invalid {
            file: file.to_string(),
            line: line as u64,
            column: column as u64,
            field,
            message,
        },
        None => ScenarioError::InvalidNoLine {
            file: file.to_string(),
            field,
            message,
        },
    }
}
