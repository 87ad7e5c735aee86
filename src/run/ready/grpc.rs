//! Readiness as gRPC health: `grpc.health.v1.Health/Check` answers SERVING, the standard way a gRPC server says it
//! can take calls (and the only one many offer on their port). The two messages are tiny and written by hand, so
//! no `.proto` or generated client is needed: the request carries the service name as field 1 (a string), the
//! response its status as field 1 (an enum, SERVING = 1).

use axum::http::{Request, StatusCode};
use faultline_units::GrpcCode;
use tokio::net::TcpStream;

const CHECK: &str = "/grpc.health.v1.Health/Check";

pub struct GrpcProbe {
    /// `host:port`, spoken to in cleartext HTTP/2 with prior knowledge.
    pub address: String,
    /// The service asked about; empty for the server as a whole.
    pub service: String,
}

impl GrpcProbe {
    /// What the check asks about, for messages.
    pub fn subject(&self) -> String {
        if self.service.is_empty() {
            "the server as a whole".into()
        } else {
            format!("service {:?}", self.service)
        }
    }

    pub async fn attempt(&self) -> Result<(), String> {
        let tcp = TcpStream::connect(&self.address)
            .await
            .map_err(|e| e.to_string())?;
        let (client, connection) = h2::client::handshake(tcp)
            .await
            .map_err(|e| format!("no HTTP/2 on the port: {e}"))?;
        // The connection task ends when the client is dropped at the end of this attempt.
        tokio::spawn(connection);
        let mut client = client
            .ready()
            .await
            .map_err(|e| format!("HTTP/2 connection lost: {e}"))?;
        let request = Request::post(format!("http://{}{CHECK}", self.address))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let (response, mut body) = client
            .send_request(request, false)
            .map_err(|e| format!("the call could not be sent: {e}"))?;
        body.send_data(faultd::grpc::frame(&check_request(&self.service)), true)
            .map_err(|e| format!("the call could not be sent: {e}"))?;
        let response = response.await.map_err(|e| format!("no answer: {e}"))?;
        let (head, mut recv) = response.into_parts();
        let mut answer = Vec::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk.map_err(|e| format!("the answer broke off: {e}"))?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            answer.extend_from_slice(&chunk);
        }
        let trailers = recv
            .trailers()
            .await
            .map_err(|e| format!("the answer broke off: {e}"))?
            .unwrap_or_default();
        let code = if head.status != StatusCode::OK {
            GrpcCode::from_http_status(head.status.as_u16())
        } else {
            trailers
                .get("grpc-status")
                .or_else(|| head.headers.get("grpc-status"))
                .map_or(GrpcCode::INTERNAL, |v| GrpcCode::from_wire(v.as_bytes()))
        };
        if code != GrpcCode::OK {
            return Err(format!("{} answered {}", CHECK, code.name()));
        }
        // The message after gRPC's 5-byte prefix; an empty one holds the default status, UNKNOWN.
        let status = answer.get(5..).map_or(0, serving_status);
        match status {
            1 => Ok(()),
            0 => Err("UNKNOWN".into()),
            2 => Err("NOT_SERVING".into()),
            3 => Err("SERVICE_UNKNOWN".into()),
            n => Err(format!("status {n}")),
        }
    }
}

/// `HealthCheckRequest { string service = 1; }`; proto3 leaves an empty string out.
fn check_request(service: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(service.len() + 6);
    if !service.is_empty() {
        out.push(0x0a);
        put_varint(&mut out, service.len() as u64);
        out.extend_from_slice(service.as_bytes());
    }
    out
}

/// Field 1 (a varint) of `HealthCheckResponse`, skipping any other field; 0 when absent or unreadable.
fn serving_status(mut message: &[u8]) -> u64 {
    let mut status = 0;
    while let Some(key) = take_varint(&mut message) {
        let skip = match key & 7 {
            0 => {
                let Some(v) = take_varint(&mut message) else {
                    break;
                };
                if key >> 3 == 1 {
                    status = v;
                }
                0
            }
            1 => 8,
            2 => match take_varint(&mut message) {
                Some(n) => n as usize,
                None => break,
            },
            5 => 4,
            _ => break,
        };
        let Some(rest) = message.get(skip..) else {
            break;
        };
        message = rest;
    }
    status
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(message: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in message.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *message = &message[i + 1..];
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_request_carries_the_service_as_field_one() {
        assert_eq!(check_request(""), Vec::<u8>::new());
        assert_eq!(
            check_request("shop.Prices"),
            b"\x0a\x0bshop.Prices".to_vec()
        );
        let long = "s".repeat(200);
        assert_eq!(&check_request(&long)[..3], &[0x0a, 0xc8, 0x01]);
    }

    #[test]
    fn the_status_is_read_from_field_one_whatever_else_the_answer_holds() {
        assert_eq!(serving_status(&[0x08, 0x01]), 1);
        assert_eq!(serving_status(&[0x08, 0x02]), 2);
        assert_eq!(serving_status(&[]), 0);
        // An unknown length-delimited field 2 before the status is skipped.
        assert_eq!(serving_status(&[0x12, 0x02, 0x61, 0x62, 0x08, 0x01]), 1);
        // A truncated message reads as no status rather than a panic.
        assert_eq!(serving_status(&[0x12, 0x09, 0x61]), 0);
    }
}
