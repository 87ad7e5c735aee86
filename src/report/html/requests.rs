//! The per-request view of `report.html`: for the few requests with the most dependency calls, a small timeline of
//! the SUT request (from its intended time to its end) above the calls it caused, each from its arrival at faultd
//! to its end, coloured by how it ended, with a line per call saying when, how long and with what deadline.
//! Drawn as inline SVG, so it reads without JavaScript.
//!
//! Not for choosing the requests (`correlate::summary`) nor for the verdicts (the expectations table).

use std::fmt::Write as _;

use faultd::recorder::CallEnd;

use super::escape;
use crate::correlate::summary::{FollowedSummary, SampleCall, SampleRequest};

/// The drawing's width and its left margin for labels, in px.
const WIDTH: f64 = 860.0;
const LABEL: f64 = 120.0;
const ROW: f64 = 18.0;

/// The section, when the run followed its requests.
pub(super) fn section(h: &mut String, f: &FollowedSummary) {
    let _ = write!(
        h,
        "<section><h2>Requests followed through the SUT</h2><p class=\"note\">{} requests; {} of {} dependency calls carried the trace id of one ({} none, {} another's). Below, the requests with the most calls: the SUT request on top (from its intended time), then each call it caused at the dependency. The whole join is in requests.csv and calls.csv.</p>",
        f.requests, f.attributed, f.calls, f.untraced, f.foreign
    );
    if f.samples.is_empty() {
        h.push_str("<p>No call carried the trace id of a request of the run.</p>");
    }
    for s in &f.samples {
        timeline(h, s);
    }
    h.push_str("</section>\n");
}

fn call_colour(c: &SampleCall) -> &'static str {
    match (c.end, c.status) {
        (CallEnd::Answered, Some(s)) if s < 400 => "#2e7d32",
        (CallEnd::Answered, _) => "#c62828",
        (CallEnd::Abandoned | CallEnd::Hang, _) => "#9e9e9e",
        _ => "#ef6c00",
    }
}

fn call_words(c: &SampleCall) -> String {
    let how = match (c.end, c.status) {
        (CallEnd::Answered, Some(s)) => format!("answered {s}"),
        (end, _) => serde_json::to_value(end)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    };
    let deadline = c
        .deadline_ms
        .map(|d| format!(", deadline {d:.0} ms"))
        .unwrap_or_else(|| ", no deadline".into());
    format!(
        "{} at {:.1} ms, held {:.1} ms, {how}{deadline}",
        c.route,
        c.arrival_ms,
        c.ended_ms - c.arrival_ms
    )
}

/// One request's timeline and the lines under it.
fn timeline(h: &mut String, s: &SampleRequest) {
    let start = s.intended_ms;
    let end = s
        .calls
        .iter()
        .map(|c| c.ended_ms)
        .fold(s.ended_ms, f64::max);
    let span = (end - start).max(1.0);
    let x = |t: f64| LABEL + (t - start) / span * (WIDTH - LABEL - 10.0);
    let height = ROW * (s.calls.len() as f64 + 2.0);
    let _ = write!(
        h,
        "<div class=\"followed\"><div class=\"vname\">request {} · {} · {:.1} ms from its intended time · {} calls</div>\
         <svg width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"timeline of request {}\">",
        escape(&s.trace_id),
        s.class.name(),
        s.ended_ms - s.intended_ms,
        s.calls.len(),
        escape(&s.trace_id)
    );
    let bar = |h: &mut String, row: usize, from: f64, to: f64, colour: &str, label: &str| {
        let y = ROW * row as f64 + 3.0;
        let _ = write!(
            h,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"11\">{}</text><rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>{}</title></rect>",
            y + ROW - 7.0,
            escape(label),
            x(from),
            (x(to) - x(from)).max(1.5),
            ROW - 6.0,
            escape(label)
        );
    };
    bar(h, 0, s.intended_ms, s.ended_ms, "#1565c0", "SUT request");
    for (i, c) in s.calls.iter().enumerate() {
        bar(
            h,
            i + 1,
            c.arrival_ms,
            c.ended_ms,
            call_colour(c),
            &format!("call {}", i + 1),
        );
    }
    let axis_y = ROW * (s.calls.len() as f64 + 1.0) + 12.0;
    let _ = write!(
        h,
        "<text x=\"{LABEL}\" y=\"{axis_y:.1}\" font-size=\"10\" fill=\"#555\">{start:.0} ms</text><text x=\"{:.1}\" y=\"{axis_y:.1}\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">{end:.0} ms</text></svg><ol class=\"calls\">",
        WIDTH - 10.0
    );
    for c in &s.calls {
        let _ = write!(h, "<li>{}</li>", escape(&call_words(c)));
    }
    h.push_str("</ol></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sample_request_gets_a_bar_for_itself_and_one_per_call_with_its_line() {
        let call = |at: f64, end: CallEnd, status: Option<u16>| SampleCall {
            route: "pricing".into(),
            arrival_ms: at,
            ended_ms: at + 5.0,
            end,
            status,
            deadline_ms: Some(900.0),
        };
        let f = FollowedSummary {
            requests: 10,
            calls: 3,
            attributed: 3,
            untraced: 0,
            foreign: 0,
            samples: vec![SampleRequest {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                intended_ms: 100.0,
                sent_ms: Some(100.1),
                ended_ms: 400.0,
                class: loadgen::Outcome::Ok,
                calls: vec![
                    call(101.0, CallEnd::Answered, Some(503)),
                    call(200.0, CallEnd::Abandoned, None),
                    call(390.0, CallEnd::Answered, Some(200)),
                ],
            }],
        };
        let mut h = String::new();
        section(&mut h, &f);
        assert!(
            h.contains("request 4bf92f3577b34da6a3ce929d0e0e4736 · ok"),
            "{h}"
        );
        assert_eq!(h.matches("<rect").count(), 4);
        assert_eq!(h.matches("<li>").count(), 3);
        assert!(
            h.contains("pricing at 200.0 ms, held 5.0 ms, abandoned, deadline 900 ms"),
            "{h}"
        );
        assert!(h.contains("3 of 3 dependency calls"), "{h}");
    }
}
