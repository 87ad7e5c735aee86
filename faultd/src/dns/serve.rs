//! The resolver's sockets: one UDP socket and one TCP listener on the same port, each query handed to
//! [`respond`] and its answer sent after its delay (or never).
//!
//! For: reading datagrams and length-prefixed TCP messages, holding delays, relaying unknown names to the
//! upstream, and counting every query once. Not for: deciding (the schedule's plan does, through [`Names`]) or
//! building messages (`super::answer`). Everything is bounded: queries held at once, TCP connections, a TCP
//! connection's idle time and the upstream's answer time, so a flood costs memory in proportion to the bounds,
//! never more.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::answer::{is_response, respond, Handled, Reply, Transport};
use super::faults::NameDecision;
use super::record::DnsRecorder;

/// The most queries held (delayed or forwarded) at once; past it a query that would be held gets no answer, as
/// from a resolver out of room, and is counted as dropped.
pub const MAX_HELD: usize = 16_384;
/// The most TCP connections served at once; past it a new one is closed at once.
pub const MAX_TCP_CONNECTIONS: usize = 512;
/// How long a TCP connection may stay idle (RFC 7766 suggests seconds).
pub const TCP_IDLE: Duration = Duration::from_secs(10);
/// How long the upstream of unknown names has to answer.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);

/// What the sockets ask of the schedule: the decision for a name, where unknown names go, and the recording
/// clock.
pub trait Names: Send + Sync {
    /// What the next query for `name` (a name key) gets now; `None` for a name the configuration does not give.
    fn decide(&self, name: &str) -> Option<NameDecision>;
    /// The upstream of unknown names, when they are forwarded.
    fn forward(&self) -> Option<SocketAddr>;
    /// The recording time of an instant, in ns from the origin.
    fn time_ns(&self, at: Instant) -> u64;
}

/// A running resolver's shared parts.
pub struct Resolver {
    /// The schedule.
    pub names: Arc<dyn Names>,
    /// Where queries are counted.
    pub recorder: Arc<DnsRecorder>,
    held: Semaphore,
}

impl Resolver {
    /// A resolver over `names`, counting into `recorder`.
    pub fn new(names: Arc<dyn Names>, recorder: Arc<DnsRecorder>) -> Resolver {
        Resolver {
            names,
            recorder,
            held: Semaphore::new(MAX_HELD),
        }
    }

    /// Handles one query and counts it; `held` tells whether a delayed or forwarded query may be held.
    fn handle(&self, bytes: &[u8], transport: Transport) -> Handled {
        let forwards = self.names.forward().is_some();
        let mut handled = respond(bytes, transport, forwards, &mut |name| {
            self.names.decide(name)
        });
        let holds = !handled.delay.is_zero() || handled.reply == Reply::Forward;
        if holds && self.held.available_permits() == 0 {
            handled.outcome = "dropped";
            handled.reply = Reply::Drop;
        }
        self.recorder
            .record(self.names.time_ns(Instant::now()), &handled);
        handled
    }

    /// The bytes to send for a handled query, after its delay: `None` for no answer.
    async fn settle(&self, query: &[u8], handled: Handled) -> Option<Vec<u8>> {
        let _permit = if handled.delay.is_zero() && handled.reply != Reply::Forward {
            None
        } else {
            Some(self.held.try_acquire().ok()?)
        };
        if !handled.delay.is_zero() {
            tokio::time::sleep(handled.delay).await;
        }
        match handled.reply {
            Reply::Send(bytes) => Some(bytes),
            Reply::Drop => None,
            Reply::Forward => forward(query, self.names.forward()?).await,
        }
    }
}

/// Serves UDP on `udp` and TCP on `tcp` until `shutdown` changes.
pub async fn serve(
    udp: UdpSocket,
    tcp: TcpListener,
    resolver: Arc<Resolver>,
    mut shutdown: watch::Receiver<bool>,
) {
    let udp = Arc::new(udp);
    let tcp_task = tokio::spawn(serve_tcp(tcp, resolver.clone(), shutdown.clone()));
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, peer) = tokio::select! {
            r = udp.recv_from(&mut buf) => match r {
                Ok(r) => r,
                // An ICMP error of an earlier send surfaces here on Linux; the socket is still good.
                Err(_) => continue,
            },
            _ = shutdown.changed() => break,
        };
        let query = &buf[..n];
        let handled = resolver.handle(query, Transport::Udp);
        match handled.reply {
            Reply::Send(ref bytes) if handled.delay.is_zero() => {
                let _ = udp.send_to(bytes, peer).await;
            }
            Reply::Drop => {}
            _ => {
                let (udp, resolver, query) = (udp.clone(), resolver.clone(), query.to_vec());
                tokio::spawn(async move {
                    if let Some(bytes) = resolver.settle(&query, handled).await {
                        let _ = udp.send_to(&bytes, peer).await;
                    }
                });
            }
        }
    }
    tcp_task.abort();
}

async fn serve_tcp(
    listener: TcpListener,
    resolver: Arc<Resolver>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => {
                    // Out of descriptors, most likely: let some connections end.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            continue;
        };
        let (resolver, mut shutdown) = (resolver.clone(), shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = serve_connection(stream, &resolver) => {}
                _ = shutdown.changed() => {}
            }
            drop(permit);
        });
    }
}

/// Answers the queries of one TCP connection in turn until it closes, goes idle or sends what is not a
/// length-prefixed message.
async fn serve_connection(mut stream: TcpStream, resolver: &Resolver) {
    let mut query = Vec::new();
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        query.resize(usize::from(u16::from_be_bytes(len)), 0);
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut query)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let handled = resolver.handle(&query, Transport::Tcp);
        let Some(bytes) = resolver.settle(&query, handled).await else {
            continue;
        };
        let Ok(n) = u16::try_from(bytes.len()) else {
            return;
        };
        let mut out = Vec::with_capacity(bytes.len() + 2);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&bytes);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Relays `query` to `upstream` over UDP and returns its answer, if one with the query's id comes in time.
async fn forward(query: &[u8], upstream: SocketAddr) -> Option<Vec<u8>> {
    let local: SocketAddr = if upstream.is_ipv6() {
        "[::1]:0".parse().ok()?
    } else {
        "127.0.0.1:0".parse().ok()?
    };
    let socket = UdpSocket::bind(local).await.ok()?;
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; 65_535];
    let deadline = Instant::now() + FORWARD_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        let answer = &buf[..n];
        if is_response(answer) && answer[..2] == query[..2] {
            return Some(answer.to_vec());
        }
    }
}

/// Binds the resolver's UDP socket and TCP listener on one port: `addr`'s, or a free one when its port is 0.
pub fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    // With port 0 the TCP port the kernel picks may be taken for UDP by someone else: try a few.
    let mut last = None;
    for _ in 0..8 {
        let std_tcp = std::net::TcpListener::bind(addr)?;
        let port = std_tcp.local_addr()?.port();
        match std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), port)) {
            Ok(std_udp) => {
                std_tcp.set_nonblocking(true)?;
                std_udp.set_nonblocking(true)?;
                return Ok((
                    UdpSocket::from_std(std_udp)?,
                    TcpListener::from_std(std_tcp)?,
                ));
            }
            Err(e) if addr.port() == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port free for both UDP and TCP")))
}
