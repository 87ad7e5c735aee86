//! The JSON Schema of the scenario format, derived from its types, for editor completion. Not used to validate:
//! `Scenario::load` does that, with messages the schema cannot give.

use super::Scenario;

/// The JSON Schema of the scenario format, for editor completion.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Scenario)).unwrap_or_default()
}
