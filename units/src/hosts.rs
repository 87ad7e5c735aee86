//! The one rule for where faultline's traffic may go: to loopback (127.0.0.0/8, ::1, `localhost`), or to a host
//! a configuration lists by name (`allow_hosts`). loadgen checks its targets, faultd its upstreams, the runner the
//! URLs of a scenario, each with this same rule.
//!
//! Not for parsing URLs or `host:port` (each caller has its own form) nor for addresses a process binds.

use std::net::IpAddr;

/// True for 127.0.0.0/8, ::1 and `localhost` (which resolves to loopback by convention and in /etc/hosts). `host`
/// is a bare host: no port, no brackets.
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether traffic may go to `host`: loopback, or named in `allow` (compared without case).
pub fn host_allowed(host: &str, allow: &[String]) -> bool {
    is_loopback(host) || allow.iter().any(|a| a.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_listed_hosts_are_allowed_and_nothing_else() {
        for host in ["127.0.0.1", "127.3.2.1", "::1", "localhost", "LocalHost"] {
            assert!(is_loopback(host), "{host}");
            assert!(host_allowed(host, &[]), "{host}");
        }
        for host in ["10.0.0.5", "::2", "localhost.example", "", "[::1]"] {
            assert!(!is_loopback(host), "{host}");
        }
        assert!(!host_allowed("staging.internal", &[]));
        assert!(host_allowed(
            "Staging.Internal",
            &["staging.internal".into()]
        ));
    }
}
