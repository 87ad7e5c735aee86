//! A YAML reader's error, said the way every other scenario error is: `file:line:column: field: message`, in the
//! scenario's own words. For: the errors serde gives before validation can run (an unknown key, a value of the wrong
//! type, a key given twice), with the nearest known key suggested for a misspelt one. Not for: errors found after
//! parsing, which [`super::locate`] places.

use super::ScenarioError;

/// The scenario error for `e`, met while reading `text` (the text the reader saw) of `file`.
pub fn from_yaml(e: &serde_saphyr::Error, text: &str, file: &str) -> ScenarioError {
    use serde_saphyr::MessageFormatter;
    let inner = e.without_snippet();
    let message = match inner {
        serde_saphyr::Error::DuplicateMappingKey { key: Some(k), .. } => {
            format!("`{k}` is given twice in the same mapping; a key may appear once")
        }
        serde_saphyr::Error::DuplicateMappingKey { key: None, .. } => {
            "a key is given twice in the same mapping; a key may appear once".to_string()
        }
        other => reworded(&serde_saphyr::UserMessageFormatter.format_message(other)),
    };
    match e.location().filter(|l| l.line() > 0) {
        Some(at) => {
            let (line, column) = (at.line(), at.column().max(1));
            ScenarioError::Invalid {
                file: file.to_string(),
                line,
                column,
                field: path_at(text, line as usize, column as usize),
                message,
            }
        }
        None => ScenarioError::Parse {
            file: file.to_string(),
            message,
        },
    }
}

/// serde's wording made the scenario's: an unknown key or variant gets the nearest known one suggested, and the
/// list of known ones only when none is near.
fn reworded(message: &str) -> String {
    for kind in ["field", "variant"] {
        let Some(rest) = message.strip_prefix(&format!("unknown {kind} `")) else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('`') else {
            continue;
        };
        let known: Vec<&str> = rest
            .trim_start_matches(',')
            .trim()
            .trim_start_matches("expected one of ")
            .trim_start_matches("expected ")
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .filter(|k| !k.is_empty() && !k.starts_with("there are no"))
            .collect();
        let what = if kind == "field" { "key" } else { "value" };
        return match nearest(name, &known) {
            Some(near) => format!("unknown {what} `{name}`; did you mean `{near}`?"),
            None if known.is_empty() => format!("unknown {what} `{name}`: none is allowed here"),
            None => format!(
                "unknown {what} `{name}`; expected one of {}",
                known.join(", ")
            ),
        };
    }
    message.to_string()
}

/// The known name closest to `name` by edit distance, when close enough to be a slip: at most a third of its
/// letters (at least one) changed, inserted or dropped.
fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(name, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The key path at 1-based `line` and `column` (`expect[2].opens_within`), read from indentation and list dashes,
/// and on the line itself from the key at the column or the last key of a flow mapping before it.
pub(super) fn path_at(text: &str, line: usize, column: usize) -> String {
    let mut stack: Vec<Part> = Vec::new();
    for (i, raw) in text.lines().take(line).enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut indent = raw.len() - trimmed.len();
        let mut content = trimmed;
        if let Some(rest) = content
            .strip_prefix("- ")
            .or((content == "-").then_some(""))
        {
            while stack.last().is_some_and(|p| p.indent() > indent) {
                stack.pop();
            }
            match stack.last_mut() {
                Some(Part::Item(at, n)) if *at == indent => *n += 1,
                _ => stack.push(Part::Item(indent, 0)),
            }
            let rest = rest.trim_start();
            indent += content.len() - rest.len();
            content = rest;
        } else {
            while stack.last().is_some_and(|p| p.indent() >= indent) {
                stack.pop();
            }
        }
        let own = key_of(content);
        if let Some(key) = own {
            stack.push(Part::Key(indent, key.to_string()));
        }
        if i + 1 == line {
            let at = raw
                .char_indices()
                .nth(column.saturating_sub(1))
                .map_or(raw.len(), |(b, _)| b);
            if at > indent {
                let inner = key_of(&raw[at..]).or_else(|| {
                    let before = &raw[indent..at];
                    let piece = before.rsplit([',', '{']).next().unwrap_or("").trim_start();
                    key_of(piece).filter(|_| before.contains(['{', ',']))
                });
                if let Some(key) = inner.filter(|k| Some(*k) != own) {
                    stack.push(Part::Key(usize::MAX, key.to_string()));
                }
            }
        }
    }
    let mut out = String::new();
    for part in &stack {
        match part {
            Part::Key(_, k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Part::Item(_, n) => out.push_str(&format!("[{n}]")),
        }
    }
    out
}

/// One step of a key path, with the indentation it was written at.
enum Part {
    Key(usize, String),
    Item(usize, usize),
}

impl Part {
    fn indent(&self) -> usize {
        match self {
            Part::Key(i, _) | Part::Item(i, _) => *i,
        }
    }
}

/// A plain key at the start of `s` (`name:` followed by a space, the end, or a flow's punctuation).
fn key_of(s: &str) -> Option<&str> {
    let end = s.find(':')?;
    let key = &s[..end];
    let after = s[end + 1..].chars().next();
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*'));
    (plain && after.is_none_or(|c| matches!(c, ' ' | '{' | '[' | ',' | '}'))).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name: z
dependency:
  routes:
    pricing: { path: /price/*, latncy: 3s }
load:
  rate: 0/s
  requests:
    - get: /a
    - { get: /b, heders: {} }
expect:
  - { id: a, breaker: pricing, opens_within: 3s, after: x }
  # a comment
  - id: b
    breaker: pricing
    opens_withn: 3s
";

    #[test]
    fn a_position_is_named_by_its_key_path_in_block_and_flow_style() {
        assert_eq!(path_at(TEXT, 1, 1), "name");
        assert_eq!(path_at(TEXT, 4, 32), "dependency.routes.pricing.latncy");
        assert_eq!(path_at(TEXT, 4, 5), "dependency.routes.pricing");
        assert_eq!(path_at(TEXT, 6, 9), "load.rate");
        assert_eq!(path_at(TEXT, 8, 7), "load.requests[0].get");
        assert_eq!(path_at(TEXT, 9, 18), "load.requests[1].heders");
        assert_eq!(path_at(TEXT, 11, 46), "expect[0].opens_within");
        assert_eq!(path_at(TEXT, 15, 5), "expect[1].opens_withn");
    }

    #[test]
    fn a_misspelt_key_gets_the_nearest_known_one_and_a_far_one_the_list() {
        let m =
            reworded("unknown field `opens_withn`, expected one of `id`, `opens_within`, `after`");
        assert_eq!(m, "unknown key `opens_withn`; did you mean `opens_within`?");
        let m = reworded("unknown field `colour`, expected one of `id`, `after`");
        assert_eq!(m, "unknown key `colour`; expected one of id, after");
        let m = reworded("unknown variant `tcpp`, expected one of `http`, `tcp`");
        assert_eq!(m, "unknown value `tcpp`; did you mean `tcp`?");
        assert_eq!(
            reworded("invalid type: string, expected u64"),
            "invalid type: string, expected u64"
        );
    }

    #[test]
    fn a_duplicate_key_is_said_in_the_scenario_s_words_at_its_place() {
        let text = "name: a\nname: b\n";
        let e = serde_saphyr::from_str::<serde_json::Value>(text).unwrap_err();
        let said = from_yaml(&e, text, "s.yaml").to_string();
        assert!(said.starts_with("s.yaml:2:1: name: "), "{said}");
        assert!(
            said.contains("`name` is given twice") && !said.contains("Policy"),
            "{said}"
        );
    }
}
