//! What `result.json` keeps of the join: its totals (requests, calls, attributed or not) and, for the
//! report's per-request view, the few requests with the most dependency calls, each with the timeline of its
//! calls. Bounded whatever the run's length; the whole join is in `requests.csv` and `calls.csv`.
//!
//! Not for judging (`expect::requests`) nor for drawing (`report::html`).

use serde::{Deserialize, Serialize};

use super::{Followed, Join};

/// How many requests the report's per-request view shows.
pub const SAMPLES: usize = 5;

/// The join of a correlated run, in `result.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FollowedSummary {
    /// Requests loadgen sent with a trace id.
    pub requests: u64,
    /// Calls faultd recorded one by one.
    pub calls: u64,
    /// Calls attributed to exactly one request by the trace id they carried.
    pub attributed: u64,
    /// Calls that carried no trace id.
    pub untraced: u64,
    /// Calls whose trace id is of no request of the run.
    pub foreign: u64,
    /// The requests with the most calls, most first.
    pub samples: Vec<SampleRequest>,
}

/// One request and the calls it caused, times in ms from the run's origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRequest {
    pub trace_id: String,
    pub intended_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ms: Option<f64>,
    pub ended_ms: f64,
    pub class: loadgen::Outcome,
    pub calls: Vec<SampleCall>,
}

/// One call of a sample request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleCall {
    pub route: String,
    pub arrival_ms: f64,
    pub ended_ms: f64,
    pub end: faultd::recorder::CallEnd,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<f64>,
}

fn ms(d: faultline_units::Dur) -> f64 {
    d.get().as_secs_f64() * 1000.0
}

impl FollowedSummary {
    pub fn of(join: &Join) -> FollowedSummary {
        FollowedSummary {
            requests: join.requests.len() as u64,
            calls: join.calls,
            attributed: join.attributed(),
            untraced: join.untraced,
            foreign: join.foreign,
            samples: join
                .busiest(None, SAMPLES)
                .into_iter()
                .map(sample)
                .collect(),
        }
    }
}

fn sample(f: &Followed) -> SampleRequest {
    let r = &f.request;
    SampleRequest {
        trace_id: format!("{:032x}", r.trace),
        intended_ms: ms(r.intended),
        sent_ms: r.sent.map(ms),
        ended_ms: ms(r.ended),
        class: r.class,
        calls: f
            .calls
            .iter()
            .map(|c| SampleCall {
                route: c.route.clone(),
                arrival_ms: ms(c.arrival),
                ended_ms: ms(c.ended),
                end: c.end,
                status: c.status,
                deadline_ms: c.deadline.map(ms),
            })
            .collect(),
    }
}
