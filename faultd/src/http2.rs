//! HTTP/2 on the data port: the cleartext preface that picks it per connection, the error codes of RST_STREAM
//! and GOAWAY, and what one HTTP/2 connection counts while it lives.
//!
//! For: recognising a prior-knowledge HTTP/2 connection (`PRI * HTTP/2.0`) on the same port as HTTP/1.1, the
//! per-connection state the stream-level faults need (streams so far, a GOAWAY asked for) and the idle timeout
//! needs (streams waiting for their answer), and the bytes of an
//! abrupt GOAWAY. Not for: answering calls (`server.rs` serves both versions with the same call handler) or gRPC
//! framing (`grpc.rs`).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// The client connection preface of HTTP/2 (RFC 9113, 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a connection may take to send the whole preface once its first bytes match it.
const PREFACE_WAIT: Duration = Duration::from_secs(10);

/// Whether the connection opens with the HTTP/2 preface, looked at without consuming a byte. Waits for the first
/// bytes; any byte that differs from the preface (every HTTP/1.1 method does by its fourth byte at the latest)
/// decides HTTP/1.1 at once, as does a connection that closes first.
pub async fn starts_with_preface(tcp: &TcpStream) -> bool {
    let mut buf = [0u8; PREFACE.len()];
    let started = tokio::time::Instant::now();
    loop {
        let n = match tcp.peek(&mut buf).await {
            Ok(n) => n,
            Err(_) => return false,
        };
        if n == 0 || buf[..n] != PREFACE[..n] {
            return false;
        }
        if n == PREFACE.len() {
            return true;
        }
        // A preface split across segments: peeking again would return the same bytes at once, so wait a little.
        if started.elapsed() > PREFACE_WAIT {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// An HTTP/2 error code (RFC 9113, 7), as RST_STREAM and GOAWAY carry it: a name (`REFUSED_STREAM`,
/// `enhance_your_calm`) or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct H2Code(pub u32);

const H2_NAMES: [&str; 14] = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
];

impl H2Code {
    /// NO_ERROR (0).
    pub const NO_ERROR: H2Code = H2Code(0);
    /// INTERNAL_ERROR (2).
    pub const INTERNAL_ERROR: H2Code = H2Code(2);
    /// CANCEL (8).
    pub const CANCEL: H2Code = H2Code(8);

    /// The code as h2 carries it.
    pub fn reason(self) -> h2::Reason {
        h2::Reason::from(self.0)
    }
}

impl FromStr for H2Code {
    type Err = String;

    fn from_str(input: &str) -> Result<H2Code, String> {
        let s = input.trim();
        if let Ok(n) = s.parse::<u32>() {
            return Ok(H2Code(n));
        }
        H2_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s))
            .map(|i| H2Code(i as u32))
            .ok_or_else(|| {
                format!(
                    "{input:?} is not an HTTP/2 error code (one of {}, or a number)",
                    H2_NAMES.join(", ")
                )
            })
    }
}

impl fmt::Display for H2Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match H2_NAMES.get(self.0 as usize) {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for H2Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = H2Code;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an HTTP/2 error code such as REFUSED_STREAM or 7")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<H2Code, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<H2Code, E> {
                u32::try_from(v)
                    .map(H2Code)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP/2 error code")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<H2Code, E> {
                u32::try_from(v)
                    .map(H2Code)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP/2 error code")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for H2Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for H2Code {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "H2Code".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "an HTTP/2 error code: its name (REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM, ...) or its number",
            "oneOf": [ { "type": "string", "enum": H2_NAMES }, { "type": "integer", "minimum": 0 } ],
        })
    }
}

/// HTTP/2 settings faultd announces on each new connection (a scenario's `http2:` section).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Http2Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: the most streams a caller may hold open on one connection; a caller
    /// that wants more must queue them or open another connection. Unlimited (hyper's default, 200) when absent.
    /// Read when a connection opens, so a change reaches new connections only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_streams: Option<u32>,
}

/// What an HTTP/2 connection shares with its calls: how many streams it has carried, whether one of them
/// asked for a graceful GOAWAY, and how long none has been waiting for its answer (the idle timeout).
pub struct Streams {
    opened: AtomicU64,
    goaway: AtomicBool,
    /// Wakes the connection to start a graceful shutdown.
    pub graceful: Notify,
    /// Streams whose call has not answered yet (held, delayed, proxied).
    waiting: AtomicU64,
    born: Instant,
    /// When the last waiting stream answered, in milliseconds after `born`.
    quiet_since_ms: AtomicU64,
}

impl Default for Streams {
    fn default() -> Streams {
        Streams {
            opened: AtomicU64::new(0),
            goaway: AtomicBool::new(false),
            graceful: Notify::new(),
            waiting: AtomicU64::new(0),
            born: Instant::now(),
            quiet_since_ms: AtomicU64::new(0),
        }
    }
}

/// A stream whose call has not answered yet: its connection is not idle while one lives.
pub struct Waiting(Arc<Streams>);

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            let ms = self.0.born.elapsed().as_millis() as u64;
            self.0.quiet_since_ms.store(ms, Ordering::Release);
        }
    }
}

impl Streams {
    /// Marks a stream as waiting for its answer until the returned value is dropped.
    pub fn waiting(self: &Arc<Self>) -> Waiting {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(self.clone())
    }

    /// How long no stream has been waiting for its answer; `None` while one is.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        let quiet_since = Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        Some(self.born.elapsed().saturating_sub(quiet_since))
    }

    /// Counts a new stream; returns how many the connection has carried, this one included.
    pub fn opened(&self) -> u64 {
        self.opened.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// True for the first caller only: a connection sends its GOAWAY once.
    pub fn take_goaway(&self) -> bool {
        !self.goaway.swap(true, Ordering::AcqRel)
    }
}

/// A GOAWAY frame (RFC 9113, 6.8) that names every stream as possibly processed, so a caller fails the streams
/// it has in flight instead of retrying them elsewhere: the abrupt GOAWAY, written on the bare socket once hyper
/// has let go of it.
pub fn goaway_frame(code: H2Code) -> [u8; 17] {
    let mut frame = [0u8; 17];
    frame[2] = 8; // length 8
    frame[3] = 0x7; // GOAWAY, no flags, stream 0
    frame[9..13].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    frame[13..17].copy_from_slice(&code.0.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_from_names_and_numbers_and_print_as_names() {
        assert_eq!("refused_stream".parse(), Ok(H2Code(7)));
        assert_eq!("11".parse(), Ok(H2Code(11)));
        assert_eq!(H2Code(11).to_string(), "ENHANCE_YOUR_CALM");
        assert_eq!(H2Code(99).to_string(), "99");
        assert!("BOGUS"
            .parse::<H2Code>()
            .unwrap_err()
            .contains("REFUSED_STREAM"));
    }

    #[test]
    fn the_goaway_frame_is_length_type_stream_zero_last_id_and_code() {
        let f = goaway_frame(H2Code(11));
        assert_eq!(&f[..9], &[0, 0, 8, 7, 0, 0, 0, 0, 0]);
        assert_eq!(&f[9..13], &[0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(&f[13..], &[0, 0, 0, 11]);
    }

    #[tokio::test]
    async fn the_preface_is_told_from_http1_without_consuming_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (sent, h2) in [
            (&PREFACE[..], true),
            (&b"PUT /x HTTP/1.1\r\n\r\n"[..], false),
            (&b"POST /x HTTP/1.1\r\n\r\n"[..], false),
        ] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            client.write_all(sent).await.unwrap();
            assert_eq!(starts_with_preface(&server).await, h2);
            let mut first = [0u8; 3];
            server.read_exact(&mut first).await.unwrap();
            assert_eq!(&first, &sent[..3]);
        }
    }
}
