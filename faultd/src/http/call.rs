//! One call at the data plane, in the order it happens: its route and phase, the matched entry that takes it if
//! one does, the decision drawn for it, the wait until it is due, then the one arm of `actions` its decision
//! names. A call that matches no route is answered by `unmatched`.
//!
//! Not for: what each decision does to the call (`actions`), deciding (`crate::behaviours::decide`) or the
//! connection it came on (`listener`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::actions;
use super::grpc::{self, GrpcCall};
use super::http2::Streams;
use super::shared::{InstanceOf, Shared};
use super::takeover::{Held, Takeover, TakeoverRequest};
use super::unmatched;
use crate::behaviours::{
    decide, CallAction, CallDecision, CallFacts, ConnectionCounts, DataBody, GoAwayMode,
};
use crate::deadlines;
use crate::draw::CallDraws;
use crate::recorder::{CallGuard, Outcome};
use crate::schedule::{Plan, Resolved};

/// Handles one call: an HTTP/1.1 request, or an HTTP/2 stream (`h2` holds its connection's stream counts).
/// `counts` holds the connection's counts of the calls matched entries took.
pub(super) async fn call(
    shared: Arc<Shared>,
    instance: Option<Arc<InstanceOf>>,
    takeover: Arc<TakeoverRequest>,
    h2: Option<Arc<Streams>>,
    counts: Arc<ConnectionCounts>,
    request: Request<Incoming>,
) -> Result<Response<DataBody>, Held> {
    let now = Instant::now();
    let stream_number = h2.as_ref().map(|s| s.opened());
    let (plan, route, mut resolved) = match route(&shared, instance.as_deref(), &request, now) {
        Ok(found) => found,
        Err(plan) => return Ok(unmatched::answer(&shared, &plan, request).await),
    };
    let facts = CallFacts {
        method: request.method(),
        uri: request.uri(),
        headers: request.headers(),
    };
    // A call a matched entry takes gets the entry's behaviour whole, whatever ramp the route is on.
    if let Some(entry) = resolved.to.matched_entry(&facts, &counts) {
        resolved = Resolved {
            from: None,
            to: entry.clone(),
            weight: 1.0,
            phase: resolved.phase,
        };
    }
    let grpc = GrpcCall::of(&request);
    let (mut guard, draws) = arrive(&shared, &plan, route, instance.as_deref(), &resolved, now);
    if let Some(keys) = &plan.keys {
        guard.set_key(keys.read(request.headers(), grpc.and_then(|g| g.timeout)));
    }
    let decision = decide(
        resolved.from.as_deref(),
        &resolved.to,
        resolved.weight,
        draws,
    );
    let (request, body, spare_headers) = split(request, &resolved, &decision);

    if let (Some(streams), Some(n), Some(goaway)) =
        (&h2, stream_number, resolved.to.behaviour.goaway)
    {
        if n >= goaway.after && streams.take_goaway() {
            match goaway.mode {
                GoAwayMode::Graceful => streams.graceful.notify_one(),
                GoAwayMode::Abrupt => {
                    // The connection drops hyper and every stream's future with it, this one's guard included.
                    guard.set_outcome(Outcome::Reset);
                    takeover.request(Takeover::GoAway(goaway.code));
                    return std::future::pending().await;
                }
            }
        }
    }
    if decision.action == CallAction::Hang {
        return actions::hang(guard, h2.is_some(), &takeover).await;
    }
    let grpc_response = resolved.to.behaviour.grpc_response.as_ref();
    let echo = grpc.is_some()
        && decision.action == CallAction::Healthy
        && grpc_response.is_some_and(|r| r.echo());
    let (echoed, body) = match body {
        Some(b) if echo => {
            // Boxed, as the proxy's forward: the call's future is moved into hyper's slot on every call, so it
            // stays the size of the healthy path's state rather than that of its rarest await.
            match Box::pin(grpc::first_message(b)).await {
                // A message a gRPC server could not read is refused at once, with the status such a server
                // gives it.
                Err(bad) => return Ok(actions::grpc_unreadable(bad, guard)),
                Ok(message) => (Some(message), None),
            }
        }
        b => (None, b),
    };

    let mut deadline = guard.arrival() + decision.delay;
    // A gRPC caller's deadline ends the call as a gRPC server would: DEADLINE_EXCEEDED when it passes.
    let grpc_deadline = grpc
        .and_then(|g| g.timeout)
        .map(|t| guard.arrival() + t)
        .filter(|d| *d < deadline);
    if let Some(d) = grpc_deadline {
        deadline = d;
    }
    // A call with no delay is due at its arrival: answered at once, without reading the clock again.
    if deadline > guard.arrival() {
        deadlines::wait_until(shared.deadlines.as_ref(), deadline).await;
    }
    drop(body);
    // The answer is due now, unless it takes time of its own: faultd's lateness is what the call outlasts it by.
    let paced = resolved.to.behaviour.proxy.is_some()
        || resolved.to.behaviour.slow_body.is_some()
        || grpc_response.is_some_and(|r| !r.stream().1.is_zero());
    if !paced {
        guard.set_due(deadline);
    }
    if grpc_deadline.is_some() {
        return Ok(actions::grpc_deadline_exceeded(guard));
    }

    Ok(match decision.action {
        CallAction::Reset => {
            actions::take_socket(Takeover::Reset, Outcome::Reset, guard, &takeover).await
        }
        CallAction::Empty => {
            actions::take_socket(Takeover::Empty, Outcome::Empty, guard, &takeover).await
        }
        CallAction::Malformed => {
            actions::take_socket(Takeover::Malformed, Outcome::Malformed, guard, &takeover).await
        }
        // HTTP/1.1 has no stream to reset apart from its connection.
        CallAction::RstStream(_) if h2.is_none() => {
            actions::take_socket(Takeover::Reset, Outcome::Reset, guard, &takeover).await
        }
        CallAction::RstStream(code) => actions::rst_stream(code, guard),
        CallAction::GrpcError(e) => actions::grpc_error(e, grpc, grpc_response, guard),
        CallAction::Error(e) => actions::error(e, guard),
        CallAction::FailFirst(status) => actions::fail_first(status, guard),
        // A hang never gets here: it was held above.
        CallAction::Healthy | CallAction::Hang | CallAction::Truncated => {
            let answer = actions::Healthy {
                grpc,
                echoed,
                request,
                spare_headers,
                cut: decision.action == CallAction::Truncated,
            };
            actions::healthy(&shared, &resolved.to, answer, guard).await
        }
    })
}

/// Records the call's arrival, on its route and on the instance it reached if it came to one, with the draws of
/// its fate (an instance draws its own, so that its calls' faults do not depend on the other instances').
fn arrive(
    shared: &Shared,
    plan: &Plan,
    route: usize,
    instance: Option<&InstanceOf>,
    resolved: &Resolved,
    now: Instant,
) -> (CallGuard, CallDraws) {
    let plan_route = &plan.routes[route];
    let on_instance = instance.and_then(|i| {
        plan_route
            .instances
            .get((i.number as usize).checked_sub(1)?)
    });
    match on_instance {
        None => (
            shared
                .recorder
                .arrive_at(plan_route.recorder.clone(), resolved.phase.clone(), now),
            CallDraws::new(
                plan.seed,
                plan_route.key,
                plan_route.calls.fetch_add(1, Ordering::Relaxed),
            ),
        ),
        Some(on) => (
            shared.recorder.arrive_on_instance(
                plan_route.recorder.clone(),
                on.recorder.clone(),
                resolved.phase.clone(),
                now,
            ),
            CallDraws::new(plan.seed, on.key, on.calls.fetch_add(1, Ordering::Relaxed)),
        ),
    }
}

/// The route of `request` with the behaviour it gets at `now`, and the plan it was found in; the plan alone
/// when no route matches. On an instance's listener only that instance of its route matches.
fn route(
    shared: &Shared,
    instance: Option<&InstanceOf>,
    request: &Request<Incoming>,
    now: Instant,
) -> Result<(Arc<Plan>, usize, Resolved), Arc<Plan>> {
    let live = shared.live();
    let plan = live.plan.clone();
    let found = plan.table.find(request.method(), request.uri().path());
    let on = match (found, instance) {
        (Some(route), None) => Some((route, None)),
        (Some(route), Some(i)) => (plan.routes[route].name == i.route
            && i.number >= 1
            && (i.number as usize) <= plan.routes[route].instances.len())
        .then(|| (route, Some(i.number as usize - 1))),
        (None, _) => None,
    };
    match on {
        Some((route, index)) => Ok((plan, route, live.resolve_on(route, index, now))),
        // The read guard ends here: an unmatched call may be forwarded, and awaits.
        None => Err(plan),
    }
}

/// What of the request the call keeps: the whole request for a proxied call, else its body, and the head's
/// emptied header map for a call answered at once.
///
/// Only a proxied call needs the request's head past this point. The head shares hyper's 8 KiB read buffer, and
/// hyper reserves a fresh one to watch for the caller's close while the call is pending, so keeping the head
/// through a long delay would hold both buffers. The body stays with the call, as it would untouched. A call
/// answered at once keeps the head's header map, emptied, for its answer's headers: hyper hands an answer's map
/// on to parse the connection's next request into, so on a keep-alive connection one map goes round from call to
/// call instead of a new one being cloned for each answer and grown for each request.
fn split(
    request: Request<Incoming>,
    resolved: &Resolved,
    decision: &CallDecision<'_>,
) -> (
    Option<Request<Incoming>>,
    Option<Incoming>,
    Option<HeaderMap>,
) {
    if resolved.to.behaviour.proxy.is_some() {
        return (Some(request), None, None);
    }
    let (head, body) = request.into_parts();
    let spare = decision.delay.is_zero().then(|| {
        let mut headers = head.headers;
        headers.clear();
        headers
    });
    (None, Some(body), spare)
}
