//! HTTP/2 seen from the client's side, for the tests of faultd's HTTP/2 and gRPC: an h2 client for well-formed
//! calls, and raw frames for what no client library will send (malformed frames, floods, a peer that never reads).

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{HeaderMap, Request};
use bytes::Bytes;
use faultd::{Config, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "test.yaml").unwrap();
    faultd::start(config, Options::default()).await.unwrap()
}

/// An HTTP/2 connection with prior knowledge.
pub async fn connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// What one stream got: the head, the body and the trailers, or the h2 error that ended it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: HeaderMap,
}

impl Answer {
    pub fn grpc_status(&self) -> Option<&str> {
        self.trailers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
    }
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub async fn exchange(
    client: &h2::client::SendRequest<Bytes>,
    request: Request<()>,
    body: &[u8],
) -> Result<Answer, h2::Error> {
    let mut client = client.clone().ready().await?;
    let (response, mut send) = client.send_request(request, body.is_empty())?;
    if !body.is_empty() {
        // faultd may answer before it reads the request (as a server may): the stream can be closed by now.
        let _ = send.send_data(Bytes::copy_from_slice(body), true);
    }
    let response = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("no answer within 20 s")?;
    let (parts, mut stream) = response.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = stream.trailers().await?.unwrap_or_default();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: data,
        trailers,
    })
}

pub fn get(addr: SocketAddr, path: &str) -> Request<()> {
    Request::get(format!("http://{addr}{path}"))
        .body(())
        .unwrap()
}

pub fn grpc(addr: SocketAddr, method: &str, timeout: Option<&str>) -> Request<()> {
    let mut r = Request::post(format!("http://{addr}{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        r = r.header("grpc-timeout", t);
    }
    r.body(()).unwrap()
}

pub fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The client's connection preface and an empty SETTINGS frame.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// Frame types and flags the raw tests write.
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const CONTINUATION: u8 = 9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;

/// One frame: its 9-byte header and payload.
pub fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A request's header block in HPACK with only static-table names and literals never indexed, so each block
/// stands alone: `:method GET`, `:scheme http`, `:path`, `:authority localhost`.
pub fn get_block(path: &str) -> Vec<u8> {
    let mut out = vec![0x82, 0x86];
    literal(&mut out, 4, path.as_bytes());
    literal(&mut out, 1, b"localhost");
    out
}

/// A literal header field never indexed, its name from the static table (`index` < 15).
pub fn literal(out: &mut Vec<u8>, index: u8, value: &[u8]) {
    assert!(index < 15 && value.len() < 127);
    out.push(0x10 | index);
    out.push(value.len() as u8);
    out.extend_from_slice(value);
}

/// A frame read back from faultd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl RawFrame {
    /// A GOAWAY's or RST_STREAM's error code.
    pub fn code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// A raw HTTP/2 connection: the preface sent, frames written and read as bytes.
pub struct Raw {
    pub tcp: TcpStream,
    read: Vec<u8>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(PREFACE).await.unwrap();
        Raw {
            tcp,
            read: Vec::new(),
        }
    }

    /// Writes bytes; an error means faultd has closed the connection.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.tcp.write_all(bytes).await
    }

    /// The next frame, or `None` once faultd has closed the connection (or reset it). Fails the test after 10 s.
    pub async fn next(&mut self) -> Option<RawFrame> {
        loop {
            if self.read.len() >= 9 {
                let length =
                    u32::from_be_bytes([0, self.read[0], self.read[1], self.read[2]]) as usize;
                if self.read.len() >= 9 + length {
                    let frame = RawFrame {
                        kind: self.read[3],
                        flags: self.read[4],
                        stream: u32::from_be_bytes(self.read[5..9].try_into().unwrap())
                            & 0x7fff_ffff,
                        payload: self.read[9..9 + length].to_vec(),
                    };
                    self.read.drain(..9 + length);
                    return Some(frame);
                }
            }
            let mut chunk = [0u8; 16384];
            let n = tokio::time::timeout(Duration::from_secs(10), self.tcp.read(&mut chunk))
                .await
                .expect("faultd neither wrote nor closed within 10 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.read.extend_from_slice(&chunk[..n]);
        }
    }

    /// Frames until faultd's GOAWAY (returned) or the end of the connection (`None`), answering nothing.
    pub async fn until_goaway(&mut self) -> Option<RawFrame> {
        while let Some(frame) = self.next().await {
            if frame.kind == GOAWAY {
                return Some(frame);
            }
        }
        None
    }
}
