//! `faultline compare`: two runs' latencies side by side, phase by phase. Not where the comparison is made:
//! `report::compare` does it and renders the table.

use std::path::Path;

use crate::report;

/// Compares run B with run A; exits 1 if any percentile of B is slower than A's by more than `threshold` (a share
/// such as "10%" or "0.1"), 2 if the threshold or either run cannot be read. With `as_json`, the comparison is one
/// JSON object on stdout (the table's figures, and `regressed`) instead of the table.
pub fn compare(a: &Path, b: &Path, threshold: &str, as_json: bool) -> i32 {
    let Some(t) = report::compare::parse_threshold(threshold) else {
        eprintln!("error: --threshold {threshold:?} is not a share such as 10% or 0.1");
        return 2;
    };
    let (ra, rb) = match (report::read(a), report::read(b)) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let c = report::compare(&ra, &rb, t);
    if as_json {
        let mut value = serde_json::to_value(&c).unwrap_or_default();
        value["regressed"] = c.regressed().into();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    } else {
        print!("{}", c.text());
    }
    if c.regressed() {
        1
    } else {
        0
    }
}
