//! Fuzzes faultd's resolver on its query path: `dns::respond`, the step between the resolver's sockets and its
//! names, over UDP and TCP, for a name it knows (answered with many records, truncated, or with a fault) and for
//! names it does not (refused or forwarded). It may not panic; whatever it sends must be a DNS response carrying
//! the query's id, within the size the transport allows.

#![no_main]

use std::sync::Arc;
use std::time::Duration;

use faultd::dns::{respond, DnsAction, NameDecision, Rcode, Reply, Transport};
use libfuzzer_sys::fuzz_target;

fn decision(action: DnsAction) -> NameDecision {
    NameDecision {
        delay: Duration::ZERO,
        action,
        a: (0..40u8)
            .map(|i| std::net::Ipv4Addr::new(127, 0, 0, i))
            .collect::<Vec<_>>()
            .into(),
        aaaa: Arc::from(vec![std::net::Ipv6Addr::LOCALHOST]),
        ttl: 30,
    }
}

fuzz_target!(|data: &[u8]| {
    let actions = [
        DnsAction::Answer,
        DnsAction::Truncate,
        DnsAction::Rcode(Rcode::ServFail),
        DnsAction::Drop,
    ];
    let action = actions[data.len() % actions.len()];
    for (transport, limit) in [(Transport::Udp, 1232), (Transport::Tcp, 65_535)] {
        for forwards in [false, true] {
            let handled = respond(data, transport, forwards, &mut |name| {
                (name == "pricing.internal").then(|| decision(action))
            });
            if let Reply::Send(bytes) = &handled.reply {
                assert!(bytes.len() >= 12 && bytes.len() <= limit, "{} bytes", bytes.len());
                assert_eq!(bytes[..2], data[..2], "the answer carries the query's id");
                assert!(bytes[2] & 0x80 != 0, "the answer is a response");
            }
        }
    }
});
