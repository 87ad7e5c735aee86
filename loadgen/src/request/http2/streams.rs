//! HTTP/2's issuing: an arrival takes a free stream on one of `connections` HTTP/2 connections (opened on demand,
//! with prior knowledge in cleartext, or by ALPN `h2` over TLS for an `https://` target); a connection holds at
//! most `streams_per_connection` streams, or the server's SETTINGS_MAX_CONCURRENT_STREAMS if lower. An arrival
//! that finds every connection at its limit is `dropped` at its intended time: h2 would otherwise queue the
//! stream inside the client, a wait no one sees. Latency counts from the intended time as for HTTP/1.1; the
//! actual send is when the stream opens.
//!
//! A stream reset or a connection that fails or goes away under a call is `connect_error`; a failed handshake
//! keeps its reason in `connect_errors`, as HTTP/1.1's does.
//!
//! Not for compiling the requests (`compile`) nor for reading the answers (`answer`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderName;
use rand::rngs::StdRng;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::answer;
use super::compile::{Call, Mix};
use crate::outcome::Outcome;
use crate::request::dispatch::Issue;
use crate::request::Run;
use crate::target::Target;
use crate::tls::{Stream, TlsClient};

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

/// The HTTP/2 side of a run: the mix, the connections and their streams. The dispatcher hands it arrivals.
pub(crate) struct Streams {
    run: Run,
    fallback_header: Option<HeaderName>,
    authority: String,
    mix: Mix,
    slots: Vec<Slot>,
    streams_per_connection: u32,
    next: AtomicUsize,
    /// The TLS client of an `https://` target (asking for `h2` by ALPN); `None` in cleartext.
    tls: Option<TlsClient>,
}

impl Streams {
    /// The streams of a run against `target` with `mix`, over at most `connections` connections.
    pub(crate) fn new(
        run: Run,
        fallback_header: Option<HeaderName>,
        target: &Target,
        mix: Mix,
        connections: u32,
        streams_per_connection: u32,
        tls: Option<TlsClient>,
    ) -> Streams {
        Streams {
            run,
            fallback_header,
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
                        self.run
                            .recorder
                            .connect_error("tls: the server did not choose h2 by ALPN".into());
                        return Err(());
                    }
                    Err(reason) => {
                        self.run.recorder.connect_error(reason);
                        return Err(());
                    }
                }
            }
        };
        let (send, connection) = h2::client::handshake(stream).await.map_err(|_| ())?;
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        self.run.runtime.spawn(async move {
            let _ = connection.await;
            flag.store(false, Ordering::Release);
        });
        let live = Live { send, alive };
        *conn = Some(live.clone());
        Ok((live, true))
    }

    /// One exchange on slot `i`; `Err` is `connect_error`. Returns the outcome and when the stream opened.
    async fn exchange(&self, i: usize, call: &Call) -> (Result<Outcome, ()>, Option<Instant>) {
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
            let outcome = answer::stream(
                &mut send,
                call,
                &self.run,
                self.fallback_header.as_ref(),
                &self.mix,
            )
            .await;
            return (outcome, Some(actual));
        }
    }

    /// Sends `call` on a stream of slot `slot` (claimed by the caller, released here) and records its outcome;
    /// the client's timeout counts from the later of the intended time and `now`, when it was handed over.
    async fn call(
        &self,
        slot: usize,
        mut call: Call,
        index: u64,
        intended: Duration,
        now: Instant,
    ) {
        let trace = self.run.tracing.as_ref().map(|t| call.trace(t, index));
        // Its slot was claimed at hand-over, so nothing here waits on the service before it runs: any delay
        // until then is the generator's own.
        let ready = Instant::now();
        let timeout = call
            .deadline
            .map_or(self.run.timeout, |d| d.min(self.run.timeout));
        let deadline = now.max(self.run.origin + intended) + timeout;
        let mut actual = None;
        let result = tokio::select! {
            biased;
            (r, opened) = self.exchange(slot, &call) => { actual = opened; Some(r) }
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
        self.run.completed(
            outcome,
            intended,
            ready,
            Some(actual.unwrap_or(now)),
            done,
            trace,
        );
    }
}

impl Issue for Streams {
    /// A replay's requests are HTTP/1.1 (a replay has no templates to ask for HTTP/2): none is ever given.
    type Given = std::convert::Infallible;

    fn run(&self) -> &Run {
        &self.run
    }

    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        _given: Option<std::convert::Infallible>,
        rng: &mut StdRng,
        max_in_flight: u64,
    ) {
        if self.run.over_cap(intended, max_in_flight) {
            return;
        }
        let Some(slot) = self.claim() else {
            // Every connection is at its stream limit: refused now rather than queued unseen inside h2.
            self.run.recorder.dropped(intended);
            return;
        };
        let call = self.mix.render(index, rng);
        let now = self.run.sent(intended);
        let this = self.clone();
        self.run
            .runtime
            .spawn(async move { this.call(slot, call, index, intended, now).await });
    }

    /// Each user on a stream of its own, the streams spread over the connections as the open model spreads them.
    /// As over HTTP/1.1, this model measures saturation, side by side with closed-model peers (h2load).
    async fn user(
        self: Arc<Self>,
        user: u32,
        users: u32,
        end: Instant,
        mut rng: StdRng,
        stop: watch::Receiver<bool>,
    ) {
        let mut index = u64::from(user);
        loop {
            let now = Instant::now();
            if now >= end || *stop.borrow() {
                break;
            }
            let Some(slot) = self.claim() else {
                // More users than streams: this one waits for a stream as h2load's clients do.
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            let intended = now.saturating_duration_since(self.run.origin);
            let call = self.mix.render(index, &mut rng);
            self.run.recorder.sent(intended, intended);
            self.call(slot, call, index, intended, now).await;
            index += u64::from(users);
        }
    }
}
