//! Reading an HTTP/1.1 response on a lane's connection: the head parsed in place with `httparse`, looking only at
//! what the outcome needs (the status, the fallback header, how the body is delimited: content-length, chunked,
//! or until close), and the body read to its end and discarded.
//!
//! Not for sending the request (`client`) nor for classifying the answer (`outcome`).

use std::io;

use bytes::{Buf, BytesMut};
use hyper::header::HeaderName;

use super::conn::HttpConn;
use super::transport::{TransportError, STALE};
use crate::outcome::Answer;

/// The longest response head accepted; longer ones are a broken exchange.
const MAX_HEAD: usize = 64 * 1024;
/// Headers parsed per response; more is a broken exchange.
const MAX_HEADERS: usize = 96;

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The parsed head: the answer, the framing, whether the connection stays open, and the head's length.
struct Head {
    answer: Answer,
    framing: Framing,
    keep_alive: bool,
    len: usize,
}

fn parse_head(
    buf: &[u8],
    head_request: bool,
    fallback: Option<&HeaderName>,
) -> Result<Option<Head>, TransportError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(TransportError(format!("malformed response: {e}"))),
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    let mut marked = false;
    for h in response.headers.iter() {
        if fallback.is_some_and(|f| h.name.eq_ignore_ascii_case(f.as_str())) {
            marked = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| TransportError("bad content-length".into()))?;
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if head_request || (100..200).contains(&status) || status == 204 || status == 304
    {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok(Some(Head {
        answer: Answer { status, marked },
        framing,
        keep_alive,
        len,
    }))
}

/// Reads more bytes into the buffer; a clean end of stream is an error here (the response is incomplete).
async fn fill(conn: &mut HttpConn) -> Result<(), TransportError> {
    if conn.buffer.capacity() - conn.buffer.len() < 1024 {
        conn.buffer.reserve(8 * 1024);
    }
    let n = conn.read_more().await?;
    if n == 0 {
        return Err(TransportError(
            "the connection closed before the response was complete".into(),
        ));
    }
    Ok(())
}

/// Reads the response to a request (`head_request`: a HEAD) to its end: its answer, and whether the connection
/// can carry another exchange.
pub(super) async fn read_response(
    conn: &mut HttpConn,
    head_request: bool,
    fallback: Option<&HeaderName>,
) -> Result<(Answer, bool), TransportError> {
    let head = loop {
        if !conn.buffer.is_empty() {
            if let Some(head) = parse_head(&conn.buffer, head_request, fallback)? {
                // Interim responses (100 Continue, 103 Early Hints) precede the real one.
                if (100..200).contains(&head.answer.status) && head.answer.status != 101 {
                    conn.buffer.advance(head.len);
                    continue;
                }
                break head;
            }
            if conn.buffer.len() > MAX_HEAD {
                return Err(TransportError("response head too large".into()));
            }
        }
        if conn.buffer.is_empty() {
            // Nothing of the response yet: a reset or end of stream here is a stale keep-alive connection.
            match conn.read_more().await {
                Ok(0) => return Err(TransportError(STALE.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(TransportError(STALE.into()))
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            fill(conn).await?;
        }
    };
    conn.buffer.advance(head.len);
    match head.framing {
        Framing::None => {}
        Framing::Length(length) => discard(conn, length).await?,
        Framing::Chunked => read_chunked(conn).await?,
        Framing::UntilClose => loop {
            conn.buffer.clear();
            if conn.read_more().await? == 0 {
                break;
            }
        },
    }
    let reusable = head.keep_alive && conn.buffer.is_empty();
    if conn.buffer.capacity() > 64 * 1024 {
        // One huge response must not pin its buffer for the life of the connection.
        conn.buffer = BytesMut::with_capacity(8 * 1024);
    }
    Ok((head.answer, reusable))
}

/// Reads the next `left` bytes of the body, discarding them.
async fn discard(conn: &mut HttpConn, mut left: u64) -> Result<(), TransportError> {
    loop {
        let have = (conn.buffer.len() as u64).min(left);
        conn.buffer.advance(have as usize);
        left -= have;
        if left == 0 {
            return Ok(());
        }
        fill(conn).await?;
    }
}

/// The length of the line at the start of the buffer, without its CRLF, reading until the CRLF is in.
async fn line_length(conn: &mut HttpConn, what: &str) -> Result<usize, TransportError> {
    loop {
        if let Some(i) = conn.buffer.windows(2).position(|w| w == b"\r\n") {
            return Ok(i);
        }
        if conn.buffer.len() > MAX_HEAD {
            return Err(TransportError(format!("{what} too long")));
        }
        fill(conn).await?;
    }
}

/// Reads a chunked body to its end, trailers included, discarding the data.
async fn read_chunked(conn: &mut HttpConn) -> Result<(), TransportError> {
    loop {
        // The chunk-size line: hex digits, optional extensions, CRLF.
        let line_end = line_length(conn, "chunk size line").await?;
        let line = &conn.buffer[..line_end];
        let digits = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| TransportError("bad chunk size".into()))?;
        conn.buffer.advance(line_end + 2);
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let end = line_length(conn, "trailers").await?;
                conn.buffer.advance(end + 2);
                if end == 0 {
                    return Ok(());
                }
            }
        }
        // The data and its CRLF.
        discard(conn, size + 2).await?;
    }
}
