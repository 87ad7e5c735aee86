//! How figures read in verdict sentences: seconds with one decimal, milliseconds with up to two, numbers without
//! trailing zeros. Not for the report tables, which have their own formats.

use std::time::Duration;

/// Up to three decimals, trailing zeros dropped.
pub(crate) fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Up to two decimals, trailing zeros dropped.
pub(crate) fn trim2(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Seconds with one decimal: "7.3 s"; under a second, milliseconds: "40 ms".
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 && s > 0.0 {
        let ms = s * 1000.0;
        if ms >= 10.0 {
            format!("{ms:.0} ms")
        } else {
            format!("{} ms", trim2(ms))
        }
    } else {
        format!("{:.1} s", s)
    }
}

/// Milliseconds with up to two decimals: "12.3 ms".
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1000.0;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{} ms", trim2(v))
    }
}

/// " during brownout" for an expectation's name, or nothing for the whole run.
pub(crate) fn during_words(d: &Option<String>) -> String {
    d.as_ref()
        .map(|p| format!(" during {p}"))
        .unwrap_or_default()
}
