//! The floor under faultd's TCP benchmark (`bench/tcp/run.sh a`): a relay on the same runtime as faultd's there
//! (tokio's single-threaded one) that copies bytes both ways with tokio's `copy_bidirectional` and does nothing
//! else: no toxics, no recorder, no control. Beside HAProxy it says how a plain tokio relay fares against the same
//! Redis on the same CPU; beside faultd, what faultd's TCP routes cost over copying.
//!
//! Usage: `bench-relay LISTEN UPSTREAM`, both loopback addresses (`127.0.0.1:PORT`).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// Relays one caller to its own upstream connection until either side closes.
async fn relay(mut caller: TcpStream, upstream: SocketAddr) {
    let _ = caller.set_nodelay(true);
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut caller, &mut server).await;
}

/// Accepts callers and relays each to its own upstream connection, until the process ends.
async fn serve(listener: TcpListener, upstream: SocketAddr) {
    bench_floor::serve_each("bench-relay", listener, move |tcp| relay(tcp, upstream)).await
}

/// One thread, as faultd runs with one worker in the benchmark (a single-threaded runtime).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    const USAGE: &str = "bench-relay LISTEN UPSTREAM (loopback addresses)";
    let mut args = std::env::args().skip(1);
    let listen = bench_floor::loopback(args.next(), "listen", USAGE)
        .map_err(|e| format!("bench-relay: {e}"))?;
    let upstream = bench_floor::loopback(args.next(), "upstream", USAGE)
        .map_err(|e| format!("bench-relay: {e}"))?;
    let listener = bench_floor::listen(listen).map_err(|e| format!("bench-relay: {e}"))?;
    serve(listener, upstream).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bytes go through both ways, and a caller's close reaches the upstream as end of stream.
    #[tokio::test]
    async fn relays_both_ways_and_passes_the_close_on() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        let relay_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = relay_listener.local_addr().unwrap();
        tokio::spawn(serve(relay_listener, upstream_addr));
        // The upstream answers each read with its bytes upper-cased and counts what it got until the close.
        let server = tokio::spawn(async move {
            let (mut tcp, _) = upstream.accept().await.unwrap();
            let mut got = 0;
            let mut buf = [0u8; 1024];
            loop {
                let n = tcp.read(&mut buf).await.unwrap();
                if n == 0 {
                    return got;
                }
                got += n;
                tcp.write_all(&buf[..n].to_ascii_uppercase()).await.unwrap();
            }
        });
        let mut caller = TcpStream::connect(relay_addr).await.unwrap();
        caller.write_all(b"ping").await.unwrap();
        let mut answer = [0u8; 4];
        caller.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"PING");
        caller.shutdown().await.unwrap();
        assert_eq!(server.await.unwrap(), 4);
    }
}
