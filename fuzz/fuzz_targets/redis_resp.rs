//! Fuzzes faultd's RESP reader (`faultd::tcp::protocol::redis::resp::Scanner`), the code that frames every byte a
//! Redis route's clients and servers send. The first byte picks the side (even: client commands, odd: server
//! replies) and how the rest is cut into reads (the byte's upper bits: a read size of 1 to 128 bytes); the rest is
//! the stream.
//!
//! Checked: no panic; every call consumes at least one byte of a non-empty input and never more than it was
//! given; the frames, the commands' names and keys, and the garbage found do not depend on how the stream was cut
//! into reads (the same stream fed whole, which takes the scanner's one-go paths wherever a frame lies whole, gives
//! the same events at the same offsets as reads of a few bytes, which take the byte-by-byte ones).

#![no_main]

use faultd::tcp::protocol::redis::resp::{Event, Garbage, Scanner, Side};
use libfuzzer_sys::fuzz_target;

/// An event with the command's name and key it made known, if any.
type Seen = (Event, Option<(String, Option<Vec<u8>>)>);

/// Feeds `input` in reads of `step` bytes: each event with the offset it ended at, and the garbage if any.
fn run(side: Side, input: &[u8], step: usize) -> (Vec<(usize, Seen)>, Option<(usize, Garbage)>) {
    let mut scanner = Scanner::new(side);
    let mut events = Vec::new();
    let mut at = 0;
    for piece in input.chunks(step) {
        let mut pos = 0;
        while pos < piece.len() {
            match scanner.advance(&piece[pos..]) {
                Ok((n, event)) => {
                    assert!(n > 0 || event.is_some(), "no progress at {}", at + pos);
                    assert!(pos + n <= piece.len(), "consumed more than given");
                    pos += n;
                    if let Some(e) = event {
                        let known = matches!(&e, Event::Head) || matches!(&e, Event::End(end) if end.head);
                        let head = known.then(|| {
                            let h = scanner.head();
                            (h.name.to_string(), h.key.map(<[u8]>::to_vec))
                        });
                        events.push((at + pos, (e, head)));
                    }
                }
                Err(g) => return (events, Some((at + pos, g))),
            }
        }
        at += piece.len();
    }
    (events, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let side = if first & 1 == 0 { Side::Client } else { Side::Server };
    let step = usize::from(first >> 1) + 1;
    let cut = run(side, stream, step);
    let whole = run(side, stream, stream.len().max(1));
    // Garbage is found where the bytes stop being RESP, which is the same wherever the reads were cut; the
    // events before it are the same too.
    assert_eq!(cut.0, whole.0, "events depend on the reads");
    assert_eq!(
        cut.1.as_ref().map(|(_, g)| g),
        whole.1.as_ref().map(|(_, g)| g),
        "garbage depends on the reads"
    );
});
