//! The TCP data plane: one listener per route, and per accepted connection one task pair (client to server, and
//! server to client) that forwards bytes through the route's toxics.
//!
//! For: accepting, connecting upstream (loopback unless allowed), forwarding with half-close kept intact,
//! applying each active toxic through its hooks, deciding once per connection and toxic whether the toxic takes
//! it (`toxicity`, a seeded draw), and ending connections with a FIN or a reset. Not for: the list of routes or
//! the API (see [`super::routes`] and `crate::toxiproxy`), or what a toxic does (see [`super::toxics`]).
//!
//! Each direction reads into a short queue stamped with the instant each chunk arrived, and writes from it; a
//! latency toxic holds a chunk until its arrival plus the delay, as Toxiproxy's chained stages do, so a chunk
//! read while an earlier one waits is not delayed twice. Toxics added or removed while a connection is open
//! apply to it at once, as in Toxiproxy: pooled connections are the ones a real incident hits.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, Instant};

mod deliver;
mod socket;

use super::record::TcpRecorder;
use super::toxics::{ended, ChunkPlan, ChunkRng, Connect, Ending, Stream};
use super::{upstream_allowed, Toxic};
use crate::draw::{route_key, CallDraws};
use deliver::{deliver, Delivery};
use socket::{read_into, send_now, with_scratch, Read};

/// Bytes read at once from either side.
const READ_SIZE: usize = 32 * 1024;
/// Chunks queued per direction between the read and the write; beyond, the reader waits (TCP back-pressure).
const QUEUE: usize = 16;
/// The longest faultd waits for the upstream to accept before closing the client's connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection of one route shares.
#[derive(Debug)]
pub struct RouteShared {
    /// The route's name.
    pub name: String,
    /// `host:port` to forward to.
    pub upstream: String,
    /// Hosts other than loopback the upstream may resolve to.
    pub allow_hosts: Arc<Vec<String>>,
    /// The seed of the toxicity and jitter draws.
    pub seed: u64,
    /// The toxics in force, in the order they were added; connections watch it.
    pub toxics: watch::Sender<Arc<Vec<Toxic>>>,
    /// Bumped to close every open connection (the route disabled or deleted).
    pub kill: watch::Sender<u64>,
    /// The route's recorder.
    pub recorder: Arc<TcpRecorder>,
    /// Connections accepted so far: the next connection's number in the draws.
    pub accepted: AtomicU64,
    /// Ends latency toxics' delays at their instant (tokio's 1 ms timer rounds each up by about a millisecond).
    pub deadlines: Option<crate::deadlines::Deadlines>,
    /// The protocol the route frames, with its state; `None` for plain bytes.
    pub wire: Option<super::protocol::Wire>,
}

/// A bound listener and its accept loop; dropping it does not stop it, [`Listening::stop`] does.
#[derive(Debug)]
pub struct Listening {
    /// The address bound.
    pub addr: SocketAddr,
    socket: socket2::Socket,
    stopped: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Binds `addr` with a large backlog (tokio's default of 1,024 drops bursts of connects) and starts accepting.
pub fn listen(addr: SocketAddr, backlog: u32, shared: Arc<RouteShared>) -> io::Result<Listening> {
    let socket = crate::sockets::listening_socket(addr, backlog)?;
    let handle = socket.try_clone()?;
    let listener = TcpListener::from_std(socket.into())?;
    let addr = listener.local_addr()?;
    let stopped = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(accept_loop(listener, shared, stopped.clone()));
    Ok(Listening {
        addr,
        socket: handle,
        stopped,
        task,
    })
}

impl Listening {
    /// Stops listening now: new connects are refused before this returns (the kernel resets what was queued).
    pub fn stop(self) {
        self.stopped.store(true, Ordering::SeqCst);
        // shutdown() on a listening socket makes Linux refuse new connects at once, whatever the accept task
        // is doing; aborting the task then drops the last handle.
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<RouteShared>, stopped: Arc<AtomicBool>) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                let n = shared.accepted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(connection(shared.clone(), tcp, n));
            }
            Err(_) if stopped.load(Ordering::SeqCst) => return,
            Err(e) => {
                // Out of descriptors or a connection that died in the queue: wait a little, keep serving.
                tracing::warn!("tcp route {}: accept failed: {e}", shared.name);
                sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One connection's view: its number in the draws, its end signal, and which toxics it has already counted.
pub(crate) struct ConnCtx {
    pub(crate) shared: Arc<RouteShared>,
    n: u64,
    pub(crate) end: watch::Sender<Ending>,
    counted: Mutex<HashSet<u64>>,
}

impl super::protocol::Connection for ConnCtx {
    fn finish(&self, how: Ending) {
        ConnCtx::finish(self, how);
    }

    fn ending(&self) -> watch::Receiver<Ending> {
        self.end.subscribe()
    }

    fn bytes(&self, stream: Stream, n: usize) {
        self.shared.recorder.bytes(stream, n);
    }

    fn conn(&self) -> super::protocol::Conn<'_> {
        super::protocol::Conn {
            route: &self.shared.name,
            seed: self.shared.seed,
            link: self,
        }
    }
}

impl ConnCtx {
    /// Whether `toxic` takes this connection: decided by a draw of (seed, route, toxic name, connection number),
    /// so the same seed gives the same connections the same toxics, whenever the toxic was added.
    fn takes(&self, toxic: &Toxic) -> bool {
        if toxic.toxicity >= 1.0 {
            return true;
        }
        let key = route_key(&self.shared.name) ^ toxic.key.rotate_left(29);
        CallDraws::new(self.shared.seed, key, self.n).fault < toxic.toxicity
    }

    /// Counts `toxic` in the recorder the first time it acts on this connection.
    fn note(&self, toxic: &Toxic) {
        let first = self
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(toxic.key);
        if first {
            self.shared.recorder.toxic(toxic.kind);
        }
    }

    /// Ends the connection `how`, unless it is ending already.
    pub(crate) fn finish(&self, how: Ending) {
        self.end.send_if_modified(|e| {
            if *e == Ending::Open {
                *e = how;
                true
            } else {
                false
            }
        });
    }

    /// How the connection is ending (`Open` while it is not).
    pub(crate) fn ending(&self) -> Ending {
        *self.end.borrow()
    }
}

async fn connection(shared: Arc<RouteShared>, client: TcpStream, n: u64) {
    let _ = client.set_nodelay(true);
    shared.recorder.opened();
    let mut kill = shared.kill.subscribe();
    let ctx = Arc::new(ConnCtx {
        shared: shared.clone(),
        n,
        end: watch::channel(Ending::Open).0,
        counted: Mutex::new(HashSet::new()),
    });
    let kill_seen = shared.kill.subscribe();
    let work = serve(ctx.clone(), client);
    tokio::pin!(work);
    let killed = kill.changed();
    tokio::pin!(killed);
    // This task also moves the server's bytes to the client: the kill signal is polled again only when its
    // version moved or the task's waker changed, not on every chunk.
    let mut registered = Registered::default();
    let done = std::future::poll_fn(|cx| {
        if let Poll::Ready(e) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(e));
        }
        if registered.still(cx, !kill_seen.has_changed().unwrap_or(true)) {
            return Poll::Pending;
        }
        killed.as_mut().poll(cx).map(|_| None)
    })
    .await;
    let ending = match done {
        Some(e) => e,
        None => {
            ctx.finish(Ending::Close);
            work.await
        }
    };
    shared.recorder.closed(ending == Ending::Reset);
}

/// The waker a task's signal futures were last polled with. They stay registered with it until a signal fires,
/// so while the task's waker is the same and no signal's version moved, polling them again can be skipped:
/// tokio's watch futures cost tens of instructions per poll, and a busy connection's task is polled once per
/// chunk.
#[derive(Default)]
struct Registered(Option<Waker>);

impl Registered {
    /// True when the signals were last polled with this task's waker and `unmoved` (no version moved since);
    /// otherwise notes the waker, and the caller polls them.
    fn still(&mut self, cx: &std::task::Context<'_>, unmoved: bool) -> bool {
        if unmoved && self.0.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return true;
        }
        self.0 = Some(cx.waker().clone());
        false
    }
}

async fn serve(ctx: Arc<ConnCtx>, client: TcpStream) -> Ending {
    let mut end_rx = ctx.end.subscribe();
    let toxics = ctx.shared.toxics.borrow().clone();
    let mut wait = Duration::ZERO;
    let mut stall = false;
    for t in toxics.iter() {
        let connect = t.effect.before_connect();
        if connect != Connect::Now && ctx.takes(t) {
            ctx.note(t);
            match connect {
                Connect::Never => stall = true,
                Connect::After(d) => wait += d,
                Connect::Now => {}
            }
        }
    }
    if stall {
        hold(client, &mut end_rx).await;
        ctx.finish(Ending::Close);
        return ctx.ending();
    }
    if !wait.is_zero() {
        tokio::select! {
            _ = sleep(wait) => {}
            _ = ended(&mut end_rx) => return ctx.ending(),
        }
    }
    let upstream = tokio::select! {
        u = connect(&ctx.shared) => u,
        _ = ended(&mut end_rx) => return ctx.ending(),
    };
    let upstream = match upstream {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(
                "tcp route {}: upstream {}: {e}",
                ctx.shared.name,
                ctx.shared.upstream
            );
            ctx.shared.recorder.upstream_error();
            ctx.finish(Ending::Close);
            return Ending::Close;
        }
    };
    let _ = upstream.set_nodelay(true);
    let client = client.into_split();
    let upstream = upstream.into_split();
    let client = match &ctx.shared.wire {
        Some(wire) => wire.relay(ctx.clone(), client, upstream).await,
        None => forward(ctx.clone(), client, upstream).await,
    };
    let ending = ctx.ending();
    if let Some((client_read, client_write)) = client {
        if let Ok(client) = client_read.reunite(client_write) {
            if ending == Ending::Reset {
                // SO_LINGER 0 makes close() send a RST instead of a FIN: the client reads ECONNRESET.
                let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
            }
            drop(client);
        }
    }
    if ending == Ending::Open {
        Ending::Close
    } else {
        ending
    }
}

/// Forwards the bytes of both directions through the toxics; gives the client's halves back.
async fn forward(
    ctx: Arc<ConnCtx>,
    (client_read, client_write): (OwnedReadHalf, OwnedWriteHalf),
    (upstream_read, upstream_write): (OwnedReadHalf, OwnedWriteHalf),
) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
    let up = tokio::spawn(pump(
        ctx.clone(),
        Stream::Upstream,
        client_read,
        upstream_write,
    ));
    let (_, client_write) =
        pump(ctx.clone(), Stream::Downstream, upstream_read, client_write).await;
    let (client_read, _) = up.await.ok()?;
    Some((client_read, client_write))
}

/// Holds a stalled client: reads and drops what it sends until it leaves or the connection is ended.
async fn hold(mut client: TcpStream, end_rx: &mut watch::Receiver<Ending>) {
    let mut sink = vec![0u8; 4096];
    loop {
        tokio::select! {
            r = client.read(&mut sink) => if !matches!(r, Ok(n) if n > 0) { return },
            _ = ended(end_rx) => return,
        }
    }
}

/// Connects to the route's upstream, refusing addresses outside loopback and the allowed hosts.
async fn connect(shared: &RouteShared) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&shared.upstream).await?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address");
    for addr in addrs {
        if !upstream_allowed(&shared.upstream, addr.ip(), &shared.allow_hosts) {
            last = io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{addr} is not loopback and its host is not in allow_hosts"),
            );
            continue;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{addr} did not accept within {CONNECT_TIMEOUT:?}"),
                )
            }
        }
    }
    Err(last)
}

/// Forwards one direction until its sender finishes or the connection ends; gives the halves back so the
/// connection can be closed the way it ended. While no toxic acts on the direction its bytes go straight from the
/// read to the write; from the first toxic that does, through the queue that toxics shape.
async fn pump(
    ctx: Arc<ConnCtx>,
    stream: Stream,
    src: OwnedReadHalf,
    mut dst: OwnedWriteHalf,
) -> (OwnedReadHalf, OwnedWriteHalf) {
    let mut sent: u64 = 0;
    if !direct(&ctx, stream, &src, &mut dst, &mut sent).await {
        return (src, dst);
    }
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(QUEUE);
    let reader = async {
        let tx = tx;
        let mut end_rx = ctx.end.subscribe();
        // Pinned once, so waiting on the end costs one registration per connection, not one per chunk.
        let end = ended(&mut end_rx);
        tokio::pin!(end);
        loop {
            // Waits for data holding no buffer: an idle connection holds none in either direction.
            let ready = tokio::select! {
                biased;
                _ = &mut end => return,
                r = src.readable() => r,
            };
            let read = ready.and_then(|()| {
                with_scratch(|scratch| {
                    Ok(match read_into(src.as_ref(), scratch)? {
                        Read::Bytes(n) => Some(Bytes::copy_from_slice(&scratch[..n])),
                        Read::Eof => None,
                        Read::Nothing => Some(Bytes::new()),
                    })
                })
            });
            match read {
                Ok(Some(chunk)) if chunk.is_empty() => continue,
                Ok(None) => return,
                Ok(Some(chunk)) => {
                    let sent = tokio::select! {
                        biased;
                        _ = &mut end => false,
                        r = tx.send((Instant::now(), chunk)) => r.is_ok(),
                    };
                    if !sent {
                        return;
                    }
                }
                Err(_) => {
                    ctx.finish(Ending::Close);
                    return;
                }
            }
        }
    };
    let writer = write_loop(&ctx, stream, &mut rx, &mut dst, sent);
    tokio::join!(reader, writer);
    (src, dst)
}

/// Whether any toxic in `set` acts on the bytes of `stream` on this connection.
fn acting(ctx: &ConnCtx, stream: Stream, set: &[Toxic]) -> bool {
    set.iter()
        .any(|t| t.stream == stream && t.effect.before_connect() == Connect::Now && ctx.takes(t))
}

/// Moves this direction's bytes from the read straight to the write while no toxic acts on it: a chunk costs
/// one read and one write (the write tried at once, from the read's own buffer, so nothing is allocated unless the
/// receiver is slow). True when a toxic starts to act (the queued path takes over from there), false when the
/// direction is done.
async fn direct(
    ctx: &ConnCtx,
    stream: Stream,
    src: &OwnedReadHalf,
    dst: &mut OwnedWriteHalf,
    sent: &mut u64,
) -> bool {
    let mut toxics_rx = ctx.shared.toxics.subscribe();
    let mut end_rx = ctx.end.subscribe();
    // The two signals' versions, compared where their futures are not polled: an atomic load each.
    let mut toxics_seen = ctx.shared.toxics.subscribe();
    let end_seen = ctx.end.subscribe();
    loop {
        if acting(ctx, stream, &toxics_rx.borrow_and_update()) {
            return true;
        }
        toxics_seen.mark_unchanged();
        let end = ended(&mut end_rx);
        tokio::pin!(end);
        let changed = toxics_rx.changed();
        tokio::pin!(changed);
        let mut registered = Registered::default();
        loop {
            // Data first: a ready chunk is moved without looking at the signals. When the socket has nothing,
            // the signals' futures are polled only if they have not registered this task's waker yet or one of
            // their versions moved; between chunks the versions are compared, so a connection that never goes
            // idle still sees its end or a new toxic within one chunk. Polling both futures on every wait cost
            // about a tenth of the instructions of a chunk moved (callgrind). The socket's readiness is polled in
            // place (its one reader slot) rather than through a `readable()` future, which joins and leaves the
            // socket's list of waiters on every chunk.
            let woke = std::future::poll_fn(|cx| {
                if let Poll::Ready(r) = src.as_ref().poll_read_ready(cx) {
                    return Poll::Ready(Woke::Readable(r));
                }
                let unmoved = !end_seen.has_changed().unwrap_or(true)
                    && !toxics_seen.has_changed().unwrap_or(true);
                if registered.still(cx, unmoved) {
                    return Poll::Pending;
                }
                if end.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Signal(false));
                }
                changed.as_mut().poll(cx).map(|c| Woke::Signal(c.is_ok()))
            })
            .await;
            let ready = match woke {
                Woke::Readable(r) => r,
                Woke::Signal(false) => return false,
                Woke::Signal(true) => break,
            };
            let moved = ready.and_then(|()| {
                with_scratch(|scratch| {
                    let n = match read_into(src.as_ref(), scratch)? {
                        Read::Bytes(n) => n,
                        Read::Eof => return Ok(None),
                        Read::Nothing => return Ok(Some((0, Bytes::new()))),
                    };
                    let mut written = 0;
                    while written < n {
                        match send_now(dst, &scratch[written..n]) {
                            Ok(w) => written += w,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                    let rest = if written == n {
                        Bytes::new()
                    } else {
                        Bytes::copy_from_slice(&scratch[written..n])
                    };
                    Ok(Some((written, rest)))
                })
            });
            let (written, rest) = match moved {
                Ok(Some(m)) => m,
                Ok(None) => {
                    let _ = dst.shutdown().await;
                    return false;
                }
                Err(_) => {
                    ctx.finish(Ending::Close);
                    return false;
                }
            };
            if written > 0 {
                *sent += written as u64;
                ctx.shared.recorder.bytes(stream, written);
            }
            if !rest.is_empty() {
                let done = tokio::select! {
                    biased;
                    _ = &mut end => return false,
                    r = dst.write_all(&rest) => r.is_ok(),
                };
                if !done {
                    ctx.finish(Ending::Close);
                    return false;
                }
                *sent += rest.len() as u64;
                ctx.shared.recorder.bytes(stream, rest.len());
            }
            if end_seen.has_changed().unwrap_or(true) && ctx.ending() != Ending::Open {
                return false;
            }
            if toxics_seen.has_changed().unwrap_or(true) {
                break;
            }
        }
    }
}

/// What ended a wait of the direct path.
enum Woke {
    /// The source socket has (or may have) bytes to read.
    Readable(io::Result<()>),
    /// The connection ended (false) or the toxics changed (true).
    Signal(bool),
}

async fn write_loop(
    ctx: &ConnCtx,
    stream: Stream,
    rx: &mut mpsc::Receiver<(Instant, Bytes)>,
    dst: &mut OwnedWriteHalf,
    mut sent: u64,
) {
    let mut toxics_rx = ctx.shared.toxics.subscribe();
    let mut end_rx = ctx.end.subscribe();
    let direction = match stream {
        Stream::Upstream => 0x75,
        Stream::Downstream => 0x64,
    };
    let draws = CallDraws::new(
        ctx.shared.seed,
        route_key(&ctx.shared.name) ^ direction,
        ctx.n,
    );
    let mut rng = ChunkRng::new((draws.latency * (1u64 << 53) as f64) as u64);
    let mut first_seen: HashMap<u64, Instant> = HashMap::new();
    // What is left of a chunk whose delivery the toxics changed under: it goes out next, planned by the new set.
    let mut pending: Option<(Instant, Bytes)> = None;
    loop {
        let set = toxics_rx.borrow_and_update().clone();
        let active: Vec<&Toxic> = set
            .iter()
            .filter(|t| {
                t.stream == stream && t.effect.before_connect() == Connect::Now && ctx.takes(t)
            })
            .collect();
        first_seen.retain(|k, _| active.iter().any(|t| t.key == *k));
        let now = Instant::now();
        let mut blocked = false;
        let mut deadline: Option<(Instant, Ending)> = None;
        for t in &active {
            if let Some(hold) = t.effect.hold() {
                ctx.note(t);
                let since = *first_seen.entry(t.key).or_insert(now);
                blocked |= hold.blocks;
                if let Some((after, how)) = hold.ends {
                    let at = since + after;
                    if deadline.is_none_or(|(d, _)| at < d) {
                        deadline = Some((at, how));
                    }
                }
            }
        }
        let (deadline_at, deadline_how) = deadline.unwrap_or((now, Ending::Open));
        // A deadline already due ends the connection before another byte moves (tokio's timer would only
        // notice it at its next tick, after a ready chunk had been written).
        if deadline.is_some() && deadline_at <= Instant::now() {
            ctx.finish(deadline_how);
            return;
        }
        let next = if blocked { None } else { pending.take() };
        let (at, chunk) = match next {
            Some(item) => item,
            None => tokio::select! {
                biased;
                _ = ended(&mut end_rx) => return,
                _ = sleep_until(deadline_at), if deadline.is_some() => {
                    ctx.finish(deadline_how);
                    return;
                }
                changed = toxics_rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                item = rx.recv(), if !blocked && pending.is_none() => match item {
                    Some(item) => item,
                    None => {
                        let linger = active.iter().map(|t| t.effect.close_delay()).max().unwrap_or_default();
                        if !linger.is_zero() {
                            for t in active.iter().filter(|t| !t.effect.close_delay().is_zero()) {
                                ctx.note(t);
                            }
                            tokio::select! {
                                _ = sleep(linger) => {}
                                _ = ended(&mut end_rx) => return,
                            }
                        }
                        let _ = dst.shutdown().await;
                        return;
                    }
                },
            },
        };
        let mut plan = ChunkPlan {
            delay: Duration::ZERO,
            bytes_per_second: None,
            slices: None,
            limit: None,
        };
        for t in &active {
            let before = plan.clone();
            t.effect.shape(&mut plan, &mut rng);
            if plan != before {
                ctx.note(t);
            }
        }
        let delivery = tokio::select! {
            d = deliver(ctx, stream, at, chunk, &plan, &mut rng, &mut sent, dst, &mut toxics_rx) => d,
            _ = ended(&mut end_rx) => Delivery::Stop,
        };
        match delivery {
            Delivery::Done => {}
            Delivery::Stop => return,
            Delivery::Replan(rest) => pending = Some((at, rest)),
        }
    }
}
