//! Fuzzes faultd's PostgreSQL v3 reader in both directions: the framer (`postgres::frame`) over the client's and
//! the server's bytes, each cut into chunks, and the session (`postgres::session`) that pairs replies with
//! statements and rewrites the taken ones. The first byte says where the input splits into client and server
//! bytes, the second the chunk size, the third which fault every statement gets (none, an error, a delay, a
//! terminate).
//!
//! Checked: no panic, whatever the bytes; every byte read comes back out of the framer exactly once, in order.

#![no_main]

use bytes::BytesMut;
use faultd::behaviours::{PostgresError, StatementFault};
use faultd::tcp::protocol::postgres::frame::{Event, Framer, Side};
use faultd::tcp::protocol::postgres::session::{Call, Session, Statement};
use libfuzzer_sys::fuzz_target;

fn fault(mode: u8) -> Option<StatementFault> {
    match mode % 4 {
        1 => Some(StatementFault::Error(PostgresError {
            sqlstate: "40001".into(),
            message: "could not serialize access".into(),
        })),
        2 => Some(StatementFault::Delay(std::time::Duration::from_millis(5))),
        3 => Some(StatementFault::Terminate),
        _ => None,
    }
}

/// Frames `bytes` in chunks of `step`, handing each event to `each`; checks every byte comes back once.
fn frame(side: Side, bytes: &[u8], step: usize, mut each: impl FnMut(&Event)) {
    let mut framer = Framer::new(side);
    let mut buf = BytesMut::new();
    let mut out = Vec::with_capacity(bytes.len());
    for chunk in bytes.chunks(step) {
        buf.extend_from_slice(chunk);
        while let Some(e) = framer.next(&mut buf) {
            match &e {
                Event::Startup(_, b) | Event::Message { bytes: b, .. } | Event::Start { bytes: b, .. } => {
                    out.extend_from_slice(b)
                }
                Event::More(b) | Event::Garbage(b) => out.extend_from_slice(b),
            }
            each(&e);
        }
    }
    out.extend_from_slice(&buf);
    assert_eq!(out, bytes, "the framer gave back other bytes than it read");
}

fuzz_target!(|data: &[u8]| {
    let [split, step, mode, rest @ ..] = data else {
        return;
    };
    let at = (*split as usize * rest.len()) / 256;
    let (client, server) = rest.split_at(at);
    let step = usize::from(*step).max(1);
    let mut session = Session::new();
    let mut forwarded = Vec::new();
    frame(Side::Client, client, step, |e| {
        if let Event::Message { tag, bytes } | Event::Start { tag, bytes } = e {
            let call = match session.client_statement(*tag, bytes) {
                Statement::Runs(text) => Some(Call {
                    entry: text.clone(),
                    phase: "p".into(),
                    started: tokio::time::Instant::now(),
                    fault: fault(*mode),
                    sqlstate: None,
                }),
                Statement::None => None,
            };
            session.client_message(*tag, bytes, call, &mut forwarded);
            let _ = session.terminate_due();
            let _ = session.due();
        }
    });
    let mut finished = Vec::new();
    frame(Side::Server, server, step, |e| {
        if let Event::Message { tag, bytes } | Event::Start { tag, bytes } = e {
            let _ = session.server_message(*tag, bytes, &mut finished);
        }
    });
    let _ = session.drain();
});
