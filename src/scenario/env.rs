//! Environment variables in scenario text, written as Docker Compose writes them: `${NAME}`, or `${NAME:-default}`
//! for a value used when the variable is unset or empty. This is how a scenario reaches a real server started
//! outside it (a database, a cache): `upstream: "127.0.0.1:${REDIS_PORT:-6379}"`.
//!
//! Not for the run's own values (ports faultd picks, the SUT's port, scaled durations): those are the `{...}`
//! placeholders rendered once the run has started them. Variables are replaced in the text before it is parsed, so
//! they work in every field; a `$` not followed by `{` is left as it is, and `$${` is a literal `${` (Compose's
//! `$$`), for text that holds one: a request path, a peer's name in a comment.

/// Where and why a `${...}` could not be replaced.
#[derive(Debug, PartialEq)]
pub struct EnvError {
    /// 1-based line of the `$`.
    pub line: u64,
    /// 1-based column of the `$`.
    pub column: u64,
    /// The reference as written, `${NAME}`.
    pub reference: String,
    /// What is wrong.
    pub message: String,
}

/// Replaces every `${NAME}` and `${NAME:-default}` in `text` with what `lookup` gives. The error names the first
/// variable that is unset with no default, or a `${` that is not a variable, with its line and column.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, EnvError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("${") {
        if rest[..open].ends_with('$') {
            out.push_str(&rest[..open - 1]);
            out.push_str("${");
            rest = &rest[open + 2..];
            continue;
        }
        out.push_str(&rest[..open]);
        let before = &text[..text.len() - rest.len() + open];
        let fail = |reference: &str, message: String| EnvError {
            line: before.matches('\n').count() as u64 + 1,
            column: before.rsplit('\n').next().unwrap_or("").chars().count() as u64 + 1,
            reference: reference.to_string(),
            message,
        };
        let after = &rest[open + 2..];
        let Some(close) = after.find('}') else {
            return Err(fail("${", "`${` without a closing `}`".into()));
        };
        let inner = &after[..close];
        let reference = format!("${{{inner}}}");
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(fail(
                &reference,
                "not an environment variable (write ${NAME} or ${NAME:-default})".into(),
            ));
        }
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(fail(
                    &reference,
                    format!(
                        "environment variable {name} is not set (set it, or write ${{{name}:-default}})"
                    ),
                ))
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The names of the variables `text` refers to, each once in order of first use, set or not: what a scenario needs
/// from the environment it will be read in (`faultline k8s` hands them to the runner's pod).
pub fn referenced_variables(text: &str) -> Vec<String> {
    let names = std::cell::RefCell::new(Vec::<String>::new());
    // Every variable answers, so that interpolation visits each reference instead of stopping at an unset one.
    let _ = interpolate(text, |name| {
        let mut names = names.borrow_mut();
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        Some("set".to_string())
    });
    names.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "REDIS_PORT" => Some("6390".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn variables_and_defaults_are_replaced_and_other_text_is_kept() {
        let text =
            "a: 127.0.0.1:${REDIS_PORT}\nb: ${MISSING:-7}\nc: ${EMPTY:-x}\nd: $5 {faultd.url}\n";
        assert_eq!(
            interpolate(text, env).unwrap(),
            "a: 127.0.0.1:6390\nb: 7\nc: x\nd: $5 {faultd.url}\n"
        );
    }

    #[test]
    fn a_doubled_dollar_before_a_brace_is_a_literal_one() {
        let text = "a: \"/p/$${HOME}\"\nb: $$${REDIS_PORT}\nc: $$5\n";
        assert_eq!(
            interpolate(text, env).unwrap(),
            "a: \"/p/${HOME}\"\nb: $${REDIS_PORT}\nc: $$5\n"
        );
        assert!(referenced_variables(text).is_empty());
    }

    #[test]
    fn an_unset_variable_without_default_names_itself_and_its_line() {
        let e = interpolate("x: 1\ny: ${NOPE}\n", env).unwrap_err();
        assert_eq!((e.line, e.column, e.reference.as_str()), (2, 4, "${NOPE}"));
        assert!(e.message.contains("NOPE is not set"), "{e:?}");
    }

    #[test]
    fn a_malformed_reference_is_an_error() {
        for text in ["a: ${", "a: ${1X}", "a: ${A B}", "a: ${}"] {
            assert!(interpolate(text, env).is_err(), "{text}");
        }
    }

    #[test]
    fn referenced_variables_are_listed_once_whether_set_or_not() {
        let text = "a: ${REDIS_PORT}\nb: ${HOST:-x}\nc: ${REDIS_PORT} $5\n";
        assert_eq!(referenced_variables(text), ["REDIS_PORT", "HOST"]);
        assert!(referenced_variables("a: 1\n").is_empty());
    }
}
