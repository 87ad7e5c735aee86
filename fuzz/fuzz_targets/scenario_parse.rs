//! Fuzzes the scenario parser and validator (`Scenario::parse`) with arbitrary text: it must never panic, and every
//! error must name the file it came from and say what is wrong.
//!
//! Not for running scenarios: nothing here starts faultd, a SUT or a load.

#![no_main]

use faultline::scenario::{Overrides, Scenario};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A time scale as `--time-scale` gives it, so that scaling every duration and rate is fuzzed too.
    let overrides = Overrides {
        time_scale: Some(0.25),
        ..Overrides::default()
    };
    if let Err(e) = Scenario::parse(text, "fuzz.yaml", &overrides) {
        let message = e.to_string();
        assert!(
            message.starts_with("fuzz.yaml"),
            "an error that does not name the file: {message}"
        );
        assert!(
            message.len() > "fuzz.yaml: ".len(),
            "an error that says nothing: {message:?}"
        );
    }
});
