//! One connection of a Redis route: the client's commands and the server's replies framed and paired in order,
//! and the route's entries carried out on single commands.
//!
//! For: the two directions of one connection. Client to server, each command is framed, given to the entries
//! once its name and key are known, and forwarded or held back; its pending record goes to the other direction
//! before its bytes go to the server, so every reply finds the command it answers. Server to client, each reply
//! is paired with the oldest pending command (RESP answers in order, MULTI's `+QUEUED` and EXEC's array
//! included), a push message passes between replies, an error faultd writes takes its place in the order, a
//! delay holds the reply, a hang holds it and every later one, a close ends the connection there. Commands that
//! make a connection answer out of step (SUBSCRIBE and its kin, MONITOR, CLIENT REPLY) and bytes that are not
//! RESP switch the connection to plain forwarding. Not for: choosing what a command gets (`super::entry`) or
//! counting (`super::record`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::entry::Action;
use super::record::Outcome;
use super::resp::{Event, Head, Scanner, Side};
use super::RedisRoute;
use crate::behaviours::ConnectionCounts;
use crate::tcp::protocol::{Connection, OnGarbage};
use crate::tcp::toxics::{ended, Ending, Stream};

/// Bytes read at once from either side.
const READ_SIZE: usize = 16 * 1024;
/// Commands waiting for their reply per connection; beyond, faultd stops reading the client (back-pressure).
const PENDING: usize = 4096;
/// Command names a connection keeps one shared copy of, so that a command of a name seen before allocates none.
const NAMES: usize = 32;

/// A command on its way, as the reply side sees it.
#[derive(Debug)]
enum Pending {
    /// Forwarded to the server; its reply is held until `at + delay`.
    Forwarded {
        name: Arc<str>,
        at: Instant,
        delay: Option<Duration>,
    },
    /// Not forwarded: answered with this error.
    Injected {
        name: Arc<str>,
        at: Instant,
        reply: Bytes,
    },
    /// Never answered, nor anything after it.
    Hang { name: Arc<str> },
    /// The connection closes here (an entry's close, or bytes that are not RESP under `on_garbage: close`).
    Close { name: Option<Arc<str>> },
    /// Forwarded, and from here on both directions are forwarded untouched.
    Raw { name: Option<Arc<str>> },
}

impl Pending {
    fn name(&self) -> Option<&Arc<str>> {
        match self {
            Pending::Forwarded { name, .. }
            | Pending::Injected { name, .. }
            | Pending::Hang { name } => Some(name),
            Pending::Close { name } | Pending::Raw { name } => name.as_ref(),
        }
    }
}

/// Relays one connection until it ends; gives the client's halves back so it can be closed the way it ended.
pub(crate) async fn relay(
    route: Arc<RedisRoute>,
    ctx: Arc<dyn Connection>,
    client_read: OwnedReadHalf,
    client_write: OwnedWriteHalf,
    upstream_read: OwnedReadHalf,
    upstream_write: OwnedWriteHalf,
) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
    let (tx, rx) = mpsc::channel(PENDING);
    let up = tokio::spawn(commands(
        route.clone(),
        ctx.clone(),
        client_read,
        upstream_write,
        tx,
    ));
    let client_write = replies(&route, &*ctx, upstream_read, client_write, rx).await;
    match up.await {
        Ok(client_read) => Some((client_read, client_write)),
        Err(_) => None,
    }
}

/// Whether the connection answers out of step after this command, so that replies no longer pair with commands.
fn leaves_step(head: &Head) -> bool {
    match head.name.as_str() {
        "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "MONITOR" | "SYNC" | "PSYNC" => true,
        "CLIENT" => head
            .key
            .as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case(b"reply")),
        _ => false,
    }
}

/// What becomes of the bytes of the command being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Not known yet: its bytes are held until it is.
    Open,
    /// Forwarded to the server.
    Forward,
    /// Forwarded, and the connection forwards everything untouched after it.
    ForwardThenRaw,
    /// Dropped (an error answers it).
    Drop,
    /// The connection stops here (a hang or a close): nothing more goes to the server.
    Stop,
}

/// The client-to-server direction; gives the client's read half back.
async fn commands(
    route: Arc<RedisRoute>,
    ctx: Arc<dyn Connection>,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    tx: mpsc::Sender<Pending>,
) -> OwnedReadHalf {
    let mut end_rx = ctx.ending();
    let counts = ConnectionCounts::default();
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut scanner = Scanner::new(Side::Client);
    let mut buf = vec![0u8; READ_SIZE];
    let mut out: Vec<u8> = Vec::new();
    let mut held: Vec<u8> = Vec::new();
    let mut fate = Fate::Open;
    let mut raw = false;
    loop {
        let n = tokio::select! {
            r = src.read(&mut buf) => r,
            _ = ended(&mut end_rx) => return src,
        };
        let n = match n {
            Ok(0) => {
                let _ = dst.shutdown().await;
                return src;
            }
            Ok(n) => n,
            Err(_) => {
                ctx.finish(Ending::Close);
                return src;
            }
        };
        if raw {
            out.extend_from_slice(&buf[..n]);
        }
        let mut pos = if raw { n } else { 0 };
        while pos < n {
            let (used, event) = match scanner.advance(&buf[pos..n]) {
                Ok(step) => step,
                Err(_) => {
                    route.recorder.garbage();
                    if route.on_garbage == OnGarbage::Close {
                        // The replies to the commands before it go out first, then the connection closes.
                        held.clear();
                        send(&route, &tx, Pending::Close { name: None }).await;
                        fate = Fate::Stop;
                        break;
                    }
                    if send(&route, &tx, Pending::Raw { name: None }).await {
                        out.append(&mut held);
                    }
                    out.extend_from_slice(&buf[pos..n]);
                    raw = true;
                    break;
                }
            };
            let segment = &buf[pos..pos + used];
            pos += used;
            match fate {
                Fate::Open => held.extend_from_slice(segment),
                Fate::Forward | Fate::ForwardThenRaw => out.extend_from_slice(segment),
                Fate::Drop | Fate::Stop => {}
            }
            let (head, ends) = match event {
                None => continue,
                Some(Event::Head(head)) => (Some(head), false),
                Some(Event::End(end)) => (end.head, true),
            };
            if let Some(head) = head {
                fate = decide(&route, &*ctx, &counts, &mut names, &tx, head).await;
                match fate {
                    Fate::Forward | Fate::ForwardThenRaw => out.append(&mut held),
                    _ => held.clear(),
                }
            }
            if ends {
                // A command of no words (`*0`, an empty line): Redis answers nothing, so it passes as it is.
                out.append(&mut held);
                if fate == Fate::ForwardThenRaw {
                    out.extend_from_slice(&buf[pos..n]);
                    raw = true;
                    fate = Fate::Open;
                    break;
                }
                if fate != Fate::Stop {
                    fate = Fate::Open;
                }
            }
            if fate == Fate::Stop {
                break;
            }
        }
        if !out.is_empty() {
            let written = tokio::select! {
                r = dst.write_all(&out) => r.is_ok(),
                _ = ended(&mut end_rx) => return src,
            };
            if !written {
                ctx.finish(Ending::Close);
                return src;
            }
            ctx.bytes(Stream::Upstream, out.len());
            out.clear();
        }
        if fate == Fate::Stop {
            drain(&*ctx, &mut src, &mut buf).await;
            return src;
        }
    }
}

/// Reads and drops what the client sends until it leaves or the connection ends. Its leaving closes the command
/// channel, which tells the reply side: a hang ends there, a close goes on to write the replies before it.
async fn drain(ctx: &dyn Connection, src: &mut OwnedReadHalf, buf: &mut [u8]) {
    let mut end_rx = ctx.ending();
    loop {
        tokio::select! {
            r = src.read(buf) => if !matches!(r, Ok(n) if n > 0) {
                return;
            },
            _ = ended(&mut end_rx) => return,
        }
    }
}

/// Hands a pending command to the reply side; false (and the command counted unanswered) when that side is gone.
async fn send(route: &RedisRoute, tx: &mpsc::Sender<Pending>, pending: Pending) -> bool {
    let name = pending.name().cloned();
    if tx.send(pending).await.is_ok() {
        return true;
    }
    if let Some(name) = name {
        route
            .recorder
            .ended(&name, &route.rules().phase, Outcome::Unanswered);
    }
    false
}

/// The connection's shared copy of a command's name: one of `names`, or a new one kept there while it has room.
fn name_of(names: &mut Vec<Arc<str>>, name: &str) -> Arc<str> {
    if let Some(known) = names.iter().find(|n| &***n == name) {
        return known.clone();
    }
    let new: Arc<str> = Arc::from(name);
    if names.len() < NAMES {
        names.push(new.clone());
    }
    new
}

/// Gives a command its fate from the entries in force, counts it as sent, and tells the reply side.
async fn decide(
    route: &RedisRoute,
    ctx: &dyn Connection,
    counts: &ConnectionCounts,
    names: &mut Vec<Arc<str>>,
    tx: &mpsc::Sender<Pending>,
    head: Head,
) -> Fate {
    let at = Instant::now();
    let rules = route.rules();
    let name = name_of(names, &head.name);
    let action = rules.entries.decide(&head, counts).cloned();
    route.recorder.sent(&name, &rules.phase);
    let (pending, fate) = match action {
        None if leaves_step(&head) => (Pending::Raw { name: Some(name) }, Fate::ForwardThenRaw),
        None => (
            Pending::Forwarded {
                name,
                at,
                delay: None,
            },
            Fate::Forward,
        ),
        Some(Action::Delay(d)) => (
            Pending::Forwarded {
                name,
                at,
                delay: Some(d),
            },
            Fate::Forward,
        ),
        Some(Action::Error(reply)) => (Pending::Injected { name, at, reply }, Fate::Drop),
        Some(Action::Hang) => (Pending::Hang { name }, Fate::Stop),
        Some(Action::Close) => (Pending::Close { name: Some(name) }, Fate::Stop),
    };
    if send(route, tx, pending).await {
        fate
    } else {
        ctx.finish(Ending::Close);
        Fate::Stop
    }
}

/// The server-to-client direction; gives the client's write half back.
async fn replies(
    route: &RedisRoute,
    ctx: &dyn Connection,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Pending>,
) -> OwnedWriteHalf {
    let mut side = Replies {
        route,
        ctx,
        head: None,
        held: false,
        out: Vec::new(),
    };
    side.run(&mut src, &mut dst, &mut rx).await;
    // What is still pending will not be answered through faultd.
    rx.close();
    if let Some(p) = side.head.take() {
        side.unanswered(&p);
    }
    while let Ok(p) = rx.try_recv() {
        side.unanswered(&p);
    }
    dst
}

struct Replies<'a> {
    route: &'a RedisRoute,
    ctx: &'a dyn Connection,
    /// The oldest command not answered yet.
    head: Option<Pending>,
    /// Whether the head's delay has been waited out (its reply's first bytes may go).
    held: bool,
    out: Vec<u8>,
}

/// What the reply side does next.
enum Next {
    /// Go on.
    Go,
    /// Forward everything untouched from here on.
    Raw,
    /// Stop: the connection is ending.
    Stop,
}

impl Replies<'_> {
    fn unanswered(&self, p: &Pending) {
        if let Some(name) = p.name() {
            self.route
                .recorder
                .ended(name, &self.route.rules().phase, Outcome::Unanswered);
        }
    }

    fn answered(&self, name: &str, at: Instant, error: Option<&str>) {
        self.route.recorder.ended(
            name,
            &self.route.rules().phase,
            Outcome::Answered(at.elapsed(), error),
        );
    }

    async fn flush(&mut self, dst: &mut OwnedWriteHalf) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let ok = dst.write_all(&self.out).await.is_ok();
        if ok {
            self.ctx.bytes(Stream::Downstream, self.out.len());
        }
        self.out.clear();
        ok
    }

    /// Acts on the head while it is one that needs no server bytes (faultd's own error, a hang, a close, the
    /// switch to plain forwarding); called between replies only.
    fn settle(&mut self, rx: &mut mpsc::Receiver<Pending>) -> Next {
        loop {
            if self.head.is_none() {
                self.head = rx.try_recv().ok();
            }
            match self.head.take() {
                Some(Pending::Injected { name, at, reply }) => {
                    self.out.extend_from_slice(&reply);
                    let word = super::resp::first_word(&reply[1..]);
                    self.answered(&name, at, Some(&word));
                }
                Some(Pending::Raw { name }) => {
                    if let Some(name) = name {
                        self.answered(&name, Instant::now(), None);
                    }
                    return Next::Raw;
                }
                Some(p @ Pending::Close { .. }) => {
                    self.unanswered(&p);
                    self.ctx.finish(Ending::Close);
                    return Next::Stop;
                }
                Some(p @ Pending::Hang { .. }) => {
                    self.head = Some(p);
                    return Next::Stop;
                }
                other => {
                    self.head = other;
                    return Next::Go;
                }
            }
        }
    }

    async fn run(
        &mut self,
        src: &mut OwnedReadHalf,
        dst: &mut OwnedWriteHalf,
        rx: &mut mpsc::Receiver<Pending>,
    ) {
        let mut end_rx = self.ctx.ending();
        let mut scanner = Scanner::new(Side::Server);
        let mut buf = vec![0u8; READ_SIZE];
        let (mut pos, mut len) = (0, 0);
        let mut raw = false;
        loop {
            if !raw && scanner.at_boundary() {
                match self.settle(rx) {
                    Next::Go => {}
                    Next::Raw => raw = true,
                    Next::Stop => {
                        let _ = self.flush(dst).await;
                        if matches!(self.head, Some(Pending::Hang { .. })) {
                            // Held until the client leaves (the command side closes the channel) or the
                            // connection ends.
                            loop {
                                tokio::select! {
                                    p = rx.recv() => match p {
                                        Some(p) => self.unanswered(&p),
                                        None => {
                                            self.ctx.finish(Ending::Close);
                                            break;
                                        }
                                    },
                                    _ = ended(&mut end_rx) => break,
                                }
                            }
                        }
                        return;
                    }
                }
            }
            if pos < len && raw {
                self.out.extend_from_slice(&buf[pos..len]);
                pos = len;
            }
            if pos < len {
                let push_next = scanner.at_boundary() && buf[pos] == b'>';
                if self.head.is_none() && !push_next && !scanner.in_push() {
                    // A reply before its command's record: the record is on its way (it is sent before the
                    // command's bytes), or the command side is gone.
                    let _ = self.flush(dst).await;
                    let next = tokio::select! {
                        p = rx.recv() => p,
                        _ = ended(&mut end_rx) => return,
                    };
                    match next {
                        Some(p) => self.head = Some(p),
                        None => raw = true,
                    }
                    continue;
                }
                let reply = !push_next && !scanner.in_push();
                if reply && !self.held {
                    if let Some(Pending::Forwarded {
                        at,
                        delay: Some(delay),
                        ..
                    }) = &self.head
                    {
                        let due = *at + *delay;
                        if !self.flush(dst).await {
                            self.ctx.finish(Ending::Close);
                            return;
                        }
                        tokio::select! {
                            _ = sleep_until(due) => {}
                            _ = ended(&mut end_rx) => return,
                        }
                    }
                    self.held = true;
                }
                let (used, event) = match scanner.advance(&buf[pos..len]) {
                    Ok(step) => step,
                    Err(_) => {
                        self.route.recorder.garbage();
                        if self.route.on_garbage == OnGarbage::Close {
                            self.ctx.finish(Ending::Close);
                            return;
                        }
                        raw = true;
                        continue;
                    }
                };
                self.out.extend_from_slice(&buf[pos..pos + used]);
                pos += used;
                if let Some(Event::End(end)) = event {
                    if !end.push {
                        self.held = false;
                        match self.head.take() {
                            Some(Pending::Forwarded { name, at, .. }) => {
                                self.answered(&name, at, end.error.as_deref())
                            }
                            // Pairing is lost (a reply where faultd expected none): forward the rest as it is.
                            other => {
                                if let Some(p) = other {
                                    self.unanswered(&p);
                                }
                                raw = true;
                            }
                        }
                    }
                }
                continue;
            }
            if !self.flush(dst).await {
                self.ctx.finish(Ending::Close);
                return;
            }
            let can_take = self.head.is_none() && !raw && scanner.at_boundary();
            tokio::select! {
                r = src.read(&mut buf) => match r {
                    Ok(0) => {
                        let _ = dst.shutdown().await;
                        return;
                    }
                    Ok(n) => (pos, len) = (0, n),
                    Err(_) => {
                        self.ctx.finish(Ending::Close);
                        return;
                    }
                },
                p = rx.recv(), if can_take => match p {
                    Some(p) => self.head = Some(p),
                    None => raw = true,
                },
                _ = ended(&mut end_rx) => return,
            }
        }
    }
}
