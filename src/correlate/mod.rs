//! Each SUT request followed through the SUT: loadgen's requests (each with the trace id it carried) joined with
//! faultd's calls (each with the trace id the SUT propagated) into, per request, the dependency calls it caused,
//! in the order they arrived, with their timing. The `requests` family of expectations judges retries, backoff,
//! jitter, deadlines and hedges on this join.
//!
//! Not for recording (loadgen and faultd keep the two sides) nor for judging (`expect::requests`). The join is
//! exact: a call is attributed to the one request whose trace id it carries, or counted apart, never guessed.

use std::collections::HashMap;
use std::time::Duration;

use faultd::recorder::TracedCall;
use loadgen::RequestTrace;

pub mod files;

/// One SUT request and the dependency calls it caused, in the order they arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Followed {
    pub request: RequestTrace,
    pub calls: Vec<TracedCall>,
}

/// The join of a correlated run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Join {
    /// Every request loadgen sent with a trace id, in the order they were due.
    pub requests: Vec<Followed>,
    /// The load's timeout: the budget each request's deadline header gave (`x-request-timeout`, `grpc-timeout`).
    pub timeout: Duration,
    /// Calls faultd recorded one by one, over every route.
    pub calls: u64,
    /// Of those, the calls that carried no trace id.
    pub untraced: u64,
    /// Of those, the calls whose trace id is of no request of the run (another client's, or a mangled id).
    pub foreign: u64,
    /// The calls of no request of the run (untraced and foreign), in the order faultd recorded them.
    pub others: Vec<TracedCall>,
}

impl Join {
    /// Joins loadgen's `requests` with faultd's `calls` by trace id; `timeout` is the load's.
    pub fn new(requests: &[RequestTrace], calls: &[TracedCall], timeout: Duration) -> Join {
        let mut followed: Vec<Followed> = requests
            .iter()
            .map(|r| Followed {
                request: *r,
                calls: Vec::new(),
            })
            .collect();
        followed.sort_by_key(|f| (f.request.intended, f.request.trace));
        let index: HashMap<u128, usize> = followed
            .iter()
            .enumerate()
            .map(|(i, f)| (f.request.trace, i))
            .collect();
        let (mut untraced, mut foreign, mut others) = (0, 0, Vec::new());
        for call in calls {
            match call.trace.map(|t| index.get(&t)) {
                None => {
                    untraced += 1;
                    others.push(call.clone());
                }
                Some(None) => {
                    foreign += 1;
                    others.push(call.clone());
                }
                Some(Some(&i)) => followed[i].calls.push(call.clone()),
            }
        }
        for f in &mut followed {
            f.calls.sort_by_key(|c| (c.arrival, c.ended));
        }
        Join {
            requests: followed,
            timeout,
            calls: calls.len() as u64,
            untraced,
            foreign,
            others,
        }
    }

    /// Calls attributed to a request of the run.
    pub fn attributed(&self) -> u64 {
        self.requests.iter().map(|f| f.calls.len() as u64).sum()
    }

    /// The requests with the most calls on `route` (every route for `None`), most first, at most `n`.
    pub fn busiest(&self, route: Option<&str>, n: usize) -> Vec<&Followed> {
        let count = |f: &Followed| {
            f.calls
                .iter()
                .filter(|c| route.is_none_or(|r| c.route == r))
                .count()
        };
        let mut all: Vec<&Followed> = self.requests.iter().filter(|f| count(f) > 0).collect();
        all.sort_by_key(|f| std::cmp::Reverse(count(f)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
pub(crate) mod tests;
