//! Calls that would come back to faultd: an upstream that is one of faultd's own listeners, and the hop header that
//! ends a loop faultd cannot see in its configuration.
//!
//! For: refusing, when a configuration or a route is set, an upstream (HTTP `proxy`, TCP `upstream`) that resolves
//! to faultd's data plane, control API, Toxiproxy API or a TCP route's listener: one call would turn into
//! connections to itself until descriptors and memory ran out. A loop through something else (another proxy, a
//! second faultd) is not in the configuration, so every call faultd proxies carries this faultd's id in the
//! `faultd-hop` header, and a call that arrives already carrying it is answered 508 Loop Detected instead of being
//! forwarded again. Not for: loops of the service under test's own making (faultd forwards only what it proxies).

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// The header naming every faultd a proxied call went through, one id per hop.
pub const HOP_HEADER: HeaderName = HeaderName::from_static("faultd-hop");

/// One faultd's id in [`HOP_HEADER`]: random per started faultd (two in one process differ).
#[derive(Debug, Clone)]
pub struct HopId(HeaderValue);

impl HopId {
    /// A fresh random id.
    pub fn new() -> HopId {
        // The standard library's hasher keys are random per instance: enough to tell faultds apart, no new crate.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let id = format!("{:016x}", hasher.finish());
        HopId(HeaderValue::from_str(&id).expect("hex digits are a valid header value"))
    }

    /// Whether `headers` show that the call already went through this faultd.
    pub fn came_back(&self, headers: &HeaderMap) -> bool {
        let ours = self.0.as_bytes();
        headers.get_all(&HOP_HEADER).iter().any(|v| {
            v.as_bytes()
                .split(|b| *b == b',')
                .any(|id| id.trim_ascii() == ours)
        })
    }

    /// Marks a call this faultd forwards.
    pub fn stamp(&self, headers: &mut HeaderMap) {
        headers.append(HOP_HEADER, self.0.clone());
    }
}

impl Default for HopId {
    fn default() -> HopId {
        HopId::new()
    }
}

/// The answer to a call that came back: 508 with a JSON body saying why.
pub fn loop_detected(upstream: &str) -> Response<String> {
    let body = serde_json::json!({
        "error": format!(
            "loop detected: this call already went through this faultd (its id is in the {HOP_HEADER} header); \
             it was not forwarded to {upstream} again"
        ),
    });
    let mut response = Response::new(body.to_string());
    *response.status_mut() = StatusCode::LOOP_DETECTED;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The listener of `own` that `host:port` reaches, if any: the same address, or any local address of this
/// machine when the listener took them all (`0.0.0.0`, `[::]`). A name is resolved only when the port is one of
/// faultd's, so most upstreams cost no lookup.
pub fn own_listener(host: &str, port: u16, own: &[SocketAddr]) -> Option<SocketAddr> {
    if !own.iter().any(|l| l.port() == port) {
        return None;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let targets: Vec<IpAddr> = if host.eq_ignore_ascii_case("localhost") {
        vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ]
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        vec![ip]
    } else {
        (host, port)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect())
            .unwrap_or_default()
    };
    own.iter()
        .filter(|l| l.port() == port)
        .find(|l| targets.iter().any(|t| reaches(*t, l.ip())))
        .copied()
}

/// Whether a connect to `target` lands on a listener bound to `listener` (same port).
fn reaches(target: IpAddr, listener: IpAddr) -> bool {
    let target = target.to_canonical();
    let listener = listener.to_canonical();
    if target.is_unspecified() {
        // Connecting to 0.0.0.0 or [::] reaches this machine itself.
        return true;
    }
    if listener.is_unspecified() {
        // A [::] listener takes IPv4 too (dual stack); 0.0.0.0 only IPv4.
        let family = listener.is_ipv6() || target.is_ipv4();
        return family && is_local(target);
    }
    target == listener
}

/// Whether `ip` is one of this machine's addresses: only those can be bound.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_upstream_on_a_listener_of_faultd_is_found_by_address_name_or_wildcard() {
        let own = [
            addr("127.0.0.1:9000"),
            addr("0.0.0.0:9001"),
            addr("[::]:9002"),
        ];
        assert_eq!(own_listener("127.0.0.1", 9000, &own), Some(own[0]));
        assert_eq!(own_listener("localhost", 9000, &own), Some(own[0]));
        assert_eq!(own_listener("0.0.0.0", 9000, &own), Some(own[0]));
        assert_eq!(own_listener("127.0.0.1", 9001, &own), Some(own[1]));
        assert_eq!(own_listener("127.0.0.1", 9002, &own), Some(own[2]));
        assert_eq!(own_listener("[::1]", 9002, &own), Some(own[2]));
        assert_eq!(own_listener("127.0.0.1", 9003, &own), None);
        assert_eq!(own_listener("127.0.0.2", 9000, &own), None);
        assert_eq!(own_listener("[::1]", 9001, &own), None);
        // An address of another machine is not this one's, whatever the port.
        assert_eq!(own_listener("192.0.2.1", 9001, &own), None);
    }

    #[test]
    fn a_call_that_carries_this_faultds_id_came_back_and_anothers_did_not() {
        let (a, b) = (HopId::new(), HopId::new());
        let mut headers = HeaderMap::new();
        assert!(!a.came_back(&headers));
        b.stamp(&mut headers);
        assert!(!a.came_back(&headers));
        a.stamp(&mut headers);
        assert!(a.came_back(&headers) && b.came_back(&headers));
        let mut joined = HeaderMap::new();
        let line = format!("{}, {}", b.0.to_str().unwrap(), a.0.to_str().unwrap());
        joined.insert(HOP_HEADER, HeaderValue::from_str(&line).unwrap());
        assert!(a.came_back(&joined));
    }
}
