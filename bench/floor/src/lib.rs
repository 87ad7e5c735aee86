//! What the two floors share: a loopback address from the command line, a listener bound as faultd binds
//! its own, and the loop that accepts callers and serves each.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// `arg` as a loopback address (`127.0.0.1:PORT` or `[::1]:PORT`); `what` names it in the error.
pub fn loopback(arg: Option<String>, what: &str, usage: &str) -> Result<SocketAddr, String> {
    let text = arg.ok_or_else(|| format!("usage: {usage}"))?;
    let addr: SocketAddr = text
        .parse()
        .map_err(|e| format!("the {what} address {text:?}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{addr} is not a loopback address"));
    }
    Ok(addr)
}

/// Listens on `addr` as faultd does (`faultd::server::bind`), with a backlog above tokio's 1,024, which drops
/// connects that arrive in a burst.
pub fn listen(addr: SocketAddr) -> Result<TcpListener, String> {
    faultd::server::bind(addr, 4096).map_err(|e| format!("listen on {addr}: {e}"))
}

/// Accepts callers until the process ends and serves each in a task of its own. After an accept fails (out of
/// file descriptors, or a connect that died in the queue) it waits a little and goes on, so that the others keep
/// being served without a busy loop.
pub async fn serve_each<F, Fut>(program: &str, listener: TcpListener, serve: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                tokio::spawn(serve(tcp));
            }
            Err(e) => {
                eprintln!("{program}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    }
}
