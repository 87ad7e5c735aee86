//! A local test server: axum on 127.0.0.1, port 0, with a listen backlog large enough that bursts of new
//! connections are not dropped (tokio's default of 1,024 drops connects in bursts on this machine).

#![allow(dead_code)]

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

/// Serves `router` on a fresh loopback port until the test's runtime ends; returns `http://127.0.0.1:PORT`.
pub async fn serve(router: axum::Router) -> String {
    let listener = listener();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// A loopback listener on port 0 with a backlog of 8,192.
pub fn listener() -> tokio::net::TcpListener {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(8192).unwrap();
    socket.set_nonblocking(true).unwrap();
    tokio::net::TcpListener::from_std(socket.into()).unwrap()
}

/// A loopback port with nothing listening on it (bound, read back, released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
