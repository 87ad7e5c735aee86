//! The PostgreSQL v3 framer: cuts one direction's bytes into messages as they arrive, without ever holding more
//! than one bounded message.
//!
//! For: the startup packets a client opens with (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest: a
//! length and a code, no type byte), then typed messages (a type byte and a length that counts itself) in either
//! direction. A message whose type the session needs to read (a query's text, a statement's name, an error's
//! SQLSTATE) comes whole when it is at most [`INSPECT_LIMIT`] bytes; any other message, and a longer one, comes as
//! its first bytes and then the rest as it arrives, so a large row or COPY stream passes through in chunks. Not
//! for: what a message means (see the session) or moving bytes.
//!
//! Nothing here panics on any input: a length below the minimum, above [`MAX_MESSAGE`], or a type byte the
//! protocol does not have ends the framing with [`Event::Garbage`] holding the bytes from there on.

use bytes::{Bytes, BytesMut};

/// The longest message read whole for inspection; a longer one is streamed through uninspected.
pub const INSPECT_LIMIT: usize = 1 << 20;
/// The longest message faultd accepts as PostgreSQL (PostgreSQL's own limit on a message is 1 GB).
pub const MAX_MESSAGE: usize = 1 << 30;
/// The longest startup packet (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP: usize = 10_000;

/// The code of an SSLRequest.
pub const SSL_REQUEST: u32 = 80_877_103;
/// The code of a GSSENCRequest.
pub const GSSENC_REQUEST: u32 = 80_877_104;
/// The code of a CancelRequest.
pub const CANCEL_REQUEST: u32 = 80_877_102;
/// Protocol 3.0, the StartupMessage's code.
pub const PROTOCOL_3: u32 = 196_608;

/// Which peer's bytes a framer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's (frontend messages), starting with a startup packet.
    Client,
    /// The server's (backend messages).
    Server,
}

/// The startup packets a client may open with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    /// Asks for TLS; the answer is one byte, `S` or `N`.
    Ssl,
    /// Asks for GSSAPI encryption; the answer is one byte, `G` or `N`.
    Gssenc,
    /// Cancels a query of another connection; the server closes this one.
    Cancel,
    /// Protocol 3.0 with its parameters: typed messages follow.
    Message,
}

/// One step of the framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A startup packet, whole (its length first).
    Startup(Startup, Bytes),
    /// A typed message, whole: `bytes` from its type byte to its end.
    Message {
        /// The type byte.
        tag: u8,
        /// The whole message.
        bytes: Bytes,
    },
    /// The start of a typed message that is passed on uninspected: its first bytes (type byte included); the
    /// rest follows as [`Event::More`].
    Start {
        /// The type byte.
        tag: u8,
        /// The bytes of it read so far.
        bytes: Bytes,
    },
    /// More of the message begun by the last [`Event::Start`].
    More(Bytes),
    /// Bytes that are not PostgreSQL v3 (and everything after them): the framing has ended.
    Garbage(Bytes),
}

/// Incremental framing of one direction.
#[derive(Debug)]
pub struct Framer {
    side: Side,
    /// Bytes of the current streamed message still to come.
    streaming: usize,
    /// Still in the startup packets (client side).
    startup: bool,
    /// Framing ended (garbage, a cancel, TLS passed through): every byte is [`Event::Garbage`].
    ended: bool,
}

/// The frontend message types of protocol 3.0.
const CLIENT_TAGS: &[u8] = b"QPBEDCSHFdcfXp";
/// The backend message types of protocol 3.0.
const SERVER_TAGS: &[u8] = b"RKSZTDCEN12345IstnsGHWdcAvV";

/// Whether the session reads the body of a message of this type from this side.
fn inspected(side: Side, tag: u8) -> bool {
    match side {
        Side::Client => b"QPBEDCSHX".contains(&tag),
        Side::Server => b"EZCIs12n3tTRKSN".contains(&tag),
    }
}

impl Framer {
    /// A framer for `side`.
    pub fn new(side: Side) -> Framer {
        Framer {
            side,
            streaming: 0,
            startup: side == Side::Client,
            ended: false,
        }
    }

    /// Everything from now on is passed through raw (after a CancelRequest, or TLS passed through).
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether framing has ended.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The next event from `buf`, taking its bytes out; `None` when more bytes are needed (or none are left).
    pub fn next(&mut self, buf: &mut BytesMut) -> Option<Event> {
        if buf.is_empty() {
            return None;
        }
        if self.ended {
            return Some(Event::Garbage(buf.split().freeze()));
        }
        if self.streaming > 0 {
            let n = self.streaming.min(buf.len());
            self.streaming -= n;
            return Some(Event::More(buf.split_to(n).freeze()));
        }
        if self.startup {
            return self.startup_packet(buf);
        }
        let tag = buf[0];
        let known = match self.side {
            Side::Client => CLIENT_TAGS,
            Side::Server => SERVER_TAGS,
        };
        if !known.contains(&tag) {
            return Some(self.garbage(buf));
        }
        if buf.len() < 5 {
            return None;
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if !(4..=MAX_MESSAGE).contains(&len) {
            return Some(self.garbage(buf));
        }
        let whole = len + 1;
        if inspected(self.side, tag) && whole <= INSPECT_LIMIT {
            if buf.len() < whole {
                buf.reserve(whole - buf.len());
                return None;
            }
            return Some(Event::Message {
                tag,
                bytes: buf.split_to(whole).freeze(),
            });
        }
        if buf.len() >= whole {
            return Some(Event::Message {
                tag,
                bytes: buf.split_to(whole).freeze(),
            });
        }
        self.streaming = whole - buf.len();
        Some(Event::Start {
            tag,
            bytes: buf.split().freeze(),
        })
    }

    fn startup_packet(&mut self, buf: &mut BytesMut) -> Option<Event> {
        if buf.len() < 8 {
            return None;
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let code = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let kind = match code {
            SSL_REQUEST if len == 8 => Startup::Ssl,
            GSSENC_REQUEST if len == 8 => Startup::Gssenc,
            CANCEL_REQUEST if len == 16 => Startup::Cancel,
            PROTOCOL_3 if (8..=MAX_STARTUP).contains(&len) => Startup::Message,
            _ => return Some(self.garbage(buf)),
        };
        if buf.len() < len {
            return None;
        }
        match kind {
            Startup::Message => self.startup = false,
            Startup::Cancel => self.ended = true,
            Startup::Ssl | Startup::Gssenc => {}
        }
        Some(Event::Startup(kind, buf.split_to(len).freeze()))
    }

    fn garbage(&mut self, buf: &mut BytesMut) -> Event {
        self.ended = true;
        Event::Garbage(buf.split().freeze())
    }
}

/// The body of a whole typed message (after its type byte and length).
pub fn body(bytes: &[u8]) -> &[u8] {
    bytes.get(5..).unwrap_or_default()
}

/// Reads a NUL-terminated string at the start of `b`: the text (lossy UTF-8) and what follows the NUL.
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((&b[..end], &b[end + 1..]))
}

/// A typed message built from its type and body.
pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(tag);
    out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: &mut Framer, bytes: &[u8], step: usize) -> Vec<Event> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step.max(1)) {
            buf.extend_from_slice(chunk);
            while let Some(e) = f.next(&mut buf) {
                out.push(e);
            }
        }
        out
    }

    fn startup() -> Vec<u8> {
        let mut body = PROTOCOL_3.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0postgres\0\0");
        let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn a_client_stream_is_cut_into_startup_then_typed_messages_whatever_the_chunking() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&8u32.to_be_bytes());
        bytes.extend_from_slice(&SSL_REQUEST.to_be_bytes());
        bytes.extend_from_slice(&startup());
        bytes.extend_from_slice(&message(b'Q', b"select 1\0"));
        bytes.extend_from_slice(&message(b'X', b""));
        for step in [1, 3, 7, 1000] {
            let events = all(&mut Framer::new(Side::Client), &bytes, step);
            let kinds: Vec<String> = events
                .iter()
                .map(|e| match e {
                    Event::Startup(k, _) => format!("{k:?}"),
                    Event::Message { tag, .. } => (*tag as char).to_string(),
                    other => format!("{other:?}"),
                })
                .collect();
            assert_eq!(kinds, ["Ssl", "Message", "Q", "X"], "chunks of {step}");
        }
    }

    #[test]
    fn a_long_uninspected_message_streams_through_in_pieces() {
        let row = message(b'D', &vec![7u8; 100_000]);
        let events = all(&mut Framer::new(Side::Server), &row, 4096);
        assert!(matches!(events[0], Event::Start { tag: b'D', .. }));
        let total: usize = events
            .iter()
            .map(|e| match e {
                Event::Start { bytes, .. } | Event::More(bytes) => bytes.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(total, row.len());
    }

    #[test]
    fn unknown_types_bad_lengths_and_bad_startups_are_garbage() {
        let g = |side, bytes: &[u8]| {
            all(&mut Framer::new(side), bytes, 64)
                .into_iter()
                .any(|e| matches!(e, Event::Garbage(_)))
        };
        assert!(g(Side::Server, b"\xff\0\0\0\x04"));
        assert!(g(Side::Server, b"Z\0\0\0\x02I"));
        assert!(g(Side::Server, b"D\x7f\xff\xff\xff"));
        assert!(g(Side::Client, b"GET / HTTP/1.1\r\n\r\n"));
        assert!(g(Side::Client, &[0, 0, 0, 8, 0, 0, 0, 1]));
        assert!(!g(Side::Server, b"Z\0\0\0\x05I"));
    }
}
