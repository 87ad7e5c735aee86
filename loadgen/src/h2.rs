//! HTTP/2 and gRPC: the same open model over multiplexed streams, with h2's client.
//!
//! An arrival takes a free stream on one of `connections` HTTP/2 connections (opened on demand, with prior
//! knowledge in cleartext, or by ALPN `h2` over TLS for an `https://` target); a connection holds at most `streams_per_connection` streams, or the server's
//! SETTINGS_MAX_CONCURRENT_STREAMS if lower. An arrival that finds every connection at its limit is `dropped` at
//! its intended time: h2 would otherwise queue the stream inside the client, a wait no one sees. Latency counts
//! from the intended time as for HTTP/1.1; the actual send is when the stream opens.
//!
//! Outcomes: a gRPC answer is classified by its `grpc-status` (trailers, or headers for a status-only answer):
//! OK is `ok`; a status in `fallback_grpc_status` or the `fallback_header` in the metadata is `fallback`;
//! DEADLINE_EXCEEDED is `timeout` (as is the client's own deadline); INVALID_ARGUMENT, NOT_FOUND,
//! ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION and OUT_OF_RANGE are `client_error`;
//! every other status is `server_error`. A stream reset or a connection that fails or goes away under a call is
//! `connect_error`; a failed handshake keeps its reason in `connect_errors`, as HTTP/1.1's does. A plain HTTP/2
//! answer is classified by its status, as HTTP/1.1's.
//!
//! Not for HTTP/1.1, whose hot path (`send`, `dispatch`) this leaves untouched.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use faultline_proto::MessageDescriptor;
use faultline_units::GrpcCode;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use rand::rngs::StdRng;
use rand::Rng;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::dispatch::Issue;
use crate::grpc_message::{self, Body};
use crate::mix::{parse_path, render_path, PathPart};
use crate::outcome::{Classifier, Outcome};
use crate::recorder::Recorder;
use crate::send::Answer;
use crate::spec::RequestTemplate;
use crate::target::Target;
use crate::tls::{Stream, TlsClient};
use crate::LoadError;

/// One template, ready to render: the head without its path, the body, the client deadline.
#[derive(Debug, Clone)]
struct H2Template {
    method: Method,
    path: Vec<PathPart>,
    headers: HeaderMap,
    body: Body,
    grpc: bool,
    deadline: Option<Duration>,
    /// What the sample of its answers is called in the report: `grpc /pkg.Service/Method`, `GET /path`.
    name: String,
    /// The type a gRPC answer decodes as, when the template names its `.proto` files.
    answer: Option<MessageDescriptor>,
}

/// The compiled HTTP/2 mix.
#[derive(Debug, Clone)]
pub(crate) struct H2Mix {
    scheme_authority: String,
    templates: Vec<H2Template>,
    cumulative: Vec<u64>,
}

/// One rendered request.
struct H2Request {
    request: Request<()>,
    body: Bytes,
    grpc: bool,
    deadline: Option<Duration>,
    /// The template's index in the mix.
    template: usize,
}

impl H2Mix {
    /// Compiles and checks every template: one method (or `grpc`), a valid path, valid metadata and headers, a
    /// message in hex, from a readable file, or as JSON that fits its type in the template's `.proto` files.
    pub(crate) fn compile(
        templates: &[RequestTemplate],
        target: &Target,
    ) -> Result<H2Mix, LoadError> {
        let mut compiled = Vec::with_capacity(templates.len());
        let mut cumulative = Vec::with_capacity(templates.len());
        let mut total = 0u64;
        let mut protos = grpc_message::ProtoCache::default();
        for (i, t) in templates.iter().enumerate() {
            let field = format!("load.requests[{i}]");
            let bad = |field: String, why: String| LoadError::InvalidSpec { field, why };
            let (method, path) = t.method_and_path().map_err(|why| bad(field.clone(), why))?;
            let grpc = t.grpc.is_some();
            if let Some(m) = &t.grpc {
                let segments: Vec<&str> = m.trim_start_matches('/').split('/').collect();
                if !m.starts_with('/')
                    || segments.len() != 2
                    || segments.iter().any(|s| s.is_empty())
                {
                    return Err(bad(
                        format!("{field}.grpc"),
                        format!(
                            "{m:?} is not a gRPC method; write it like /shop.Catalog/GetProduct"
                        ),
                    ));
                }
            }
            let parts = parse_path(path).map_err(|why| bad(field.clone(), why))?;
            if !grpc
                && (t.message.is_some()
                    || t.message_file.is_some()
                    || t.deadline.is_some()
                    || !t.proto.is_empty()
                    || t.proto_set.is_some())
            {
                return Err(bad(
                    field,
                    "message, message_file, proto and deadline belong to gRPC calls (`grpc: /pkg.Service/Method`)"
                        .into(),
                ));
            }
            let mut headers = HeaderMap::new();
            for (group, map) in [("headers", &t.headers), ("metadata", &t.metadata)] {
                for (name, value) in map {
                    let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                        bad(
                            format!("{field}.{group}"),
                            format!("{name:?} is not a valid header name"),
                        )
                    })?;
                    let v = HeaderValue::from_str(value).map_err(|_| {
                        bad(
                            format!("{field}.{group}"),
                            format!("{value:?} is not a valid header value"),
                        )
                    })?;
                    headers.append(n, v);
                }
            }
            let (body, answer) = if let Some(m) = &t.grpc {
                let message = grpc_message::compile(t, m, &field, &mut protos)?;
                headers.insert(
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/grpc"),
                );
                headers.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
                if let Some(d) = t.deadline {
                    if d.get().is_zero() {
                        return Err(bad(
                            format!("{field}.deadline"),
                            "a deadline must be longer than 0s".into(),
                        ));
                    }
                    headers.insert(
                        HeaderName::from_static("grpc-timeout"),
                        grpc_timeout(d.get()),
                    );
                }
                (message.body, message.answer)
            } else {
                let body = Bytes::from(t.body.clone().unwrap_or_default());
                (Body::Fixed(body), None)
            };
            let sample = render_path(&parts, u64::MAX, &mut |_, hi| hi);
            if sample.parse::<hyper::http::uri::PathAndQuery>().is_err() {
                return Err(bad(
                    field,
                    format!("the path {path:?} is not a valid URL path"),
                ));
            }
            total += u64::from(t.weight);
            cumulative.push(total);
            compiled.push(H2Template {
                method: Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET),
                path: parts,
                headers,
                body,
                grpc,
                deadline: t.deadline.map(|d| d.get()),
                name: match &t.grpc {
                    Some(m) => format!("grpc {m}"),
                    None => format!("{method} {path}"),
                },
                answer,
            });
        }
        Ok(H2Mix {
            scheme_authority: format!("http://{}", target.authority),
            templates: compiled,
            cumulative,
        })
    }

    fn render(&self, index: u64, rng: &mut StdRng) -> H2Request {
        let total = self.cumulative.last().copied().unwrap_or(0);
        let pick = if self.templates.len() == 1 || total == 0 {
            0
        } else {
            rng.random_range(0..total)
        };
        let which = self
            .cumulative
            .partition_point(|&c| c <= pick)
            .min(self.templates.len() - 1);
        let t = &self.templates[which];
        let path = render_path(&t.path, index, &mut |lo, hi| rng.random_range(lo..=hi));
        let mut request = Request::new(());
        *request.method_mut() = t.method.clone();
        *request.uri_mut() = format!("{}{path}", self.scheme_authority)
            .parse()
            .unwrap_or_default();
        *request.headers_mut() = t.headers.clone();
        H2Request {
            request,
            body: t.body.render(index, rng),
            grpc: t.grpc,
            deadline: t.deadline,
            template: which,
        }
    }
}

impl H2Mix {
    fn template(&self, index: usize) -> &H2Template {
        &self.templates[index.min(self.templates.len() - 1)]
    }
}

/// A `grpc-message` as written: gRPC percent-encodes it (every byte outside printable ASCII, and `%`).
fn percent_decoded(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).and_then(|&b| hex(b)),
            raw.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `grpc-timeout` for a deadline: the coarsest unit that keeps it exact within 8 digits.
fn grpc_timeout(d: Duration) -> HeaderValue {
    let micros = d.as_micros();
    let value = if micros < 100_000_000 {
        format!("{micros}u")
    } else {
        format!("{}m", d.as_millis().min(99_999_999))
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("1S"))
}

/// How gRPC answers map to outcome classes.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrpcClassifier {
    pub(crate) fallback_status: Vec<GrpcCode>,
    pub(crate) http: Classifier,
}

impl GrpcClassifier {
    pub(crate) fn classify(&self, code: GrpcCode, marked: bool) -> Outcome {
        if marked || self.fallback_status.contains(&code) {
            return Outcome::Fallback;
        }
        match code {
            GrpcCode::OK => Outcome::Ok,
            GrpcCode::DEADLINE_EXCEEDED => Outcome::Timeout,
            code if code.is_client_error() => Outcome::ClientError,
            _ => Outcome::ServerError,
        }
    }
}

/// One connection slot: the connection (opened on demand, replaced when it dies) and the streams it carries.
struct Slot {
    conn: tokio::sync::Mutex<Option<Live>>,
    active: AtomicU32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS as last seen (u32::MAX until known).
    server_max: AtomicU32,
}

#[derive(Clone)]
struct Live {
    send: h2::client::SendRequest<Bytes>,
    alive: Arc<AtomicBool>,
}

/// The HTTP/2 side of a run: the mix, the connections, the recorder. The dispatcher hands it arrivals.
pub(crate) struct H2Exchanges {
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) classifier: GrpcClassifier,
    pub(crate) fallback_header: Option<HeaderName>,
    pub(crate) timeout: Duration,
    pub(crate) origin: Instant,
    pub(crate) runtime: tokio::runtime::Handle,
    authority: String,
    mix: H2Mix,
    slots: Vec<Slot>,
    streams_per_connection: u32,
    next: AtomicUsize,
    /// The TLS client of an `https://` target (asking for `h2` by ALPN); `None` in cleartext.
    tls: Option<TlsClient>,
}

impl H2Exchanges {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        recorder: Arc<Recorder>,
        classifier: GrpcClassifier,
        fallback_header: Option<HeaderName>,
        timeout: Duration,
        origin: Instant,
        runtime: tokio::runtime::Handle,
        target: &Target,
        mix: H2Mix,
        connections: u32,
        streams_per_connection: u32,
        tls: Option<TlsClient>,
    ) -> H2Exchanges {
        H2Exchanges {
            recorder,
            classifier,
            fallback_header,
            timeout,
            origin,
            runtime,
            authority: target.authority.as_str().to_string(),
            mix,
            slots: (0..connections.max(1))
                .map(|_| Slot {
                    conn: tokio::sync::Mutex::new(None),
                    active: AtomicU32::new(0),
                    server_max: AtomicU32::new(u32::MAX),
                })
                .collect(),
            streams_per_connection: streams_per_connection.max(1),
            next: AtomicUsize::new(0),
            tls,
        }
    }

    /// Claims a stream on the first connection (from a rotating start) below its limit.
    fn claim(&self) -> Option<usize> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|k| (start + k) % n).find(|&i| {
            let slot = &self.slots[i];
            let limit = self
                .streams_per_connection
                .min(slot.server_max.load(Ordering::Relaxed));
            slot.active
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                    (a < limit).then_some(a + 1)
                })
                .is_ok()
        })
    }

    /// The slot's live connection, opened if it has none or its last one died. `fresh` says it was opened now.
    async fn connection(&self, slot: &Slot) -> Result<(Live, bool), ()> {
        let mut conn = slot.conn.lock().await;
        if let Some(live) = conn.as_ref().filter(|l| l.alive.load(Ordering::Acquire)) {
            return Ok((live.clone(), false));
        }
        *conn = None;
        let tcp = TcpStream::connect(self.authority.as_str())
            .await
            .map_err(|_| ())?;
        let _ = tcp.set_nodelay(true);
        let stream = match &self.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let stream = tls.handshake(tcp).await;
                match stream {
                    Ok(stream) if stream.alpn() == Some(b"h2".as_slice()) => stream,
                    Ok(_) => {
                        self.recorder
                            .connect_error("tls: the server did not choose h2 by ALPN".into());
                        return Err(());
                    }
                    Err(reason) => {
                        self.recorder.connect_error(reason);
                        return Err(());
                    }
                }
            }
        };
        let (send, connection) = h2::client::handshake(stream).await.map_err(|_| ())?;
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        self.runtime.spawn(async move {
            let _ = connection.await;
            flag.store(false, Ordering::Release);
        });
        let live = Live { send, alive };
        *conn = Some(live.clone());
        Ok((live, true))
    }

    /// One exchange on slot `i`; `Err` is `connect_error`. Returns the outcome and when the stream opened.
    async fn exchange(
        &self,
        i: usize,
        request: &H2Request,
    ) -> (Result<Outcome, ()>, Option<Instant>) {
        let slot = &self.slots[i];
        let mut retried = false;
        loop {
            let Ok((live, fresh)) = self.connection(slot).await else {
                return (Err(()), None);
            };
            let mut send = match live.send.clone().ready().await {
                Ok(s) => s,
                Err(_) => {
                    // Gone away or closed while idle: nothing of this call was sent, so one fresh try.
                    live.alive.store(false, Ordering::Release);
                    if fresh || retried {
                        return (Err(()), None);
                    }
                    retried = true;
                    continue;
                }
            };
            let max = send.current_max_send_streams();
            slot.server_max
                .store(u32::try_from(max).unwrap_or(u32::MAX), Ordering::Relaxed);
            let actual = Instant::now();
            let outcome = self.stream(&mut send, request).await;
            return (outcome, Some(actual));
        }
    }

    async fn stream(
        &self,
        send: &mut h2::client::SendRequest<Bytes>,
        request: &H2Request,
    ) -> Result<Outcome, ()> {
        let (response, mut body_tx) = send
            .send_request(request.request.clone(), request.body.is_empty())
            .map_err(|_| ())?;
        if !request.body.is_empty() {
            // The server may answer (or reset) before it reads the request; its answer is what counts.
            let _ = body_tx.send_data(request.body.clone(), true);
        }
        let response = response.await.map_err(|_| ())?;
        let (parts, mut body) = response.into_parts();
        let marked = |h: &HeaderMap| {
            self.fallback_header
                .as_ref()
                .is_some_and(|f| h.contains_key(f))
        };
        let mut was_marked = marked(&parts.headers);
        let keep = self.recorder.samples.open_for(request.template);
        let mut kept: Vec<Bytes> = Vec::new();
        let mut kept_len = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|_| ())?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if keep && kept_len < crate::samples::MAX_BODY {
                kept_len += chunk.len();
                kept.push(chunk);
            }
        }
        let trailers = body.trailers().await.map_err(|_| ())?.unwrap_or_default();
        was_marked |= marked(&trailers);
        let status = parts.status.as_u16();
        let (outcome, grpc) = if !request.grpc {
            let outcome = self.classifier.http.classify(Answer {
                status,
                marked: was_marked,
            });
            (outcome, None)
        } else {
            let status_header = trailers
                .get("grpc-status")
                .or_else(|| parts.headers.get("grpc-status"));
            let code = if status != 200 {
                GrpcCode::from_http_status(status)
            } else {
                match status_header {
                    Some(v) => GrpcCode::from_wire(v.as_bytes()),
                    // An answer with no status is an error of the server's (gRPC clients say INTERNAL).
                    None => GrpcCode::INTERNAL,
                }
            };
            let message = trailers
                .get("grpc-message")
                .or_else(|| parts.headers.get("grpc-message"))
                .map(|m| percent_decoded(m.as_bytes()))
                .filter(|m| !m.is_empty());
            (
                self.classifier.classify(code, was_marked),
                Some((code.name().to_string(), message)),
            )
        };
        if keep {
            let t = self.mix.template(request.template);
            self.recorder.samples.offer(crate::samples::Seen {
                template: request.template,
                request: &t.name,
                answer_type: t.answer.as_ref(),
                class: outcome,
                status,
                grpc,
                body: &kept,
                at_s: self.origin.elapsed().as_secs_f64(),
            });
        }
        Ok(outcome)
    }
}

impl Issue for H2Exchanges {
    fn origin(&self) -> Instant {
        self.origin
    }

    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        // Always `None`: a replay's requests are HTTP/1.1 (a replay has no templates to ask for HTTP/2).
        _replayed: Option<crate::send::Wire>,
        rng: &mut StdRng,
        max_in_flight: u64,
    ) {
        if self.recorder.in_flight() >= max_in_flight {
            self.recorder.dropped(intended);
            return;
        }
        let Some(slot) = self.claim() else {
            // Every connection is at its stream limit: refused now rather than queued unseen inside h2.
            self.recorder.dropped(intended);
            return;
        };
        let request = self.mix.render(index, rng);
        let now = Instant::now();
        self.recorder
            .sent(intended, now.saturating_duration_since(self.origin));
        let this = self.clone();
        self.runtime
            .spawn(async move { this.call(slot, request, intended, now).await });
    }
}

impl H2Exchanges {
    /// Sends `request` on a stream of slot `slot` (claimed by the caller, released here) and records its outcome;
    /// the client's timeout counts from the later of the intended time and `now`, when it was handed over.
    async fn call(&self, slot: usize, request: H2Request, intended: Duration, now: Instant) {
        // Its slot was claimed at hand-over, so nothing here waits on the service before it runs: any delay
        // until then is the generator's own.
        let ready = Instant::now();
        let timeout = request
            .deadline
            .map_or(self.timeout, |d| d.min(self.timeout));
        let deadline = now.max(self.origin + intended) + timeout;
        let from_origin = |t: Instant| t.saturating_duration_since(self.origin);
        let mut actual = None;
        let result = tokio::select! {
            biased;
            (r, opened) = self.exchange(slot, &request) => { actual = opened; Some(r) }
            _ = tokio::time::sleep_until(deadline) => None,
        };
        let outcome = match result {
            // Dropping the stream's future sends RST_STREAM(CANCEL), as a gRPC client does at its deadline.
            None => Outcome::Timeout,
            Some(Err(())) => Outcome::ConnectError,
            Some(Ok(o)) => o,
        };
        self.slots[slot].active.fetch_sub(1, Ordering::AcqRel);
        let done = Instant::now();
        self.recorder.completed(
            outcome,
            intended,
            from_origin(ready),
            Some(from_origin(actual.unwrap_or(now))),
            from_origin(done),
        );
    }

    /// The closed model over HTTP/2: `users` loops that each send on a stream, wait for its answer and send
    /// again, the streams spread over the connections as the open model spreads them. As over HTTP/1.1, the
    /// intended time is the actual send, so this model cannot see queueing: it measures saturation, side by side
    /// with closed-model peers (h2load).
    pub(crate) async fn run_closed(
        self: Arc<Self>,
        users: u32,
        duration: Duration,
        seed: u64,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> bool {
        let end = self.origin + duration;
        let mut loops = tokio::task::JoinSet::new();
        for user in 0..users {
            let this = self.clone();
            let stop = stop.clone();
            loops.spawn(async move {
                let mut rng = crate::dispatch::user_rng(seed, user);
                let mut index = u64::from(user);
                loop {
                    let now = Instant::now();
                    if now >= end || *stop.borrow() {
                        break;
                    }
                    let Some(slot) = this.claim() else {
                        // More users than streams: this one waits for a stream as h2load's clients do.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    let intended = now.saturating_duration_since(this.origin);
                    let request = this.mix.render(index, &mut rng);
                    this.recorder.sent(intended, intended);
                    this.call(slot, request, intended, now).await;
                    index += u64::from(users);
                }
            });
        }
        while loops.join_next().await.is_some() {}
        let stopped = *stop.borrow();
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_grpc_status_falls_in_its_class() {
        let c = GrpcClassifier {
            fallback_status: vec![GrpcCode::UNAVAILABLE],
            http: Classifier::default(),
        };
        assert_eq!(c.classify(GrpcCode::OK, false), Outcome::Ok);
        assert_eq!(c.classify(GrpcCode::OK, true), Outcome::Fallback);
        assert_eq!(c.classify(GrpcCode::UNAVAILABLE, false), Outcome::Fallback);
        assert_eq!(
            c.classify(GrpcCode::DEADLINE_EXCEEDED, false),
            Outcome::Timeout
        );
        for code in [
            GrpcCode::INVALID_ARGUMENT,
            GrpcCode::NOT_FOUND,
            GrpcCode::ALREADY_EXISTS,
            GrpcCode::PERMISSION_DENIED,
            GrpcCode::UNAUTHENTICATED,
            GrpcCode::FAILED_PRECONDITION,
            GrpcCode::OUT_OF_RANGE,
        ] {
            assert_eq!(c.classify(code, false), Outcome::ClientError, "{code}");
        }
        for code in [
            GrpcCode::RESOURCE_EXHAUSTED,
            GrpcCode::INTERNAL,
            GrpcCode::UNKNOWN,
            GrpcCode::CANCELLED,
            GrpcCode::UNIMPLEMENTED,
        ] {
            assert_eq!(c.classify(code, false), Outcome::ServerError, "{code}");
        }
    }

    #[test]
    fn grpc_templates_parse_and_mistakes_name_their_field() {
        let spec: crate::LoadSpec = serde_saphyr::from_str(
            "rate: 10/s\nrequests:\n  - { grpc: /shop.Catalog/GetProduct, message: 0a02, metadata: { x-a: b }, deadline: 250ms }\n",
        )
        .unwrap();
        spec.validate().unwrap();
        assert!(spec.is_http2());
        let cases = [
            ("{ grpc: shop.Catalog/Get }", "load.requests[0].grpc"),
            (
                "{ grpc: /shop.Catalog/Get, message: 0g }",
                "load.requests[0].message",
            ),
            ("{ get: /x, deadline: 1s }", "load.requests[0]"),
            ("{ grpc: /a.B/C, get: /x }", "load.requests[0]"),
        ];
        for (template, field) in cases {
            let spec: crate::LoadSpec =
                serde_saphyr::from_str(&format!("rate: 10/s\nrequests: [ {template} ]")).unwrap();
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.starts_with(field), "{template}: {e}");
        }
        let mixed: crate::LoadSpec =
            serde_saphyr::from_str("rate: 10/s\nrequests: [ { grpc: /a.B/C }, { get: /x } ]")
                .unwrap();
        let e = mixed.validate().unwrap_err().to_string();
        assert!(e.contains("all HTTP/1.1 or all HTTP/2"), "{e}");
    }

    #[test]
    fn a_grpc_message_is_read_back_from_its_percent_encoding() {
        assert_eq!(
            percent_decoded(b"inventory: 50%25 down %E2%9C%97"),
            "inventory: 50% down \u{2717}"
        );
        assert_eq!(percent_decoded(b"bad %zz and %4"), "bad %zz and %4");
    }

    #[test]
    fn grpc_timeouts_keep_the_deadline_within_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(grpc_timeout(Duration::from_secs(300)), "300000m");
    }
}
