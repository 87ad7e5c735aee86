//! One connection of a Redis route: the client's commands framed and given their fate, and the relay of both
//! directions.
//!
//! For: the client-to-server direction. Each command is framed, given to the entries once its name and key are
//! known, and forwarded or held back; the pending records of the commands of one read go to the reply side
//! ([`super::replies`]) together, before their bytes go to the server, so every reply finds the command it
//! answers. Only a record that needs no server bytes (an error to write, a hang, a close) wakes that side.
//! Commands that make a connection answer out of step (SUBSCRIBE and its kin, MONITOR, CLIENT REPLY) and bytes
//! that are not RESP switch the connection to plain forwarding. Not for: choosing what a command gets
//! (`super::entry`), pairing replies (`super::replies`) or counting (`super::record`).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use super::entry::Action;
use super::outgoing::Outgoing;
use super::pending::{lost, over, Pending, READ_SIZE};
use super::queue::{Queue, RepliesGone};
use super::record::{CommandId, Ended};
use super::resp::{Event, Head, Scanner, Side};
use super::{RedisRoute, Rules};
use crate::behaviours::ConnectionCounts;
use crate::tcp::protocol::{Connection, OnGarbage};
use crate::tcp::toxics::{ended, Ending, Stream};

/// Command names a connection keeps the recorder's place of, so that a command of a name seen before needs no
/// lookup.
const NAMES: usize = 32;

/// Relays one connection until it ends; gives the client's halves back so it can be closed the way it ended.
pub(crate) async fn relay(
    route: Arc<RedisRoute>,
    ctx: Arc<dyn Connection>,
    client_read: OwnedReadHalf,
    client_write: OwnedWriteHalf,
    upstream_read: OwnedReadHalf,
    upstream_write: OwnedWriteHalf,
) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
    let (queue, wakes) = Queue::new();
    let queue = Arc::new(queue);
    let up = tokio::spawn(commands(
        route.clone(),
        ctx.clone(),
        client_read,
        upstream_write,
        queue.clone(),
    ));
    let client_write =
        super::replies::replies(&route, &*ctx, upstream_read, client_write, &queue, wakes).await;
    match up.await {
        Ok(client_read) => Some((client_read, client_write)),
        Err(_) => None,
    }
}

/// Whether the connection answers out of step after this command, so that replies no longer pair with commands.
fn leaves_step(head: &Head<'_>) -> bool {
    match head.name {
        "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "MONITOR" | "SYNC" | "PSYNC" => true,
        "CLIENT" => head.key.is_some_and(|k| k.eq_ignore_ascii_case(b"reply")),
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

/// Tells the reply side that the command side left, however it left.
struct Leaving(Arc<Queue<Pending>>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.commands_gone();
    }
}

/// The commands of one read on their way: their records for the reply side, their places for the recorder.
struct Batch {
    pending: Vec<Pending>,
    sent: Vec<CommandId>,
    /// A record needs no server bytes: the reply side must be woken to act on it.
    wake: bool,
}

impl Batch {
    fn add(&mut self, pending: Pending) {
        self.wake |= !matches!(pending, Pending::Forwarded { .. });
        self.pending.push(pending);
    }

    /// Counts the commands as sent and hands their records over, before their bytes go to the server; whether
    /// the queue is full. When the reply side is gone they are counted unanswered.
    fn hand_over(
        &mut self,
        route: &RedisRoute,
        rules: &Rules,
        queue: &Queue<Pending>,
    ) -> Result<bool, RepliesGone> {
        if !self.sent.is_empty() {
            route.recorder.sent(&rules.phase, &self.sent);
            self.sent.clear();
        }
        if self.pending.is_empty() {
            return Ok(false);
        }
        let waiting = match queue.push(&mut self.pending, std::mem::take(&mut self.wake)) {
            Ok(n) => n,
            Err(gone) => {
                let lost: Vec<Ended> = self.pending.drain(..).filter_map(|p| lost(&p)).collect();
                route.recorder.ended(&rules.phase, &lost);
                return Err(gone);
            }
        };
        Ok(waiting >= super::queue::PENDING)
    }
}

/// The client-to-server direction; gives the client's read half back.
async fn commands(
    route: Arc<RedisRoute>,
    ctx: Arc<dyn Connection>,
    mut src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
    queue: Arc<Queue<Pending>>,
) -> OwnedReadHalf {
    let _leaving = Leaving(queue.clone());
    let mut end_rx = ctx.ending();
    let mut end_seen = ctx.ending();
    // Pinned once, so that waiting on the end costs one registration per connection, not one per read.
    let end = ended(&mut end_rx);
    tokio::pin!(end);
    let counts = ConnectionCounts::default();
    let mut names: Vec<(Box<str>, CommandId)> = Vec::new();
    let mut scanner = Scanner::new(Side::Client);
    let mut buf = vec![0u8; READ_SIZE];
    let mut out = Outgoing::default();
    let mut held = Held::default();
    let mut batch = Batch {
        pending: Vec::new(),
        sent: Vec::new(),
        wake: false,
    };
    let mut fate = Fate::Open;
    let mut raw = false;
    loop {
        // Reads come first; a client that never lets its socket go empty still sees the end between them.
        if over(&mut end_seen) {
            return src;
        }
        let n = tokio::select! {
            biased;
            r = src.read(&mut buf) => r,
            _ = &mut end => return src,
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
        // Every command of this read arrived now, under the entries in force now.
        let at = Instant::now();
        let rules = route.rules();
        if raw {
            out.pass(&buf, 0..n);
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
                        batch.add(Pending::Close { id: None });
                        fate = Fate::Stop;
                        break;
                    }
                    batch.add(Pending::Raw { id: None });
                    held.release(&buf, &mut out, pos);
                    out.pass(&buf, pos..n);
                    raw = true;
                    break;
                }
            };
            let segment = pos..pos + used;
            pos += used;
            match fate {
                Fate::Open => held.keep(segment.start),
                Fate::Forward | Fate::ForwardThenRaw => out.pass(&buf, segment),
                Fate::Drop | Fate::Stop => {}
            }
            let (head, ends) = match event {
                None => continue,
                Some(Event::Head) => (true, false),
                Some(Event::End(end)) => (end.head, true),
            };
            if head {
                let head = scanner.head();
                let id = id_of(&route, &mut names, head.name);
                let pending;
                (pending, fate) = decide(&rules, &counts, id, at, head);
                batch.sent.push(id);
                batch.add(pending);
                match fate {
                    Fate::Forward | Fate::ForwardThenRaw => held.release(&buf, &mut out, pos),
                    _ => held.clear(),
                }
            }
            if ends {
                // A command of no words (`*0`, an empty line): Redis answers nothing, so it passes as it is.
                held.release(&buf, &mut out, pos);
                if fate == Fate::ForwardThenRaw {
                    out.pass(&buf, pos..n);
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
        held.carry(&buf, n);
        let room = match batch.hand_over(&route, &rules, &queue) {
            // Full: no more reads until replies take records.
            Ok(true) => tokio::select! {
                biased;
                r = queue.room() => r,
                _ = &mut end => return src,
            },
            Ok(false) => Ok(()),
            Err(gone) => Err(gone),
        };
        if room.is_err() {
            ctx.finish(Ending::Close);
            return src;
        }
        if !out.is_empty() {
            let bytes = out.bytes(&buf);
            let len = bytes.len();
            let written = tokio::select! {
                biased;
                r = dst.write_all(bytes) => r.is_ok(),
                _ = &mut end => return src,
            };
            if !written {
                ctx.finish(Ending::Close);
                return src;
            }
            ctx.bytes(Stream::Upstream, len);
            out.clear();
        }
        if fate == Fate::Stop {
            drain(&*ctx, &mut src, &mut buf).await;
            return src;
        }
    }
}

/// The bytes of a command whose fate is not known yet: those of earlier reads, copied, then those of the read at
/// hand from `from` on, left in the read buffer until the command's fate is known or the read is done.
#[derive(Debug, Default)]
struct Held {
    earlier: Vec<u8>,
    from: Option<usize>,
}

impl Held {
    /// The open command's bytes in the read at hand start at `start` (unless they started earlier in it).
    fn keep(&mut self, start: usize) {
        self.from.get_or_insert(start);
    }

    /// The command is forwarded: its bytes so far, up to `upto` in the read at hand, go out.
    fn release(&mut self, buf: &[u8], out: &mut Outgoing, upto: usize) {
        if !self.earlier.is_empty() {
            out.push(buf, &self.earlier);
            self.earlier.clear();
        }
        if let Some(from) = self.from.take() {
            out.pass(buf, from..upto);
        }
    }

    /// The command is dropped, or the connection stops.
    fn clear(&mut self) {
        self.earlier.clear();
        self.from = None;
    }

    /// The read of `n` bytes is done with the command still open: its bytes are copied before the next read.
    fn carry(&mut self, buf: &[u8], n: usize) {
        if let Some(from) = self.from.take() {
            self.earlier.extend_from_slice(&buf[from..n]);
        }
    }
}

/// Reads and drops what the client sends until it leaves or the connection ends. Its leaving tells the reply
/// side: a hang ends there, a close goes on to write the replies before it.
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

/// The recorder's place for a command's name: one the connection kept, or the recorder's, kept while there is
/// room.
fn id_of(route: &RedisRoute, names: &mut Vec<(Box<str>, CommandId)>, name: &str) -> CommandId {
    if let Some((_, id)) = names
        .iter()
        .find(|(n, _)| super::resp::same(n.as_bytes(), name.as_bytes()))
    {
        return *id;
    }
    let id = route.recorder.id(name);
    if names.len() < NAMES {
        names.push((name.into(), id));
    }
    id
}

/// Gives a command that arrived at `at` its record and its fate from the entries in force.
fn decide(
    rules: &Rules,
    counts: &ConnectionCounts,
    id: CommandId,
    at: Instant,
    head: Head<'_>,
) -> (Pending, Fate) {
    match rules.entries.decide(&head, counts).cloned() {
        None if leaves_step(&head) => (Pending::Raw { id: Some(id) }, Fate::ForwardThenRaw),
        None => (
            Pending::Forwarded {
                id,
                at,
                delay: None,
            },
            Fate::Forward,
        ),
        Some(Action::Delay(d)) => (
            Pending::Forwarded {
                id,
                at,
                delay: Some(d),
            },
            Fate::Forward,
        ),
        Some(Action::Error(reply)) => (Pending::Injected { id, at, reply }, Fate::Drop),
        Some(Action::Hang) => (Pending::Hang { id }, Fate::Stop),
        Some(Action::Close) => (Pending::Close { id: Some(id) }, Fate::Stop),
    }
}
