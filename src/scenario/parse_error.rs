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

/// Reads `text` as a `T`, reporting every error serde meets, not only the first (at most [`super::MAX_ERRORS`],
/// counted up to five times that): after an error at a line, the entry there (with its nested lines, or the whole flow
/// collection it sits in) is blanked out and the text read again, line numbers kept. A syntax error, a missing
/// field, or an error that removing an entry may have caused (at an entry that encloses one removed) ends the
/// reading: what is reported was found in the text as written.
pub fn read_all<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &str,
) -> Result<T, ScenarioError> {
    let mut errors: Vec<ScenarioError> = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    let mut current = text.to_string();
    loop {
        let e = match serde_saphyr::from_str::<T>(&current) {
            Ok(value) if errors.is_empty() => return Ok(value),
            Ok(_) => break,
            Err(e) => e,
        };
        // Lines keep their places in `current`: the key path is read from the text as written.
        let error = from_yaml(&e, text, file);
        let (line, field) = match &error {
            ScenarioError::Invalid { line, field, .. } => (Some(*line as usize), field.clone()),
            _ => (None, String::new()),
        };
        let missing = matches!(
            e.without_snippet(),
            serde_saphyr::Error::SerdeMissingField { .. }
        );
        let consequence = missing || fields.iter().any(|f| encloses(&field, f));
        if !errors.is_empty() && consequence {
            break;
        }
        errors.push(error);
        // Counted up to five times what is shown, each a new reading of the whole text.
        if !recoverable(&e) || errors.len() >= 5 * super::MAX_ERRORS {
            break;
        }
        match line.and_then(|l| blank_entry(&current, l)) {
            Some(next) if next != current => {
                current = next;
                fields.push(field);
            }
            _ => break,
        }
    }
    Err(ScenarioError::many(errors))
}

/// An error that leaves the text readable around it: a value of the wrong type or form, an unknown key or
/// value, a key given twice. A syntax error does not.
fn recoverable(e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    matches!(
        e.without_snippet(),
        E::Message { .. }
            | E::InvalidScalar { .. }
            | E::SerdeInvalidType { .. }
            | E::SerdeInvalidValue { .. }
            | E::SerdeInvalidLength { .. }
            | E::SerdeUnknownVariant { .. }
            | E::SerdeUnknownField { .. }
            | E::DuplicateMappingKey { .. }
            | E::NullIntoString { .. }
            | E::InvalidBooleanStrict { .. }
    )
}

/// Whether the key path `outer` is `inner` or one of its ancestors (`load` of `load.rate`, `expect` of
/// `expect[1].id`); an empty path is the whole document.
fn encloses(outer: &str, inner: &str) -> bool {
    inner
        .strip_prefix(outer)
        .is_some_and(|rest| outer.is_empty() || rest.is_empty() || rest.starts_with(['.', '[']))
}

/// `text` with the entry at 1-based `line` blanked out: that line and the lines nested under it (more indented,
/// or inside a flow collection it opens); a line inside a flow collection opened earlier blanks from where it
/// opened. Every line stays where it was, so later errors keep their line numbers.
fn blank_entry(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let depth = flow_depths(&lines);
    let mut start = line.checked_sub(1)?;
    while start > 0 && depth.get(start).copied().unwrap_or(0) > 0 {
        start -= 1;
    }
    let first = lines.get(start)?;
    let trimmed = first.trim_start();
    if trimmed.is_empty() {
        return None;
    }
    let indent = first.len() - trimmed.len();
    let mut end = start + 1;
    while let Some(l) = lines.get(end) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') || depth[end] > 0 || l.len() - t.len() > indent {
            end += 1;
        } else {
            break;
        }
    }
    let mut kept: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if (start..end).contains(&i) {
                String::new()
            } else {
                l.to_string()
            }
        })
        .collect();
    // The parent's only entry gone: the parent holds an empty collection, not nothing.
    let written = |l: &&str| !l.trim().is_empty() && !l.trim_start().starts_with('#');
    let parent = lines[..start].iter().rposition(&written);
    let sibling = lines[end..].iter().find(|l| written(l));
    if let Some(p) = parent {
        let p_indent = lines[p].len() - lines[p].trim_start().len();
        let code = lines[p].split(" #").next().unwrap_or(lines[p]).trim_end();
        let alone = sibling.is_none_or(|l| l.len() - l.trim_start().len() < indent);
        if p_indent < indent && code.ends_with(':') && alone {
            let empty = if trimmed.starts_with('-') {
                " []"
            } else {
                " {}"
            };
            kept[p] = format!("{code}{empty}");
        }
    }
    Some(kept.join("\n"))
}

/// For each line, how many flow collections (`{`, `[`) are open where it starts: brackets in quoted strings,
/// comments and block scalars (`>`, `|`) do not count.
fn flow_depths(lines: &[&str]) -> Vec<usize> {
    let mut depths = Vec::with_capacity(lines.len());
    let mut depth: usize = 0;
    let mut scalar_indent: Option<usize> = None;
    for l in lines {
        depths.push(depth);
        let t = l.trim_start();
        let indent = l.len() - t.len();
        if let Some(at) = scalar_indent {
            if t.is_empty() || indent > at {
                continue;
            }
            scalar_indent = None;
        }
        let (mut single, mut double, mut escaped) = (false, false, false);
        let mut previous = ' ';
        for c in l.chars() {
            match c {
                _ if escaped => escaped = false,
                '\\' if double => escaped = true,
                '\'' if !double => single = !single,
                '"' if !single => double = !double,
                '#' if !single && !double && previous.is_whitespace() => break,
                '{' | '[' if !single && !double => depth += 1,
                '}' | ']' if !single && !double => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
        let code = l.split(" #").next().unwrap_or(l).trim_end();
        if depth == 0
            && (code.ends_with(['>', '|']) || code.ends_with(">-") || code.ends_with("|-"))
        {
            scalar_indent = Some(indent);
        }
    }
    depths
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
    fn every_error_serde_meets_is_reported_each_at_its_own_line() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Doc {
            name: String,
            count: u32,
            items: Vec<Item>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Item {
            id: String,
            #[serde(default)]
            size: u32,
        }
        let text = "name: a\ncount: many\nitems:\n  - { id: x, sise: 3 }\n  - id: y\n    size: big\n  - { id: z,\n      colour: red }\n";
        let e = read_all::<Doc>(text, "d.yaml").unwrap_err().to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 4, "{e}");
        assert!(lines[0].starts_with("d.yaml:2:8: count: "), "{e}");
        assert!(
            lines[1].starts_with(
                "d.yaml:4:14: items[0].sise: unknown key `sise`; did you mean `size`?"
            ),
            "{e}"
        );
        assert!(lines[2].starts_with("d.yaml:6:11: items[1].size: "), "{e}");
        assert!(
            lines[3].starts_with("d.yaml:8:7: items[2].colour: unknown key `colour`"),
            "{e}"
        );
        // A good text reads as ever; a missing field is said once, not as a consequence of a removed entry.
        assert_eq!(
            read_all::<Doc>("name: a\ncount: 1\nitems: []\n", "d.yaml")
                .unwrap()
                .count,
            1
        );
        let e = read_all::<Doc>("name: a\ncount: x\n", "d.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        // A syntax error ends the reading.
        let e = read_all::<Doc>("name: a\ncount: x\nitems: [ { id: ", "d.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.lines().count() <= 2, "{e}");
    }

    #[test]
    fn an_entry_is_blanked_with_what_it_holds_and_the_flow_collection_it_is_in() {
        let text = "a:\n  b: 1\n  c:\n    d: 2\n  e: { f: 1,\n       g: 2 }\n  h: >\n    text { with\n  i: 3";
        assert_eq!(
            blank_entry(text, 3).unwrap(),
            "a:\n  b: 1\n\n\n  e: { f: 1,\n       g: 2 }\n  h: >\n    text { with\n  i: 3"
        );
        assert_eq!(
            blank_entry(text, 6).unwrap(),
            "a:\n  b: 1\n  c:\n    d: 2\n\n\n  h: >\n    text { with\n  i: 3"
        );
        assert_eq!(
            blank_entry(text, 9).unwrap(),
            "a:\n  b: 1\n  c:\n    d: 2\n  e: { f: 1,\n       g: 2 }\n  h: >\n    text { with\n"
        );
        // The only entry of a mapping or a list: the parent is left holding an empty one.
        assert_eq!(blank_entry("a:\n  b: 1\nc: 2", 2).unwrap(), "a: {}\n\nc: 2");
        assert_eq!(
            blank_entry("a:  # the list\n  - 1\n", 2).unwrap(),
            "a: []\n\n"
        );
        assert!(
            encloses("load", "load.rate")
                && encloses("expect", "expect[1].id")
                && encloses("", "x")
        );
        assert!(!encloses("load", "loader") && !encloses("load.rate", "load"));
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
