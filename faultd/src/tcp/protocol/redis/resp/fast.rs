//! The common frames read in one go: a client's command whose name and key lie whole in the bytes at hand, the
//! rest of a command after its key, and a server's simple string, integer, error or bulk string reply.
//!
//! Each path gives the same event at the same offset, and leaves the scanner in the same state, as reading byte
//! by byte would; on anything else (a frame cut by the read, a bound reached, bytes that are not RESP) it changes
//! nothing and the byte-by-byte reader takes over, so that errors are reported in one place. The fuzz target
//! `redis_resp` holds the two to the same events however a stream is cut.

use super::{
    first_word, End, Event, Scanner, Side, State, CAPTURE, ERROR_CAPTURE, MAX_BULK, MAX_LINE,
};

/// The most elements of a command read in one go.
const MAX_FAST_ELEMENTS: u64 = 1024;

/// A line at `at` (its type byte first), when it lies whole in `input`: its content (without type byte and
/// CRLF) and where the next one starts.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = input.get(at + 1..)?;
    let nl = rest.iter().take(MAX_LINE + 2).position(|&c| c == b'\n')?;
    if nl == 0 || rest[nl - 1] != b'\r' {
        return None;
    }
    Some((&rest[..nl - 1], at + 1 + nl + 1))
}

/// Whether CRLF lies at `at` (compared byte by byte: a slice comparison calls memcmp, which costs more than the
/// two bytes).
#[inline]
fn crlf(input: &[u8], at: usize) -> bool {
    matches!(input.get(at..at.saturating_add(2)), Some([b'\r', b'\n']))
}

/// A length or count at `at` (its type byte, decimal digits, CRLF) lying whole in `input`: its value and where the
/// next value starts. Anything else (a sign, no digit, more than 18 digits) is left to the byte-by-byte reader.
#[inline]
fn length(input: &[u8], at: usize) -> Option<(u64, usize)> {
    let start = at + 1;
    let mut i = start;
    let mut n: u64 = 0;
    while let Some(&d) = input.get(i) {
        if !d.is_ascii_digit() {
            break;
        }
        n = n * 10 + u64::from(d - b'0');
        i += 1;
        if i - start > 18 {
            return None;
        }
    }
    if i == start || !crlf(input, i) {
        return None;
    }
    Some((n, i + 2))
}

/// A bulk string at `at` (`$`, its length, its payload, CRLF), when it lies whole in `input` and is not null:
/// where its payload lies and where the next value starts.
#[inline]
fn bulk(input: &[u8], at: usize) -> Option<(std::ops::Range<usize>, usize)> {
    if input.get(at) != Some(&b'$') {
        return None;
    }
    let (len, start) = length(input, at)?;
    if len > MAX_BULK {
        return None;
    }
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    crlf(input, end).then_some((start..end, end + 2))
}

impl Scanner {
    /// Reads what lies whole at the start of `input` in one go, when it is a frame these paths know.
    pub(super) fn fast(&mut self, input: &[u8]) -> Option<(usize, Option<Event>)> {
        match self.side {
            Side::Client if self.at_boundary() && input.first() == Some(&b'*') => {
                self.fast_command(input)
            }
            Side::Client
                if self.state == State::Crlf(2)
                    && self.head_sent
                    && self.arg == 1
                    && self.capture.is_none()
                    && self.stack.len() == 1 =>
            {
                self.fast_rest(input)
            }
            Side::Server if self.at_boundary() => self.fast_reply(input),
            _ => None,
        }
    }

    /// A command up to its head: to the end of its key's payload, or to its end when it has no key.
    fn fast_command(&mut self, input: &[u8]) -> Option<(usize, Option<Event>)> {
        let (count, at) = length(input, 0)?;
        if !(1..=MAX_FAST_ELEMENTS).contains(&count) {
            return None;
        }
        let (name, at) = bulk(input, at)?;
        if name.len() > CAPTURE {
            return None;
        }
        let key = if count >= 2 {
            if input.get(at) != Some(&b'$') {
                return None;
            }
            let (len, start) = length(input, at)?;
            let len = usize::try_from(len).ok()?;
            if len > CAPTURE || input.len() < start + len {
                return None;
            }
            Some(start..start + len)
        } else {
            None
        };
        self.name.clear();
        self.name.extend_from_slice(&input[name.clone()]);
        self.name_known();
        self.key.clear();
        self.has_key = key.is_some();
        let Some(key) = key else {
            // A command of one word ends after its name.
            self.reset();
            let end = End {
                head: true,
                error: None,
                push: false,
            };
            return Some((name.end + 2, Some(Event::End(end))));
        };
        self.key.extend_from_slice(&input[key.clone()]);
        self.top = Some(b'*');
        self.stack.clear();
        self.stack.push(count - 1);
        self.arg = 1;
        self.head_sent = true;
        self.state = State::Crlf(2);
        Some((key.end, Some(Event::Head)))
    }

    /// The rest of a command after its key's payload: the key's CRLF and every later argument.
    fn fast_rest(&mut self, input: &[u8]) -> Option<(usize, Option<Event>)> {
        if !crlf(input, 0) {
            return None;
        }
        let mut at = 2;
        for _ in 1..self.stack[0] {
            (_, at) = bulk(input, at)?;
        }
        self.reset();
        let end = End {
            head: false,
            error: None,
            push: false,
        };
        Some((at, Some(Event::End(end))))
    }

    /// A simple string, integer, error or bulk string reply.
    fn fast_reply(&mut self, input: &[u8]) -> Option<(usize, Option<Event>)> {
        let (end, error) = match *input.first()? {
            b'+' | b':' => (line(input, 0)?.1, None),
            b'-' => {
                let (text, end) = line(input, 0)?;
                (
                    end,
                    Some(first_word(&text[..text.len().min(ERROR_CAPTURE)])),
                )
            }
            b'$' => match line(input, 0)? {
                (b"-1", end) => (end, None),
                _ => (bulk(input, 0)?.1, None),
            },
            _ => return None,
        };
        self.reset();
        let end_of = End {
            head: false,
            error,
            push: false,
        };
        Some((end, Some(Event::End(end_of))))
    }
}
