//! A minimal HTTP/1.1 client over loopback for the end-to-end tests: raw sockets, so a reset, an empty reply or
//! malformed bytes are seen exactly as a client sees them, without a client library's interpretation.
#![allow(dead_code)]

pub mod http2;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a call got back.
#[derive(Debug)]
pub enum Reply {
    /// A parsed HTTP response.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// The connection was reset.
    Reset,
    /// The connection closed with no byte.
    Empty,
    /// Bytes that do not start with an HTTP status line.
    Garbage(Vec<u8>),
}

impl Reply {
    pub fn status(&self) -> Option<u16> {
        match self {
            Reply::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn header(&self, name: &str) -> Option<String> {
        match self {
            Reply::Http { headers, .. } => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    pub fn body(&self) -> &[u8] {
        match self {
            Reply::Http { body, .. } => body,
            _ => &[],
        }
    }
}

/// Sends one request with `Connection: close` and reads the whole reply.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        request.push_str(&format!("{n}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    match tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut raw)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Reply::Reset,
        Ok(Err(e)) => panic!("read failed: {e}"),
        Err(_) => panic!("no reply within 20 s"),
    }
    parse(raw)
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    call(addr, "GET", path, &[], b"").await
}

fn parse(raw: Vec<u8>) -> Reply {
    if raw.is_empty() {
        return Reply::Empty;
    }
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Reply::Garbage(raw);
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Reply::Garbage(raw);
    };
    let Ok(status) = code.parse::<u16>() else {
        return Reply::Garbage(raw);
    };
    if !version.starts_with("HTTP/1.") {
        return Reply::Garbage(raw);
    }
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Reply::Http {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 2 + size + 2..];
    }
    out
}

/// Polls `check` every 10 ms until it holds; fails the test after 20 s, naming `what` it waited for.
pub async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
