//! The server-to-client direction of a Redis connection: each reply paired with the oldest pending command (RESP
//! answers in order, MULTI's `+QUEUED` and EXEC's array included), a push message passed between replies, an
//! error faultd writes put in its place in the order, a delay holding the reply, a hang holding it and every later
//! one, a close ending the connection there; the commands' endings counted once per read.
//!
//! For: the reply side of [`super::conn`]'s relay. Not for: reading commands (`super::conn`).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::{sleep_until, Instant};

use super::outgoing::Outgoing;
use super::pending::{lost, over, Pending, READ_SIZE};
use super::queue::{Queue, Wakes};
use super::record::{CommandId, Ended};
use super::resp::{Event, Scanner, Side};
use super::RedisRoute;
use crate::tcp::protocol::{Connection, OnGarbage};
use crate::tcp::toxics::{ended, Ending, Stream};

/// The server-to-client direction; gives the client's write half back.
pub(super) async fn replies(
    route: &RedisRoute,
    ctx: &dyn Connection,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    queue: &Queue<Pending>,
    wakes: Wakes,
) -> OwnedWriteHalf {
    let mut side = Replies {
        route,
        ctx,
        queue,
        wakes,
        head: None,
        taken: VecDeque::new(),
        held: false,
        out: Outgoing::default(),
        now: Instant::now(),
        ended: Vec::new(),
    };
    side.run(&mut src, &mut dst).await;
    // What is still pending will not be answered through faultd.
    let rest = queue.replies_gone();
    let taken = std::mem::take(&mut side.taken);
    for p in side.head.take().into_iter().chain(taken).chain(rest) {
        side.unanswered(&p);
    }
    side.record();
    dst
}

struct Replies<'a> {
    route: &'a RedisRoute,
    ctx: &'a dyn Connection,
    queue: &'a Queue<Pending>,
    wakes: Wakes,
    /// The oldest command not answered yet.
    head: Option<Pending>,
    /// The commands after it, taken from the queue.
    taken: VecDeque<Pending>,
    /// Whether the head's delay has been waited out (its reply's first bytes may go).
    held: bool,
    out: Outgoing,
    /// When the server's bytes being read arrived.
    now: Instant,
    /// The commands that ended since the last count, alike ones together.
    ended: Vec<Ended>,
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
    /// The next command in order, if the command side handed one over; and whether that side is gone.
    fn next(&mut self) -> (Option<Pending>, bool) {
        let mut gone = false;
        if self.taken.is_empty() {
            gone = self.queue.take(&mut self.taken);
        }
        (self.taken.pop_front(), gone)
    }

    fn unanswered(&mut self, p: &Pending) {
        if let Some(e) = lost(p) {
            self.count(e);
        }
    }

    fn answered(&mut self, id: CommandId, latency: Duration, error: Option<String>) {
        self.count(Ended {
            id,
            latency: Some(latency),
            error,
            n: 1,
        });
    }

    /// Keeps an ending for the next count, with the one before when they are alike.
    fn count(&mut self, e: Ended) {
        match self.ended.last_mut() {
            Some(last) if last.id == e.id && last.latency == e.latency && last.error == e.error => {
                last.n += e.n
            }
            _ => self.ended.push(e),
        }
    }

    /// Hands the endings kept so far to the recorder, in the phase in force.
    fn record(&mut self) {
        if !self.ended.is_empty() {
            self.route
                .recorder
                .ended(&self.route.rules().phase, &self.ended);
            self.ended.clear();
        }
    }

    async fn flush(&mut self, dst: &mut OwnedWriteHalf, buf: &[u8]) -> bool {
        self.record();
        if self.out.is_empty() {
            return true;
        }
        let bytes = self.out.bytes(buf);
        let ok = dst.write_all(bytes).await.is_ok();
        if ok {
            self.ctx.bytes(Stream::Downstream, bytes.len());
        }
        self.out.clear();
        ok
    }

    /// Acts on the head while it is one that needs no server bytes (faultd's own error, a hang, a close, the
    /// switch to plain forwarding); called between replies only.
    fn settle(&mut self, buf: &[u8]) -> Next {
        loop {
            if self.head.is_none() {
                self.head = self.next().0;
            }
            if matches!(self.head, None | Some(Pending::Forwarded { .. })) {
                return Next::Go;
            }
            match self.head.take() {
                Some(Pending::Injected { id, at, reply }) => {
                    self.out.push(buf, &reply);
                    let word = super::resp::first_word(&reply[1..]);
                    self.answered(id, at.elapsed(), Some(word));
                }
                Some(Pending::Raw { id }) => {
                    if let Some(id) = id {
                        self.answered(id, Duration::ZERO, None);
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

    /// After a hang: every later command is unanswered, until the client leaves (then the connection closes) or
    /// the connection ends.
    async fn hang(&mut self, mut end: std::pin::Pin<&mut impl std::future::Future<Output = ()>>) {
        loop {
            loop {
                match self.next() {
                    (Some(p), _) => self.unanswered(&p),
                    (None, true) => {
                        self.ctx.finish(Ending::Close);
                        return;
                    }
                    (None, false) => break,
                }
            }
            self.record();
            tokio::select! {
                _ = self.wakes.woken() => {}
                _ = &mut end => return,
            }
        }
    }

    async fn run(&mut self, src: &mut OwnedReadHalf, dst: &mut OwnedWriteHalf) {
        let mut end_rx = self.ctx.ending();
        let mut end_seen = self.ctx.ending();
        // Pinned once, so that waiting on the end costs one registration per connection, not one per read.
        let end = ended(&mut end_rx);
        tokio::pin!(end);
        let mut scanner = Scanner::new(Side::Server);
        let mut buf = vec![0u8; READ_SIZE];
        let (mut pos, mut len) = (0, 0);
        let mut raw = false;
        loop {
            if !raw && scanner.at_boundary() {
                match self.settle(&buf) {
                    Next::Go => {}
                    Next::Raw => raw = true,
                    Next::Stop => {
                        let _ = self.flush(dst, &buf).await;
                        if matches!(self.head, Some(Pending::Hang { .. })) {
                            self.hang(end.as_mut()).await;
                        }
                        return;
                    }
                }
            }
            if pos < len && raw {
                self.out.pass(&buf, pos..len);
                pos = len;
            }
            if pos < len {
                let push_next = scanner.at_boundary() && buf[pos] == b'>';
                if self.head.is_none() && !push_next && !scanner.in_push() {
                    // A reply with no command waiting for it: every command's record is handed over before its
                    // bytes go to the server, so pairing is lost (or the command side is gone). What follows is
                    // forwarded as it is.
                    raw = true;
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
                        if !self.flush(dst, &buf).await {
                            self.ctx.finish(Ending::Close);
                            return;
                        }
                        tokio::select! {
                            _ = sleep_until(due) => {}
                            _ = &mut end => return,
                        }
                        // The reply went out no earlier than its delay.
                        self.now = self.now.max(Instant::now());
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
                self.out.pass(&buf, pos..pos + used);
                pos += used;
                if let Some(Event::End(end)) = event {
                    if !end.push {
                        self.held = false;
                        match self.head.take() {
                            Some(Pending::Forwarded { id, at, .. }) => {
                                let latency = self.now.saturating_duration_since(at);
                                self.answered(id, latency, end.error)
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
            if !self.flush(dst, &buf).await {
                self.ctx.finish(Ending::Close);
                return;
            }
            if over(&mut end_seen) {
                return;
            }
            let can_take = self.head.is_none() && !raw && scanner.at_boundary();
            let wakes = &mut self.wakes;
            tokio::select! {
                biased;
                r = src.read(&mut buf) => match r {
                    Ok(0) => {
                        let _ = dst.shutdown().await;
                        return;
                    }
                    Ok(n) => {
                        (pos, len) = (0, n);
                        self.now = Instant::now();
                    }
                    Err(_) => {
                        self.ctx.finish(Ending::Close);
                        return;
                    }
                },
                // A record that needs no server bytes came: the top of the loop acts on it.
                _ = wakes.woken(), if can_take => {}
                _ = &mut end => return,
            }
        }
    }
}
