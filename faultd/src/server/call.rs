//! One call at the data plane: its route and phase, the decision drawn for it, and carrying it out (waiting,
//! answering, trickling, proxying, holding, or taking the socket back); a call that matches no route is answered
//! 404 or forwarded to `unmatched.proxy`.

use super::*;

/// `request` forwarded to `upstream`: the upstream's answer, 502 with the reason, or 508 at a loop (counted). A
/// route's `proxy` and the configuration's `unmatched.proxy` both forward through here.
pub(super) async fn forwarded(
    shared: &Shared,
    upstream: &crate::behaviours::proxy::Proxy,
    request: Request<Incoming>,
) -> Response<DataBody> {
    match Box::pin(upstream.forward(&shared.proxy, request)).await {
        Ok(answer) => answer.map(|b| b.map_err(|e| Box::new(e) as BodyError).boxed_unsync()),
        Err((StatusCode::LOOP_DETECTED, upstream)) => {
            shared.recorder.loop_detected();
            crate::loops::loop_detected(&upstream).map(|b| full(Bytes::from(b)))
        }
        Err((status, message)) => plain(status, message),
    }
}

/// A call that is never answered: its guard, held by the stream's future until the caller gives up.
pub(super) struct Held(pub(super) CallGuard);

/// Holds `guard` until the future is dropped (the caller resets the stream or closes the connection).
pub(super) async fn hold<T>(guard: CallGuard) -> T {
    let _held = guard;
    std::future::pending().await
}

/// Handles one call: an HTTP/1.1 request, or an HTTP/2 stream (`h2` holds its connection's stream counts).
pub(super) async fn call(
    shared: Arc<Shared>,
    takeover: Arc<TakeoverRequest>,
    h2: Option<Arc<Streams>>,
    request: Request<Incoming>,
) -> Result<Response<DataBody>, Held> {
    let now = Instant::now();
    let stream_number = h2.as_ref().map(|s| s.opened());
    let found = {
        let live = shared.live();
        let plan = live.plan.clone();
        match plan.table.find(request.method(), request.uri().path()) {
            Some(route) => Ok((live.resolve(route, now), route, plan)),
            // The read guard ends with this block: an unmatched call may be forwarded, and awaits.
            None => Err(plan),
        }
    };
    let (plan, route, resolved) = match found {
        Ok((resolved, route, plan)) => (plan, route, resolved),
        Err(plan) => {
            shared
                .recorder
                .unmatched(request.method().as_str(), request.uri().path());
            if let Some(upstream) = plan.config.unmatched.as_ref().and_then(|u| u.proxy()) {
                return Ok(forwarded(&shared, upstream, request).await);
            }
            let body = format!(
                "faultd: no route matches {} {}\n",
                request.method(),
                request.uri().path()
            );
            return Ok(plain(StatusCode::NOT_FOUND, body));
        }
    };
    let plan_route = &plan.routes[route];
    let grpc = GrpcCall::of(&request);
    let mut guard =
        shared
            .recorder
            .arrive_at(plan_route.recorder.clone(), resolved.phase.clone(), now);
    let n = plan_route
        .calls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let draws = CallDraws::new(plan.seed, plan_route.key, n);
    let decision = decide(
        resolved.from.as_deref(),
        &resolved.to,
        resolved.weight,
        draws,
    );
    // Only a proxied call needs the request's head past this point. The head shares hyper's 8 KiB read buffer,
    // and hyper reserves a fresh one to watch for the caller's close while the call is pending, so keeping the head
    // through a long delay would hold both buffers. The body stays with the call, as it would untouched.
    // A call answered at once keeps the head's header map, emptied, for its answer's headers: hyper hands an
    // answer's map on to parse the connection's next request into, so on a keep-alive connection one map goes
    // round from call to call instead of a new one being cloned for each answer and grown for each request.
    let (request, mut body, mut spare_headers) = if resolved.to.behaviour.proxy.is_some() {
        (Some(request), None, None)
    } else {
        let (head, body) = request.into_parts();
        let spare = decision.delay.is_zero().then(|| {
            let mut headers = head.headers;
            headers.clear();
            headers
        });
        (None, Some(body), spare)
    };

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
        guard.set_outcome(Outcome::Hang);
        if h2.is_some() {
            // Never answer, holding only this stream: the connection carries other calls. hyper drops the stream's
            // future (and the guard, recording the hang) when the caller resets the stream or closes the connection.
            return Err(Held(guard));
        }
        // Never answer. The guard moves to the connection, which drops hyper (and this future) and holds the bare
        // socket until the caller closes it; the guard is dropped then, recording the hang.
        takeover.request(Takeover::Hang(guard));
        return std::future::pending().await;
    }
    let grpc_response = resolved.to.behaviour.grpc_response.as_ref();
    let echoed = match (&grpc, decision.action, body.take()) {
        (Some(_), CallAction::Healthy, Some(b)) if grpc_response.is_some_and(|r| r.echo()) => {
            // Boxed, as the proxy's forward below: the call's future is moved into hyper's slot on every call,
            // so it stays the size of the healthy path's state rather than that of its rarest await.
            Some(Box::pin(grpc::first_message(b)).await)
        }
        (_, _, b) => {
            body = b;
            None
        }
    };
    // A message a gRPC server could not read is refused at once, with the status such a server gives it.
    let echoed = match echoed {
        Some(Err(bad)) => {
            guard.set_grpc_status(bad.code);
            let trailers = grpc::trailers(bad.code, Some(&bad.message), &Default::default());
            let response = grpc::answer(&Default::default(), None, trailers);
            return Ok(guarded(response.map(BodyExt::boxed_unsync), guard));
        }
        Some(Ok(message)) => Some(message),
        None => None,
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
        match &shared.deadlines {
            Some(deadlines) => deadlines.wait_until(deadline).await,
            None => tokio::time::sleep_until(deadline).await,
        }
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
        guard.set_grpc_status(GrpcCode::DEADLINE_EXCEEDED);
        let trailers = grpc::trailers(
            GrpcCode::DEADLINE_EXCEEDED,
            Some("deadline exceeded"),
            &Default::default(),
        );
        let response = grpc::answer(&Default::default(), None, trailers);
        return Ok(guarded(response.map(BodyExt::boxed_unsync), guard));
    }

    let raw = match decision.action {
        CallAction::Reset => Some((Takeover::Reset, Outcome::Reset)),
        CallAction::Empty => Some((Takeover::Empty, Outcome::Empty)),
        CallAction::Malformed => Some((Takeover::Malformed, Outcome::Malformed)),
        // HTTP/1.1 has no stream to reset apart from its connection.
        CallAction::RstStream(_) if h2.is_none() => Some((Takeover::Reset, Outcome::Reset)),
        _ => None,
    };
    if let Some((action, outcome)) = raw {
        guard.set_outcome(outcome);
        takeover.request(action);
        return std::future::pending().await;
    }

    let behaviour = &resolved.to;
    let response = match decision.action {
        CallAction::RstStream(code) => {
            guard.set_outcome(Outcome::Reset);
            let mut response = plain(StatusCode::OK, "");
            response.extensions_mut().insert(ResetStream(code));
            response
        }
        CallAction::GrpcError(e) => {
            let metadata = header_map(&e.metadata).unwrap_or_default();
            match grpc {
                Some(_) => {
                    guard.set_grpc_status(e.code);
                    let mut trailers = grpc::trailers(e.code, e.message.as_deref(), &metadata);
                    if let Some(v) = e
                        .status_details()
                        .and_then(|d| axum::http::HeaderValue::from_str(d).ok())
                    {
                        trailers.insert(
                            axum::http::HeaderName::from_static("grpc-status-details-bin"),
                            v,
                        );
                    }
                    // A stream that breaks partway: the healthy answer's first messages, then the status.
                    let (initial, message, interval) = match grpc_response {
                        Some(r) => (r.metadata(), r.message(), r.stream().1),
                        None => (HeaderMap::new(), Bytes::new(), Duration::ZERO),
                    };
                    let response = grpc::answer_stream(
                        &initial,
                        grpc::frame(&message),
                        e.after_messages,
                        interval,
                        trailers,
                    );
                    guarded(response.map(BodyExt::boxed_unsync), guard)
                }
                None => {
                    let mut response = plain(
                        grpc::http_status_of(e.code),
                        e.message.clone().unwrap_or_default(),
                    );
                    response.headers_mut().extend(metadata);
                    guarded(response, guard)
                }
            }
        }
        CallAction::Error(e) => {
            let mut response =
                Response::new(Full::new(Bytes::from(e.body.clone().unwrap_or_default())));
            *response.status_mut() =
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if let Ok(headers) = header_map(&e.headers) {
                response.headers_mut().extend(headers);
            }
            guarded(
                response.map(|b| b.map_err(|never| match never {}).boxed_unsync()),
                guard,
            )
        }
        CallAction::FailFirst(status) => {
            let mut response = plain(
                StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "",
            );
            *response.body_mut() = full(Bytes::from_static(b"faultd: fail_first\n"));
            guarded(response, guard)
        }
        _ if grpc.is_some() && behaviour.behaviour.proxy.is_none() => {
            guard.set_grpc_status(GrpcCode::OK);
            let message = echoed
                .or_else(|| grpc_response.map(|r| r.message()))
                .unwrap_or_default();
            let (metadata, trailing) = grpc_response
                .map(|r| (r.metadata(), r.trailers()))
                .unwrap_or_default();
            let trailers = grpc::trailers(GrpcCode::OK, None, &trailing);
            let (count, interval) = grpc_response.map_or((1, Duration::ZERO), |r| r.stream());
            let response =
                grpc::answer_stream(&metadata, grpc::frame(&message), count, interval, trailers);
            guarded(response.map(BodyExt::boxed_unsync), guard)
        }
        _ => match (&behaviour.behaviour.proxy, request) {
            (Some(upstream), Some(request)) => {
                guarded(forwarded(&shared, upstream, request).await, guard)
            }
            _ => {
                let healthy = &behaviour.healthy;
                let headers = match spare_headers.take() {
                    Some(mut headers) => {
                        for (name, value) in &healthy.headers {
                            headers.append(name.clone(), value.clone());
                        }
                        headers
                    }
                    None => healthy.headers.clone(),
                };
                let mut head = Response::new(());
                *head.status_mut() = healthy.status;
                *head.headers_mut() = headers;
                // A whole body is guarded as it is, not boxed first: one allocation per answer instead of two.
                match behaviour.behaviour.slow_body {
                    Some(slow) => guarded(
                        head.map(|()| TrickleBody::new(healthy.body.clone(), slow.rate).boxed()),
                        guard,
                    ),
                    None => guarded(head.map(|()| whole(healthy.body.clone())), guard),
                }
            }
        },
    };
    Ok(response)
}
