//! HTTP/2 on the data port: the cleartext preface that picks it per connection, the error codes of RST_STREAM
//! and GOAWAY, and what one HTTP/2 connection counts while it lives.
//!
//! For: recognising a prior-knowledge HTTP/2 connection (`PRI * HTTP/2.0`) on the same port as HTTP/1.1, the
//! per-connection state the stream-level faults need (streams so far, a GOAWAY asked for) and the idle timeout
//! needs (streams waiting for their answer), and the bytes of an
//! abrupt GOAWAY. Not for: answering calls (`listener` serves both versions with the same call handler), the
//! error codes' names (`crate::behaviours::H2Code`, the faults' parameter) or gRPC framing (`grpc`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::Notify;

pub use crate::behaviours::H2Code;

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
