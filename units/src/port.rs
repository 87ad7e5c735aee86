//! Loopback ports handed to another process to bind later: a SUT's `{sut.port}`, a faultd whose address a service
//! was started with. Not for a listener this process binds itself (bind port 0 and read it back).
//!
//! A port that `bind(0)` returns is free when asked, but it comes from the kernel's ephemeral range, which every
//! other `bind(0)` and every outgoing connection's source port draw from too: on a busy machine one of them can take
//! it before the other process binds it. A port from below that range is only ever taken by someone who names it.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the registered ports most services are configured with.
const LOWEST: u32 = 10_000;
/// Where the kernel's ephemeral range starts when /proc does not say (Linux's default).
const EPHEMERAL_DEFAULT: u32 = 32_768;
/// How many ports to try before giving up.
const TRIES: u32 = 2_000;

/// The first port of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_DEFAULT)
}

/// A loopback port that nothing listens on now, from below the ephemeral range, for another process to bind. Two
/// processes asking at once start from different places (their ids), and one process never hands out the same
/// port twice in a row. Falls back to an ephemeral port when the range below is too small or all taken.
pub fn handed_out() -> io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let top = ephemeral_start().min(u32::from(u16::MAX) + 1);
    if top > LOWEST + TRIES {
        let span = top - LOWEST;
        let offset = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..TRIES {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (LOWEST + (offset + n.wrapping_mul(101)) % span) as u16;
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_are_free_and_distinct() {
        let top = ephemeral_start();
        let ports: Vec<u16> = (0..50).map(|_| handed_out().unwrap()).collect();
        for p in &ports {
            assert!(u32::from(*p) >= LOWEST && u32::from(*p) < top, "{p}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, *p)).unwrap();
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}
