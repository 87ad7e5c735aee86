//! The join as two compact files of a run's folder, one line each: `requests.csv` (every SUT request with its
//! trace id and times) and `calls.csv` (every dependency call faultd recorded one by one, with the trace id it
//! carried). Times are microseconds from the run's origin, so a line reads against the SUT's own logs and traces.
//!
//! Not for reading them back: reports take what they show from `result.json`.

use std::fmt::Write as _;

use super::Join;

/// The header line of `requests.csv`.
pub const REQUESTS_HEADER: &str = "trace_id,intended_us,sent_us,ended_us,class,calls\n";
/// The header line of `calls.csv`.
pub const CALLS_HEADER: &str =
    "trace_id,parent_span,route,arrival_us,ended_us,end,status,grpc_status,deadline_ms\n";

fn us(d: std::time::Duration) -> u128 {
    d.as_micros()
}

/// `requests.csv`: one line per request, in the order they were due.
pub fn requests_csv(join: &Join) -> String {
    let mut out = String::with_capacity(REQUESTS_HEADER.len() + join.requests.len() * 72);
    out.push_str(REQUESTS_HEADER);
    for f in &join.requests {
        let r = &f.request;
        let sent = r.sent.map(|s| us(s.get()).to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:032x},{},{sent},{},{},{}",
            r.trace,
            us(r.intended.get()),
            us(r.ended.get()),
            r.class.name(),
            f.calls.len()
        );
    }
    out
}

/// `calls.csv`: one line per call, those of each request together in the order they arrived, then the calls of
/// no request of the run (no trace id, or another's).
pub fn calls_csv(join: &Join) -> String {
    let calls = join.requests.iter().flat_map(|f| f.calls.iter());
    let mut out = String::with_capacity(CALLS_HEADER.len() + (join.calls as usize) * 96);
    out.push_str(CALLS_HEADER);
    for c in calls.chain(&join.others) {
        let end = serde_json::to_value(c.end)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{end},{},{},{}",
            c.trace.map(|t| format!("{t:032x}")).unwrap_or_default(),
            c.parent.map(|p| format!("{p:016x}")).unwrap_or_default(),
            c.route,
            us(c.arrival.get()),
            us(c.ended.get()),
            c.status.map(|s| s.to_string()).unwrap_or_default(),
            c.grpc_status.map(|s| s.to_string()).unwrap_or_default(),
            c.deadline
                .map(|d| d.get().as_millis().to_string())
                .unwrap_or_default(),
        );
    }
    out
}
