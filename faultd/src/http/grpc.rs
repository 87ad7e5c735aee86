//! gRPC on faultd's HTTP/2 streams, without a `.proto`: a call is recognised by its content type, its deadline
//! read from `grpc-timeout`, and its answer framed as gRPC (a 5-byte prefix before each message) with the status
//! in the trailers.
//!
//! For: the wire format faultd needs to answer any gRPC method with configured bytes, an echo, or a status with
//! its message and trailing metadata. Not for: deciding which answer a call gets (`behaviours`), nor protobuf:
//! messages are opaque bytes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use bytes::{BufMut, Bytes, BytesMut};
use faultline_units::GrpcCode;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use crate::behaviours::BodyError;
pub use crate::behaviours::MAX_MESSAGE;

/// What faultd needs to know of a gRPC call before answering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcCall {
    /// The caller's deadline from `grpc-timeout`, if it sent one.
    pub timeout: Option<Duration>,
}

impl GrpcCall {
    /// The gRPC side of a request: `Some` when its content type is `application/grpc` (with or without a
    /// `+proto` or `+json` suffix).
    pub fn of<B>(request: &Request<B>) -> Option<GrpcCall> {
        let content_type = request.headers().get(axum::http::header::CONTENT_TYPE)?;
        let ct = content_type.as_bytes();
        let grpc = ct.len() >= 16
            && ct[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(ct.get(16), None | Some(b'+') | Some(b';'));
        grpc.then(|| GrpcCall {
            timeout: request
                .headers()
                .get("grpc-timeout")
                .and_then(|v| parse_timeout(v.as_bytes())),
        })
    }
}

/// Parses a `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// One message with gRPC's prefix: a byte saying "not compressed" and the length as 4 bytes, big-endian.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// Why a request's message could not be read, as the status a gRPC server answers it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMessage {
    pub code: GrpcCode,
    pub message: String,
}

impl BadMessage {
    fn new(code: GrpcCode, message: impl Into<String>) -> BadMessage {
        BadMessage {
            code,
            message: message.into(),
        }
    }
}

/// The first message of a request body, without its prefix (empty if the body holds none), read as a gRPC
/// server reads it: a body that is not length-prefixed, or ends inside its message, is INTERNAL; a compressed
/// message is UNIMPLEMENTED (faultd reads no compression); a message declared longer than [`MAX_MESSAGE`] is
/// RESOURCE_EXHAUSTED before its bytes are read; a body the caller abandons is CANCELLED.
pub async fn first_message<B>(mut body: B) -> Result<Bytes, BadMessage>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut read = BytesMut::new();
    let mut declared: Option<usize> = None;
    loop {
        if declared.is_none() && read.len() >= 5 {
            if read[0] > 1 {
                return Err(BadMessage::new(
                    GrpcCode::INTERNAL,
                    format!(
                        "the body is not length-prefixed: the first byte is {:#04x}, not a compression flag",
                        read[0]
                    ),
                ));
            }
            if read[0] == 1 {
                return Err(BadMessage::new(
                    GrpcCode::UNIMPLEMENTED,
                    "a compressed message: faultd reads no grpc-encoding",
                ));
            }
            let length = u32::from_be_bytes([read[1], read[2], read[3], read[4]]) as usize;
            if length > MAX_MESSAGE {
                return Err(BadMessage::new(
                    GrpcCode::RESOURCE_EXHAUSTED,
                    format!("received message larger than max ({length} vs. {MAX_MESSAGE})"),
                ));
            }
            declared = Some(length);
        }
        if let Some(length) = declared {
            if read.len() >= 5 + length {
                return Ok(read.freeze().slice(5..5 + length));
            }
        }
        match body.frame().await {
            None => break,
            Some(Err(_)) => {
                return Err(BadMessage::new(
                    GrpcCode::CANCELLED,
                    "the caller abandoned its message",
                ))
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                }
            }
        }
    }
    match (read.len(), declared) {
        (0, _) => Ok(Bytes::new()),
        (n, None) => Err(BadMessage::new(
            GrpcCode::INTERNAL,
            format!("the body is not length-prefixed: it ended after {n} of the prefix's 5 bytes"),
        )),
        (n, Some(length)) => Err(BadMessage::new(
            GrpcCode::INTERNAL,
            format!(
                "the message was cut short: {} of the {length} bytes its prefix declares",
                n - 5
            ),
        )),
    }
}

/// `grpc-message` is percent-encoded: every byte outside printable ASCII, and `%` itself.
pub fn encode_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The HTTP status a plain (non-gRPC) call gets when a gRPC status fault takes it: the usual mapping of gRPC
/// gateways, so a REST caller of the same route sees the same failure in its own terms.
pub fn http_status_of(code: GrpcCode) -> StatusCode {
    match code {
        GrpcCode::OK => StatusCode::OK,
        GrpcCode::INVALID_ARGUMENT | GrpcCode::FAILED_PRECONDITION | GrpcCode::OUT_OF_RANGE => {
            StatusCode::BAD_REQUEST
        }
        GrpcCode::UNAUTHENTICATED => StatusCode::UNAUTHORIZED,
        GrpcCode::PERMISSION_DENIED => StatusCode::FORBIDDEN,
        GrpcCode::NOT_FOUND => StatusCode::NOT_FOUND,
        GrpcCode::ALREADY_EXISTS | GrpcCode::ABORTED => StatusCode::CONFLICT,
        GrpcCode::RESOURCE_EXHAUSTED => StatusCode::TOO_MANY_REQUESTS,
        GrpcCode::CANCELLED => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        GrpcCode::UNIMPLEMENTED => StatusCode::NOT_IMPLEMENTED,
        GrpcCode::UNAVAILABLE => StatusCode::SERVICE_UNAVAILABLE,
        GrpcCode::DEADLINE_EXCEEDED => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The trailers of a gRPC answer: the status, its message if any, then the trailing metadata.
pub fn trailers(code: GrpcCode, message: Option<&str>, metadata: &HeaderMap) -> HeaderMap {
    let mut t = HeaderMap::with_capacity(2 + metadata.len());
    t.insert(
        HeaderName::from_static("grpc-status"),
        HeaderValue::from(u16::from(code.number())),
    );
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        if let Ok(v) = HeaderValue::from_str(&encode_message(m)) {
            t.insert(HeaderName::from_static("grpc-message"), v);
        }
    }
    for (name, value) in metadata {
        t.append(name.clone(), value.clone());
    }
    t
}

/// A gRPC answer: status 200, `content-type: application/grpc` and the initial metadata, then at most one
/// message, then the trailers. An answer with no message is the headers and the trailers, which every gRPC client
/// reads as a status-only answer.
pub fn answer(
    initial_metadata: &HeaderMap,
    message: Option<Bytes>,
    trailers: HeaderMap,
) -> Response<GrpcBody> {
    match message {
        Some(m) => answer_stream(initial_metadata, m, 1, Duration::ZERO, trailers),
        None => answer_stream(initial_metadata, Bytes::new(), 0, Duration::ZERO, trailers),
    }
}

/// A streaming gRPC answer: the headers at once, then `message` (framed) `count` times with `interval` between
/// two of them (a server-streaming method's replies), then the trailers.
pub fn answer_stream(
    initial_metadata: &HeaderMap,
    message: Bytes,
    count: u32,
    interval: Duration,
    trailers: HeaderMap,
) -> Response<GrpcBody> {
    let mut response = Response::new(GrpcBody {
        message,
        left: count,
        interval,
        pause: None,
        trailers: Some(trailers),
    });
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    for (name, value) in initial_metadata {
        headers.append(name.clone(), value.clone());
    }
    response
}

/// The body of a gRPC answer: its messages (each framed, a pause between two of them), then the trailers.
pub struct GrpcBody {
    /// One message, framed.
    message: Bytes,
    /// Messages still to send.
    left: u32,
    interval: Duration,
    /// The pause before the next message, once one has been sent.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    trailers: Option<HeaderMap>,
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.left > 0 {
            if let Some(pause) = self.pause.as_mut() {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.pause = None;
            }
            self.left -= 1;
            if self.left > 0 && !self.interval.is_zero() {
                self.pause = Some(Box::pin(tokio::time::sleep(self.interval)));
            }
            return Poll::Ready(Some(Ok(Frame::data(self.message.clone()))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0 && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.message.len() as u64 * u64::from(self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_bad_ones_are_ignored() {
        assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout(b"99999u"), Some(Duration::from_micros(99999)));
        assert_eq!(parse_timeout(b"123456789m"), None);
        assert_eq!(parse_timeout(b"5x"), None);
        assert_eq!(parse_timeout(b"m"), None);
    }

    /// A request body arriving in the given chunks.
    fn chunked(
        chunks: &[&[u8]],
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        http_body_util::StreamBody::new(futures_util::stream::iter(frames))
    }

    fn read(chunks: &[&[u8]]) -> Result<Bytes, BadMessage> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(first_message(chunked(chunks)))
    }

    #[test]
    fn the_first_message_is_read_across_chunks_and_the_rest_is_left() {
        assert_eq!(read(&[b"\0\0\0", b"\0\x03a", b"bcEXTRA"]).unwrap(), "abc");
        assert_eq!(read(&[b"\0\0\0\0\0"]).unwrap(), "");
        assert_eq!(read(&[]).unwrap(), "");
    }

    #[test]
    fn a_body_a_grpc_server_cannot_read_gets_that_servers_status() {
        let code = |chunks: &[&[u8]]| read(chunks).unwrap_err().code;
        assert_eq!(code(&[b"hello world"]), GrpcCode::INTERNAL);
        assert_eq!(code(&[b"\0\0"]), GrpcCode::INTERNAL);
        assert_eq!(code(&[b"\0\0\0\0\x09abc"]), GrpcCode::INTERNAL);
        assert_eq!(code(&[b"\x01\0\0\0\x01a"]), GrpcCode::UNIMPLEMENTED);
        let huge = read(&[b"\0\x00\x50\x00\x00"]).unwrap_err();
        assert_eq!(huge.code, GrpcCode::RESOURCE_EXHAUSTED);
        assert_eq!(
            huge.message,
            "received message larger than max (5242880 vs. 4194304)"
        );
        let short = read(&[b"\0\0\0\0\x09abc"]).unwrap_err();
        assert_eq!(
            short.message,
            "the message was cut short: 3 of the 9 bytes its prefix declares"
        );
    }

    #[test]
    fn a_message_is_framed_with_a_zero_flag_and_its_length() {
        assert_eq!(&frame(b"abc")[..], b"\0\0\0\0\x03abc");
        assert_eq!(&frame(b"")[..], b"\0\0\0\0\0");
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(encode_message("busy: 50% load"), "busy: 50%25 load");
        assert_eq!(encode_message("é\n"), "%C3%A9%0A");
    }

    #[test]
    fn the_content_type_says_whether_a_call_is_grpc() {
        let req = |ct: &str| {
            Request::builder()
                .header("content-type", ct)
                .header("grpc-timeout", "100m")
                .body(())
                .unwrap()
        };
        assert_eq!(
            GrpcCall::of(&req("application/grpc+proto"))
                .unwrap()
                .timeout,
            Some(Duration::from_millis(100))
        );
        assert!(GrpcCall::of(&req("application/grpc")).is_some());
        assert!(GrpcCall::of(&req("application/grpcx")).is_none());
        assert!(GrpcCall::of(&req("application/json")).is_none());
    }
}
