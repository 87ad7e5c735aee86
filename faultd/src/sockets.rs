//! The bare sockets under every listener of faultd: binding with a deep backlog, accepting until shutdown, and
//! writing bytes below any protocol.
//!
//! For: what the data plane, the TLS handshake, faultd's own APIs and the shedding of connections share at the
//! socket level. Not for: protocols (`http`, `tls`) or TCP routes' relaying (`tcp`), which own their streams.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Binds a TCP listener with `backlog` pending connects (tokio's own `bind` uses 1,024).
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    TcpListener::from_std(listening_socket(addr, backlog)?.into())
}

/// A socket bound to `addr` and listening with `backlog` pending connects, for a caller that keeps a handle to
/// it beside its listener (to shut it down from another task).
pub fn listening_socket(addr: SocketAddr, backlog: u32) -> io::Result<socket2::Socket> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket)
}

/// The next connection of `listener`, or `None` once `shutdown` turns true.
pub async fn next_connection(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<TcpStream> {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return None,
        };
        match accepted {
            Ok((tcp, _)) => return Some(tcp),
            // Out of file descriptors or a connect that died in the queue: keep serving the others.
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// Writes `bytes` on the bare socket; false if it failed (and gave up).
pub async fn write_raw(tcp: &TcpStream, bytes: &[u8]) -> bool {
    let mut written = 0;
    while written < bytes.len() {
        if tcp.writable().await.is_err() {
            return false;
        }
        match tcp.try_write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return false,
        }
    }
    true
}
