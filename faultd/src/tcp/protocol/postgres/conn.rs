//! One connection of a postgres route: the client's messages to the server, the server's replies to the client,
//! each through its framer, with the session between them.
//!
//! For: answering encryption requests (`ssl`), deciding each statement's entry as it goes out, rewriting or
//! holding back what a taken statement gets, closing at a terminate entry's statement, garbage as the route says,
//! and recording. Bytes are written in one batch per read, so a pipelined burst of messages costs one write.
//! Not for: what the messages mean (see `session`) or which entry takes a statement (see `entries`).

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::frame::{Event, Framer, Side, Startup};
use super::record::{Ended, OTHER};
use super::session::{Call, Finished, Reply, Session, Statement};
use super::{OnGarbage, PostgresRoute, Ssl};
use crate::behaviours::ConnectionCounts;
use crate::behaviours::StatementFault;
use crate::draw::route_key;
use crate::tcp::protocol::Conn;
use crate::tcp::toxics::{Ending, Stream};

/// What the client side asks of the server side, which owns the client's socket.
enum Control {
    /// Write these bytes to the client now (the `N` to an encryption request).
    Write(&'static [u8]),
    /// Look at the session again (a terminate entry's statement was queued).
    Wake,
}

type Shared = Arc<Mutex<Session>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs one connection until either side leaves, the route ends it, or an entry terminates it.
pub(crate) async fn serve(
    route: &Arc<PostgresRoute>,
    conn: Conn<'_>,
    client: TcpStream,
    upstream: TcpStream,
) -> Ending {
    let session: Shared = Arc::new(Mutex::new(Session::new()));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut end_rx = conn.link.ending();
    let up = client_side(route, &conn, &session, client_read, server_write, tx);
    let down = server_side(route, &conn, &session, server_read, client_write, rx);
    tokio::pin!(up);
    tokio::pin!(down);
    let mut up_done = false;
    loop {
        tokio::select! {
            _ = end_rx.wait_for(|e| *e != Ending::Open) => break,
            () = &mut up, if !up_done => up_done = true,
            () = &mut down => break,
        }
    }
    conn.finish(Ending::Close);
    let cut = lock(&session).drain();
    record(route, cut, true);
    let ending = *conn.link.ending().borrow();
    ending
}

fn record(route: &PostgresRoute, finished: Vec<Finished>, cut: bool) {
    let now = Instant::now();
    for call in finished {
        route.recorder.ended(Ended {
            entry: &call.entry,
            phase: &call.phase,
            taken: call.fault.is_some(),
            sqlstate: call.sqlstate.as_deref(),
            cut: cut || matches!(call.fault, Some(StatementFault::Terminate)),
            latency: super::session::latency(&call, now),
        });
    }
}

/// Decides a statement's entry and notes it as started.
fn decide(route: &PostgresRoute, conn: &Conn<'_>, text: &str, counts: &ConnectionCounts) -> Call {
    let entries = route.entries();
    let d = entries.decide(text, conn.seed, route_key(conn.route), counts);
    let (entry, pattern) = match d.entry.and_then(|i| entries.list.get(i)) {
        Some(e) => (e.label.clone(), e.pattern.as_ref()),
        None => (Arc::from(OTHER), None),
    };
    route.recorder.started(&entry, pattern);
    Call {
        entry,
        phase: route.phase(),
        started: Instant::now(),
        fault: d.fault,
        sqlstate: None,
    }
}

async fn client_side(
    route: &PostgresRoute,
    conn: &Conn<'_>,
    session: &Shared,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    control: mpsc::UnboundedSender<Control>,
) {
    let mut framer = Framer::new(Side::Client);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let counts = ConnectionCounts::default();
    let mut out = Vec::with_capacity(8 * 1024);
    loop {
        match src.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = dst.shutdown().await;
                return;
            }
            Ok(_) => {}
        }
        if lock(session).raw {
            framer.end();
        }
        let mut stop = false;
        while let Some(event) = framer.next(&mut buf) {
            match event {
                Event::Startup(Startup::Ssl | Startup::Gssenc, bytes) => match route.ssl {
                    Ssl::Refuse => {
                        route.recorder.refused_encryption();
                        let _ = control.send(Control::Write(b"N"));
                    }
                    Ssl::Pass => {
                        lock(session).raw = true;
                        framer.end();
                        out.extend_from_slice(&bytes);
                    }
                },
                Event::Startup(Startup::Cancel, bytes) => {
                    lock(session).raw = true;
                    out.extend_from_slice(&bytes);
                }
                Event::Startup(Startup::Message, bytes) | Event::More(bytes) => {
                    out.extend_from_slice(&bytes)
                }
                Event::Message { tag, bytes } | Event::Start { tag, bytes } => {
                    // A message too long to read whole is decided on its first bytes (a statement's start).
                    let mut s = lock(session);
                    let call = match s.client_statement(tag, &bytes) {
                        Statement::Runs(text) => Some(decide(route, conn, &text, &counts)),
                        Statement::None => None,
                    };
                    let terminate = matches!(
                        call.as_ref().and_then(|c| c.fault.as_ref()),
                        Some(StatementFault::Terminate)
                    );
                    s.client_message(tag, &bytes, call, &mut out);
                    if terminate {
                        // Nothing more goes to the server: the connection closes when this statement's turn comes.
                        stop = true;
                        let _ = control.send(Control::Wake);
                        break;
                    }
                }
                Event::Garbage(bytes) => {
                    if !garbage(route, conn, session, &bytes, &mut out) {
                        return;
                    }
                }
            }
        }
        if !flush(conn, Stream::Upstream, &mut dst, &mut out).await {
            return;
        }
        if stop {
            return std::future::pending().await;
        }
    }
}

async fn server_side(
    route: &PostgresRoute,
    conn: &Conn<'_>,
    session: &Shared,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    mut control: mpsc::UnboundedReceiver<Control>,
) {
    let mut framer = Framer::new(Side::Server);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = Vec::with_capacity(8 * 1024);
    let mut finished = Vec::new();
    let mut control_open = true;
    loop {
        if lock(session).terminate_due() {
            conn.finish(Ending::Close);
            return;
        }
        tokio::select! {
            biased;
            c = control.recv(), if control_open => {
                match c {
                    Some(Control::Write(bytes)) => {
                        if dst.write_all(bytes).await.is_err() {
                            return;
                        }
                    }
                    Some(Control::Wake) => {}
                    None => control_open = false,
                }
                continue;
            }
            r = src.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = dst.shutdown().await;
                    return;
                }
                Ok(_) => {}
            },
        }
        if lock(session).raw {
            framer.end();
        }
        while let Some(event) = framer.next(&mut buf) {
            let (tag, bytes) = match event {
                Event::Message { tag, bytes } | Event::Start { tag, bytes } => (tag, bytes),
                Event::More(bytes) | Event::Startup(_, bytes) => {
                    out.extend_from_slice(&bytes);
                    continue;
                }
                Event::Garbage(bytes) => {
                    if !garbage(route, conn, session, &bytes, &mut out) {
                        return;
                    }
                    continue;
                }
            };
            let due = lock(session).due();
            if let Some(due) = due.filter(|d| *d > Instant::now()) {
                // A delayed statement's reply: what came before it goes now, the reply when its delay is over.
                if !flush(conn, Stream::Downstream, &mut dst, &mut out).await {
                    return;
                }
                tokio::time::sleep_until(due).await;
            }
            let terminate = {
                let mut s = lock(session);
                match s.server_message(tag, &bytes, &mut finished) {
                    Reply::Pass => out.extend_from_slice(&bytes),
                    Reply::Drop => {}
                    Reply::Replace(b) => out.extend_from_slice(&b),
                }
                s.terminate_due()
            };
            record(route, std::mem::take(&mut finished), false);
            if terminate {
                let _ = flush(conn, Stream::Downstream, &mut dst, &mut out).await;
                conn.finish(Ending::Close);
                return;
            }
        }
        if !flush(conn, Stream::Downstream, &mut dst, &mut out).await {
            return;
        }
    }
}

/// Writes what is batched for the client; false when the client is gone.
/// Bytes that are not the protocol, from either side: counted, then the connection closes (false) or passes
/// them and everything after untouched, as the route says.
fn garbage(
    route: &PostgresRoute,
    conn: &Conn<'_>,
    session: &Shared,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    route.recorder.garbage();
    if route.on_garbage == OnGarbage::Close {
        conn.finish(Ending::Close);
        return false;
    }
    lock(session).raw = true;
    out.extend_from_slice(bytes);
    true
}

/// Writes what `out` holds to `dst` (the `stream` way) and counts it; false when the connection broke.
async fn flush(
    conn: &Conn<'_>,
    stream: Stream,
    dst: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
) -> bool {
    if out.is_empty() {
        return true;
    }
    if dst.write_all(out).await.is_err() {
        conn.finish(Ending::Close);
        return false;
    }
    conn.link.bytes(stream, out.len());
    out.clear();
    true
}
