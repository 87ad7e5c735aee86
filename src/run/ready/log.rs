//! Readiness as a line of output: the SUT says it is ready in its own words ("Serving on :8080"), which any
//! service in any language can print. The watch is offered every line as it is read, from the first, so that a
//! line printed before the wait begins still counts.

use std::sync::atomic::{AtomicBool, Ordering};

use regex::Regex;

/// A pattern looked for in a SUT's output, and whether a line has matched it yet.
pub struct OutputWatch {
    pattern: Regex,
    matched: AtomicBool,
}

impl OutputWatch {
    pub fn new(pattern: Regex) -> OutputWatch {
        OutputWatch {
            pattern,
            matched: AtomicBool::new(false),
        }
    }

    /// Called with every line the SUT prints.
    pub fn offer(&self, line: &str) {
        if !self.matched.load(Ordering::Acquire) && self.pattern.is_match(line) {
            self.matched.store(true, Ordering::Release);
        }
    }

    pub fn pattern(&self) -> &str {
        self.pattern.as_str()
    }

    pub fn attempt(&self) -> Result<(), String> {
        if self.matched.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("no line matched yet".into())
        }
    }
}
