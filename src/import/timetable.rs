//! The exact timetable `faultline import --replay-load` writes beside the scenario for `load.replay`: one line per
//! recorded request, `TIME METHOD PATH`, in arrival order, TIME in Unix seconds as the record has it (the
//! scenario's `from` is the record's time 0). loadgen's `replay` module reads it; its doc says the format.
//!
//! Records do not come in arrival order (nginx writes a line when a request ends, so a slow request is written
//! after faster ones that came later): requests wait in a heap until the record has gone [`REORDER`] past them,
//! so memory holds that stretch of the record, not the whole of it. A request that comes even later than that
//! (a clock that jumped back) is written at the earliest time still open, and counted.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::Record;

/// How far out of order records may come and still be written at their own times, seconds: longer than any
/// request of the record takes (nginx's lateness is the request's own duration).
pub const REORDER: f64 = 300.0;

/// A request waiting for its turn.
#[derive(Debug)]
struct Pending {
    at: f64,
    /// The order it was read in, so that equal times keep the record's order.
    seq: u64,
    line: String,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.total_cmp(&other.at).then(self.seq.cmp(&other.seq))
    }
}

/// Writes a timetable as records stream by.
pub struct Writer {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    redact: bool,
    heap: BinaryHeap<Reverse<Pending>>,
    /// The latest arrival read.
    latest: f64,
    /// The time of the last line written.
    written_at: f64,
    seq: u64,
    written: u64,
    late: u64,
    left_out: u64,
    /// The first write that failed (reported by `finish`).
    error: Option<std::io::Error>,
}

/// What a timetable holds, once written.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub path: PathBuf,
    /// Requests written.
    pub requests: u64,
    /// Requests that came more than [`REORDER`] out of order, written at the earliest time still open.
    pub late: u64,
    /// Requests left out: a method loadgen does not send, or a target that is not a URL path.
    pub left_out: u64,
    /// The record's time 0 (Unix seconds): the scenario's `from`.
    pub from: f64,
}

impl Writer {
    /// Creates the file; `redact` drops query strings.
    pub fn create(path: &Path, redact: bool) -> std::io::Result<Writer> {
        let mut out = BufWriter::new(std::fs::File::create(path)?);
        writeln!(
            out,
            "# faultline timetable: one recorded request a line, `TIME METHOD PATH`, TIME in Unix seconds, in time order."
        )?;
        Ok(Writer {
            path: path.to_path_buf(),
            out,
            redact,
            heap: BinaryHeap::new(),
            latest: f64::NEG_INFINITY,
            written_at: f64::NEG_INFINITY,
            seq: 0,
            written: 0,
            late: 0,
            left_out: 0,
            error: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes one request; writes those the record has gone far enough past.
    pub fn push(&mut self, r: &Record) {
        let target = if self.redact {
            r.target.split('?').next().unwrap_or("/")
        } else {
            r.target.as_str()
        };
        let line = format!("{} {target}", r.method);
        // The line as loadgen will read it: a method it sends and a URL path.
        let sendable = r.arrival.is_finite()
            && r.arrival >= 0.0
            && matches!(
                loadgen::replay::parse_line(&format!("0 {line}")),
                Ok(Some(_))
            );
        if !sendable {
            self.left_out += 1;
            return;
        }
        self.seq += 1;
        self.heap.push(Reverse(Pending {
            at: r.arrival,
            seq: self.seq,
            line,
        }));
        self.latest = self.latest.max(r.arrival);
        while self
            .heap
            .peek()
            .is_some_and(|p| p.0.at < self.latest - REORDER)
        {
            self.write_next();
        }
    }

    fn write_next(&mut self) {
        let Some(Reverse(p)) = self.heap.pop() else {
            return;
        };
        let at = if p.at < self.written_at {
            self.late += 1;
            self.written_at
        } else {
            p.at
        };
        self.written_at = at;
        self.written += 1;
        if self.error.is_none() {
            if let Err(e) = writeln!(self.out, "{at:.6} {}", p.line) {
                self.error = Some(e);
            }
        }
    }

    /// Writes what is left and closes the file; `from` is the record's time 0.
    pub fn finish(&mut self, from: f64) -> std::io::Result<Written> {
        while !self.heap.is_empty() {
            self.write_next();
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(Written {
            path: self.path.clone(),
            requests: self.written,
            late: self.late,
            left_out: self.left_out,
            from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(arrival: f64, method: &str, target: &str) -> Record {
        Record {
            arrival,
            method: method.into(),
            target: target.into(),
            status: None,
            duration: None,
            calls: Vec::new(),
        }
    }

    #[test]
    fn requests_read_out_of_order_are_written_in_arrival_order_and_very_late_ones_counted() {
        let dir = std::env::temp_dir().join(format!("faultline-timetable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.timetable");
        let mut w = Writer::create(&path, true).unwrap();
        for (at, m, t) in [
            (1000.5, "GET", "/b?q=1"),
            (1000.25, "POST", "/a"),
            (1000.5, "GET", "/c"),
            (1400.0, "GET", "/d"),
            // Over REORDER behind /d, after /a..c were written: written at the earliest open time.
            (1000.1, "GET", "/late"),
            (1400.5, "CONNECT", "/x"),
        ] {
            w.push(&rec(at, m, t));
        }
        let written = w.finish(1000.0).unwrap();
        assert_eq!(
            (written.requests, written.late, written.left_out),
            (5, 1, 1)
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            vec![
                "1000.250000 POST /a",
                "1000.500000 GET /b",
                "1000.500000 GET /c",
                "1000.500000 GET /late",
                "1400.000000 GET /d"
            ]
        );
    }
}
