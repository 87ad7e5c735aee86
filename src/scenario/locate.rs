//! The YAML locator: the line and column of a key path in a scenario's text, so that an error found after parsing
//! (in validation, in a replayed trace) still points into the file. Not a YAML parser: it finds keys by their
//! indentation and flow-style punctuation, which is enough for where a field is, not for what it holds.

use super::ScenarioError;

/// Builds an error for `field`, placing it at the line of the YAML key path `path` (each key searched below the
/// previous one, in block or flow style), or failing that at the first line containing `needle`.
pub fn locate(text: &str, file: &str, field: &str, needle: &str, message: String) -> ScenarioError {
    let path: Vec<&str> = field.split('.').collect();
    let by_path = locate_path(text, &path);
    let by_needle = || {
        text.lines()
            .enumerate()
            .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
    };
    match by_path.or_else(by_needle) {
        Some((line, column)) => ScenarioError::Invalid {
            file: file.to_string(),
            line: line as u64,
            column: column as u64,
            field: field.to_string(),
            message,
        },
        None => ScenarioError::InvalidNoLine {
            file: file.to_string(),
            field: field.to_string(),
            message,
        },
    }
}

/// Builds an error for item `index` of the list at the key path `list` (such as `faultd.replicas`), placing it
/// where the item's text `needle` appears after the list's key for the `(skip + 1)`-th time (an item repeated earlier
/// in the list appears before it), in flow style (`[a, b]`) or block style (`- a`); failing that, at the list's key.
pub(super) fn locate_item(
    text: &str,
    file: &str,
    list: &str,
    index: usize,
    needle: &str,
    skip: usize,
    message: String,
) -> ScenarioError {
    let field = format!("{list}[{index}]");
    let path: Vec<&str> = list.split('.').collect();
    let Some((line, column)) = locate_path(text, &path) else {
        return ScenarioError::InvalidNoLine {
            file: file.to_string(),
            field,
            message,
        };
    };
    let hit = text
        .lines()
        .enumerate()
        .skip(line - 1)
        .flat_map(|(i, l)| {
            let from = if i + 1 == line { column - 1 } else { 0 };
            l.match_indices(needle)
                .filter(move |(c, _)| *c >= from)
                .map(move |(c, _)| (i + 1, c + 1))
        })
        .nth(skip);
    let (line, column) = hit.unwrap_or((line, column));
    ScenarioError::Invalid {
        file: file.to_string(),
        line: line as u64,
        column: column as u64,
        field,
        message,
    }
}

/// The 1-based line and column of a key path such as `breakers.pricing.metrics`: each key is looked for after the
/// line of the previous one. List indices (`phases[1]`) step over that many list items.
pub fn locate_path(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut found = None;
    for segment in path {
        let (key, index) = match segment.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (*segment, None),
        };
        if key.is_empty() {
            continue;
        }
        let hit = lines.iter().enumerate().skip(from).find_map(|(i, l)| {
            let trimmed = l.trim_start();
            let block = trimmed.starts_with(&format!("{key}:"))
                || trimmed.starts_with(&format!("- {key}:"));
            let flow = [
                format!("{{ {key}:"),
                format!("{{{key}:"),
                format!(", {key}:"),
            ]
            .iter()
            .find_map(|p| l.find(p.as_str()).map(|c| c + p.len() - key.len() - 1));
            if block {
                Some((i, l.len() - trimmed.len()))
            } else {
                flow.map(|c| (i, c))
            }
        })?;
        from = hit.0;
        found = Some((hit.0 + 1, hit.1 + 1));
        if let Some(n) = index {
            // A flow list on the key's own line (`tags: [a, b]`): the item is on that line.
            if lines[hit.0][hit.1..]
                .split_once(':')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('['))
            {
                continue;
            }
            let mut seen = 0;
            let item = lines.iter().enumerate().skip(from + 1).find(|(_, l)| {
                if l.trim_start().starts_with("- ") {
                    seen += 1;
                    seen == n + 1
                } else {
                    false
                }
            })?;
            from = item.0;
            found = Some((item.0 + 1, item.1.len() - item.1.trim_start().len() + 1));
        }
    }
    found
}
