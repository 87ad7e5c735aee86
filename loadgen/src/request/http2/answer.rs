//! Reading an HTTP/2 stream's answer and classifying it: a gRPC answer by its `grpc-status` (trailers, or headers
//! for a status-only answer; see `Classifier::classify_grpc`), a plain HTTP/2 answer by its status, as
//! HTTP/1.1's. The first answer of each class per template is offered to the report's samples.
//!
//! Not for opening connections or streams (`streams`).

use bytes::Bytes;
use faultline_units::GrpcCode;
use hyper::header::{HeaderMap, HeaderName};

use super::compile::{Call, Mix};
use crate::outcome::{Answer, Outcome};
use crate::request::Run;
use crate::samples::{Seen, MAX_BODY};

/// Sends `call` on a stream of `send` and reads its answer to the end: its outcome (`Err` is `connect_error`: the
/// stream was reset or the connection failed under it). `fallback_header` in the headers or trailers marks it a
/// fallback.
pub(super) async fn stream(
    send: &mut h2::client::SendRequest<Bytes>,
    call: &Call,
    run: &Run,
    fallback_header: Option<&HeaderName>,
    mix: &Mix,
) -> Result<Outcome, ()> {
    let (response, mut body_tx) = send
        .send_request(call.request.clone(), call.body.is_empty())
        .map_err(|_| ())?;
    if !call.body.is_empty() {
        // The server may answer (or reset) before it reads the request; its answer is what counts.
        let _ = body_tx.send_data(call.body.clone(), true);
    }
    let response = response.await.map_err(|_| ())?;
    let (parts, mut body) = response.into_parts();
    let marked = |h: &HeaderMap| fallback_header.is_some_and(|f| h.contains_key(f));
    let mut was_marked = marked(&parts.headers);
    let keep = run.recorder.samples.open_for(call.template);
    let mut kept: Vec<Bytes> = Vec::new();
    let mut kept_len = 0;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|_| ())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if keep && kept_len < MAX_BODY {
            kept_len += chunk.len();
            kept.push(chunk);
        }
    }
    let trailers = body.trailers().await.map_err(|_| ())?.unwrap_or_default();
    was_marked |= marked(&trailers);
    let status = parts.status.as_u16();
    let (outcome, grpc) = if !call.grpc {
        let outcome = run.classifier.classify(Answer {
            status,
            marked: was_marked,
        });
        (outcome, None)
    } else {
        let status_header = trailers
            .get("grpc-status")
            .or_else(|| parts.headers.get("grpc-status"));
        let code = if status != 200 {
            GrpcCode::from_http_status(status)
        } else {
            match status_header {
                Some(v) => GrpcCode::from_wire(v.as_bytes()),
                // An answer with no status is an error of the server's (gRPC clients say INTERNAL).
                None => GrpcCode::INTERNAL,
            }
        };
        let message = trailers
            .get("grpc-message")
            .or_else(|| parts.headers.get("grpc-message"))
            .map(|m| percent_decoded(m.as_bytes()))
            .filter(|m| !m.is_empty());
        (
            run.classifier.classify_grpc(code, was_marked),
            Some((code.name().to_string(), message)),
        )
    };
    if keep {
        let t = mix.template(call.template);
        run.recorder.samples.offer(Seen {
            template: call.template,
            request: &t.name,
            answer_type: t.answer.as_ref(),
            class: outcome,
            status,
            grpc,
            body: &kept,
            at_s: run.origin.elapsed().as_secs_f64(),
        });
    }
    Ok(outcome)
}

/// A `grpc-message` as written: gRPC percent-encodes it (every byte outside printable ASCII, and `%`).
fn percent_decoded(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).and_then(|&b| hex(b)),
            raw.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_message_is_read_back_from_its_percent_encoding() {
        assert_eq!(
            percent_decoded(b"inventory: 50%25 down %E2%9C%97"),
            "inventory: 50% down \u{2717}"
        );
        assert_eq!(percent_decoded(b"bad %zz and %4"), "bad %zz and %4");
    }
}
