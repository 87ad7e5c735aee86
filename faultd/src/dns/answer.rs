//! One query in, one answer (or none) out: the pure step between the resolver's sockets and its names.
//!
//! For: parsing a query with hickory-proto, refusing what a DNS server refuses (FORMERR for a query it cannot
//! read, NOTIMP for another opcode, REFUSED for another class or an unknown name), building the answer a name's
//! decision asks for, and truncating an answer too large for the caller's UDP size, as any server does. Not for:
//! the decision itself (`super::faults`), waiting (`super::serve` holds the delay) or counting. Nothing here
//! panics or allocates without bound on any input: it is what the fuzz target drives.

use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};

use super::faults::{DnsAction, NameDecision, Rcode};
use super::name_key;

/// How the query arrived: it decides the size an answer may have and what `truncate` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A datagram: 512 bytes, or the caller's EDNS size (up to [`MAX_UDP_ANSWER`]).
    Udp,
    /// A TCP stream: up to 65,535 bytes, and never truncated.
    Tcp,
}

/// The largest UDP answer faultd sends, whatever the caller offers: the size the DNS flag day of 2020 settled on
/// to stay under common path MTUs.
pub const MAX_UDP_ANSWER: u16 = 1232;

/// What the query path decides for a name: the decision of a known name, or `None` for a name it does not know.
pub type Lookup<'a> = dyn FnMut(&str) -> Option<NameDecision> + 'a;

/// What the sockets do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Send these bytes (after the delay).
    Send(Vec<u8>),
    /// Send nothing: the caller times out.
    Drop,
    /// Relay the query to the upstream of unknown names.
    Forward,
}

/// One query handled: the reply and what the recorder counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// The known name the query was for (its key); `None` for an unknown name or a query that could not be read.
    pub name: Option<String>,
    /// The query's type (`A`, `AAAA`, `MX`, ...), when it could be read.
    pub qtype: Option<String>,
    /// How it was answered: a response code (`NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`, `FORMERR`, `NOTIMP`),
    /// `truncated`, `no_answer`, `forwarded` or `dropped` (not a query: answered with nothing).
    pub outcome: &'static str,
    /// How long the answer waits.
    pub delay: Duration,
    /// What to send.
    pub reply: Reply,
}

impl Handled {
    fn unread(outcome: &'static str, reply: Reply) -> Handled {
        Handled {
            name: None,
            qtype: None,
            outcome,
            delay: Duration::ZERO,
            reply,
        }
    }
}

/// Handles the query in `bytes`, arrived over `transport`; `lookup` decides for a name it knows (and is asked
/// only for a well-formed query of class IN). A query for another name is forwarded when `forwards`, else
/// refused.
pub fn respond(
    bytes: &[u8],
    transport: Transport,
    forwards: bool,
    lookup: &mut Lookup<'_>,
) -> Handled {
    // Fewer bytes than a header, or a response: nothing a server answers (answering responses invites loops).
    if bytes.len() < 12 || bytes[2] & 0x80 != 0 {
        return Handled::unread("dropped", Reply::Drop);
    }
    let id = u16::from_be_bytes([bytes[0], bytes[1]]);
    let opcode = (bytes[2] >> 3) & 0x0f;
    let rd = bytes[2] & 0x01 != 0;
    let query = match Message::from_vec(bytes) {
        Ok(q) => q,
        Err(_) => return Handled::unread("FORMERR", Reply::Send(bare(id, opcode, rd, 1))),
    };
    if query.metadata.op_code != OpCode::Query {
        return Handled::unread("NOTIMP", Reply::Send(bare(id, opcode, rd, 4)));
    }
    let [question] = query.queries.as_slice() else {
        return Handled::unread("FORMERR", Reply::Send(bare(id, opcode, rd, 1)));
    };
    let qtype: &'static str = question.query_type.into();
    let key = name_key(&question.name.to_ascii());
    let decision = if question.query_class == DNSClass::IN {
        lookup(&key)
    } else {
        None
    };
    let mut handled = Handled {
        name: decision.as_ref().map(|_| key),
        qtype: Some(qtype.to_string()),
        outcome: "REFUSED",
        delay: Duration::ZERO,
        reply: Reply::Forward,
    };
    let Some(decision) = decision else {
        if forwards && question.query_class == DNSClass::IN {
            handled.outcome = "forwarded";
            return handled;
        }
        handled.reply = encode(&answer(&query, ResponseCode::Refused), transport, &query);
        return handled;
    };
    handled.delay = decision.delay;
    let mut message = answer(&query, ResponseCode::NoError);
    match (decision.action, transport) {
        (DnsAction::Drop, _) => {
            handled.outcome = "no_answer";
            handled.reply = Reply::Drop;
            return handled;
        }
        (DnsAction::Rcode(rcode), _) => {
            message.metadata.response_code = match rcode {
                Rcode::NxDomain => ResponseCode::NXDomain,
                Rcode::ServFail => ResponseCode::ServFail,
                Rcode::Refused => ResponseCode::Refused,
            };
        }
        (DnsAction::Truncate, Transport::Udp) => message.metadata.truncation = true,
        (DnsAction::Answer | DnsAction::Truncate, _) => {
            add_records(&mut message, question.query_type, &decision)
        }
    }
    handled.reply = encode(&message, transport, &query);
    handled.outcome = if message.metadata.truncation || truncated(&handled.reply) {
        "truncated"
    } else {
        rcode_name(message.metadata.response_code)
    };
    handled
}

/// A response code's name as DNS tools print it (`dig`'s `status:`).
fn rcode_name(rcode: ResponseCode) -> &'static str {
    match rcode {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::Refused => "REFUSED",
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::NotImp => "NOTIMP",
        _ => "other",
    }
}

/// The answer to `query` with `rcode` and no records yet: its id, question and flags echoed, authoritative,
/// and EDNS when the query had it.
fn answer(query: &Message, rcode: ResponseCode) -> Message {
    let mut message = Message::response(query.metadata.id, query.metadata.op_code);
    message.metadata.recursion_desired = query.metadata.recursion_desired;
    // faultd is the caller's resolver: it says it recurses, so stub resolvers and `dig` take its answers as
    // final rather than as a referral.
    message.metadata.recursion_available = true;
    message.metadata.authoritative = true;
    message.metadata.response_code = rcode;
    message.queries = query.queries.clone();
    if query.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_ANSWER);
        message.edns = Some(edns);
    }
    message
}

fn add_records(message: &mut Message, qtype: RecordType, decision: &NameDecision) {
    let Some(question) = message.queries.first() else {
        return;
    };
    let name = question.name.clone();
    let mut records = Vec::new();
    if matches!(qtype, RecordType::A | RecordType::ANY) {
        records.extend(
            decision
                .a
                .iter()
                .map(|ip| Record::from_rdata(name.clone(), decision.ttl, RData::A(A(*ip)))),
        );
    }
    if matches!(qtype, RecordType::AAAA | RecordType::ANY) {
        records.extend(
            decision
                .aaaa
                .iter()
                .map(|ip| Record::from_rdata(name.clone(), decision.ttl, RData::AAAA(AAAA(*ip)))),
        );
    }
    message.answers = records;
}

/// Encodes `message` for `transport`: over UDP an answer larger than the caller may take is sent truncated
/// (question only, TC set); one that cannot be encoded at all becomes SERVFAIL.
fn encode(message: &Message, transport: Transport, query: &Message) -> Reply {
    let limit = match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => {
            let offered = query.edns.as_ref().map_or(512, Edns::max_payload);
            usize::from(offered.clamp(512, MAX_UDP_ANSWER))
        }
    };
    let bytes = match message.to_vec() {
        Ok(b) => b,
        Err(_) => return Reply::Send(bare(message.metadata.id, 0, true, 2)),
    };
    if bytes.len() <= limit {
        return Reply::Send(bytes);
    }
    let mut cut = message.clone();
    cut.answers.clear();
    cut.metadata.truncation = true;
    match cut.to_vec() {
        Ok(b) if b.len() <= limit => Reply::Send(b),
        _ => Reply::Send(bare(message.metadata.id, 0, true, 2)),
    }
}

fn truncated(reply: &Reply) -> bool {
    matches!(reply, Reply::Send(b) if b.len() > 2 && b[2] & 0x02 != 0)
}

/// A header with no sections: the answer to a query that cannot be read, built by hand so that it never fails.
fn bare(id: u16, opcode: u8, rd: bool, rcode: u8) -> Vec<u8> {
    let [hi, lo] = id.to_be_bytes();
    let flags = 0x80 | ((opcode & 0x0f) << 3) | u8::from(rd);
    vec![hi, lo, flags, 0x80 | (rcode & 0x0f), 0, 0, 0, 0, 0, 0, 0, 0]
}

/// Whether `bytes` is a response (the QR bit), for the upstream's replies.
pub fn is_response(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && bytes[2] & 0x80 != 0
}

/// A message's type, for tests and tools: `None` when it cannot be read.
pub fn message_type(bytes: &[u8]) -> Option<MessageType> {
    Message::from_vec(bytes)
        .ok()
        .map(|m| m.metadata.message_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    fn query(name: &str, qtype: RecordType, edns: bool) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        if edns {
            let mut e = Edns::new();
            e.set_max_payload(4096);
            m.edns = Some(e);
        }
        m.to_vec().unwrap()
    }

    fn decision(action: DnsAction, n: usize) -> NameDecision {
        NameDecision {
            delay: Duration::from_millis(5),
            action,
            a: (0..n)
                .map(|i| Ipv4Addr::new(127, 0, (i / 256) as u8, (i % 256) as u8))
                .collect::<Vec<_>>()
                .into(),
            aaaa: Arc::from(vec![]),
            ttl: 30,
        }
    }

    fn run(bytes: &[u8], t: Transport, action: DnsAction, n: usize) -> (Handled, Option<Message>) {
        let mut lookup = |name: &str| (name == "pricing.internal").then(|| decision(action, n));
        let h = respond(bytes, t, true, &mut lookup);
        let m = match &h.reply {
            Reply::Send(b) => Some(Message::from_vec(b).unwrap()),
            _ => None,
        };
        (h, m)
    }

    #[test]
    fn a_known_name_gets_its_addresses_with_its_ttl_and_the_query_echoed() {
        let q = query("Pricing.Internal.", RecordType::A, false);
        let (h, m) = run(&q, Transport::Udp, DnsAction::Answer, 2);
        let m = m.unwrap();
        assert_eq!(
            (h.outcome, h.name.as_deref(), h.qtype.as_deref()),
            ("NOERROR", Some("pricing.internal"), Some("A"))
        );
        assert_eq!(
            (m.metadata.id, m.answers.len(), m.answers[0].ttl),
            (4242, 2, 30)
        );
        assert_eq!(m.queries[0].name.to_ascii(), "Pricing.Internal.");
        assert_eq!(h.delay, Duration::from_millis(5));
    }

    #[test]
    fn faults_answer_with_their_code_or_not_at_all() {
        let q = query("pricing.internal.", RecordType::A, false);
        let (h, m) = run(&q, Transport::Udp, DnsAction::Rcode(Rcode::ServFail), 1);
        assert_eq!((h.outcome, m.unwrap().answers.len()), ("SERVFAIL", 0));
        let (h, _) = run(&q, Transport::Udp, DnsAction::Rcode(Rcode::NxDomain), 1);
        assert_eq!(h.outcome, "NXDOMAIN");
        let (h, m) = run(&q, Transport::Udp, DnsAction::Drop, 1);
        assert_eq!((h.outcome, m), ("no_answer", None));
    }

    #[test]
    fn truncate_sets_tc_over_udp_and_answers_in_full_over_tcp() {
        let q = query("pricing.internal.", RecordType::A, false);
        let (h, m) = run(&q, Transport::Udp, DnsAction::Truncate, 1);
        let m = m.unwrap();
        assert_eq!(
            (h.outcome, m.metadata.truncation, m.answers.len()),
            ("truncated", true, 0)
        );
        let (h, m) = run(&q, Transport::Tcp, DnsAction::Truncate, 1);
        assert_eq!((h.outcome, m.unwrap().answers.len()), ("NOERROR", 1));
    }

    #[test]
    fn an_answer_too_large_for_udp_is_truncated_and_whole_over_tcp() {
        let q = query("pricing.internal.", RecordType::A, false);
        let (h, m) = run(&q, Transport::Udp, DnsAction::Answer, 100);
        assert_eq!(
            (h.outcome, m.unwrap().metadata.truncation),
            ("truncated", true)
        );
        let q = query("pricing.internal.", RecordType::A, true);
        let (_, m) = run(&q, Transport::Udp, DnsAction::Answer, 60);
        assert_eq!(m.unwrap().answers.len(), 60, "EDNS lets 60 records through");
        let (_, m) = run(&q, Transport::Tcp, DnsAction::Answer, 1000);
        assert_eq!(m.unwrap().answers.len(), 1000);
    }

    #[test]
    fn unknown_names_are_forwarded_or_refused_by_the_caller_and_other_types_get_no_records() {
        let (h, _) = run(
            &query("other.internal.", RecordType::A, false),
            Transport::Udp,
            DnsAction::Answer,
            1,
        );
        assert_eq!(
            (h.outcome, h.reply, h.name),
            ("forwarded", Reply::Forward, None)
        );
        let refused = respond(
            &query("other.internal.", RecordType::A, false),
            Transport::Udp,
            false,
            &mut |_| None,
        );
        assert_eq!(refused.outcome, "REFUSED");
        let (h, m) = run(
            &query("pricing.internal.", RecordType::MX, false),
            Transport::Udp,
            DnsAction::Answer,
            1,
        );
        assert_eq!((h.outcome, m.unwrap().answers.len()), ("NOERROR", 0));
    }

    #[test]
    fn malformed_input_gets_formerr_or_nothing_never_a_panic() {
        let (h, _) = run(b"\x01\x02", Transport::Udp, DnsAction::Answer, 1);
        assert_eq!(h.reply, Reply::Drop);
        let mut garbage = query("pricing.internal.", RecordType::A, false);
        garbage.truncate(garbage.len() - 3);
        let (h, m) = run(&garbage, Transport::Udp, DnsAction::Answer, 1);
        let m = m.unwrap();
        assert_eq!(
            (h.outcome, m.metadata.id, m.metadata.response_code),
            ("FORMERR", 4242, ResponseCode::FormErr)
        );
        let mut response = query("pricing.internal.", RecordType::A, false);
        response[2] |= 0x80;
        assert_eq!(
            run(&response, Transport::Udp, DnsAction::Answer, 1).0.reply,
            Reply::Drop
        );
        // Every prefix and every single-byte change of a real query.
        let q = query("pricing.internal.", RecordType::A, true);
        for n in 0..q.len() {
            run(&q[..n], Transport::Udp, DnsAction::Answer, 3);
            for v in [0u8, 0x80, 0xff] {
                let mut m = q.clone();
                m[n] = v;
                run(&m, Transport::Tcp, DnsAction::Truncate, 3);
            }
        }
    }
}
