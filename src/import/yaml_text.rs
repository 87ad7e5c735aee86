//! How an imported scenario writes its values: durations (`250ms`, `1.5ms`, `2s`), shares of a total rounded down
//! (`12.5%`), and strings as YAML double-quoted scalars.
//!
//! Not for the scenario's layout (`writer`) nor for what the values are (`timeline`, `expectations`).

use std::fmt::Write;

/// A duration in nanoseconds as the scenario writes it: `250ms`, `1.5ms`, `2s`.
pub fn dur(ns: u64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    if ns.is_multiple_of(1_000_000_000) {
        return format!("{}s", ns / 1_000_000_000);
    }
    let ms = ns as f64 / 1e6;
    let text = format!("{ms:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}ms")
}

/// A share with three decimals of a percent, rounded down so that shares never add up past 100%.
pub fn share(count: u64, total: u64) -> Option<String> {
    fraction(count as f64 / total.max(1) as f64)
}

/// A fraction as a share with three decimals of a percent, rounded down; `None` when that is 0%.
pub fn fraction(f: f64) -> Option<String> {
    let thousandths = (f.clamp(0.0, 1.0) * 100_000.0 + 1e-6).floor() as u64;
    if thousandths == 0 {
        return None;
    }
    let text = format!("{}.{:03}", thousandths / 1000, thousandths % 1000);
    Some(format!(
        "{}%",
        text.trim_end_matches('0').trim_end_matches('.')
    ))
}

/// `s` as a YAML double-quoted scalar: `"` and `\` escaped, and every character YAML does not take as it is
/// (control characters, DEL, C1 controls, line and paragraph separators, a byte-order mark, noncharacters) as
/// `\uXXXX`; the rest, combining marks included, as written.
pub fn yaml_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..
                if !matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}') =>
            {
                out.push(c)
            }
            _ => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Seconds as the scenario writes a duration.
pub fn ms_text(seconds: f64) -> String {
    dur((seconds * 1e9).round() as u64)
}
