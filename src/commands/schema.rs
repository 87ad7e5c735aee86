//! `faultline schema`: prints the scenario format's JSON Schema. Not where the schema comes from:
//! `scenario::json_schema` derives it.

use crate::scenario;

/// Prints the JSON Schema of the scenario format to stdout; always exits 0.
pub fn schema() -> i32 {
    println!(
        "{}",
        serde_json::to_string_pretty(&scenario::json_schema()).unwrap_or_default()
    );
    0
}
