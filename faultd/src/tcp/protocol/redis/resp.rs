//! The RESP reader: frames Redis's wire (RESP2 and RESP3) incrementally over whatever bytes arrived, without
//! holding a frame in memory.
//!
//! For: telling where each client command and each server reply ends, the command's name and first key (the
//! client's arrays of bulk strings and its inline commands), whether a reply is an error and its first word
//! (`-OOM`, `!` blob errors), and whether it is a RESP3 push message, which answers no command. Not for: acting
//! on any of it (the connection does, in [`super::conn`]) or decoding values: a bulk string's payload is skipped,
//! only its first [`CAPTURE`] bytes are kept when it is a command's name or key.
//!
//! Every size is bounded (a line, a bulk length, an aggregate's count, the nesting), and input that is not RESP
//! is reported as [`Garbage`], never a panic: the fuzz target `redis_resp` feeds it arbitrary bytes.

/// The longest line kept: an inline command, a simple string, an error, a length (Redis's own inline limit).
pub const MAX_LINE: usize = 64 * 1024;
/// The longest bulk string accepted (Redis's default `proto-max-bulk-len`).
pub const MAX_BULK: u64 = 512 * 1024 * 1024;
/// The most elements one aggregate may announce.
pub const MAX_ELEMENTS: u64 = 1 << 31;
/// The deepest nesting of aggregates followed.
pub const MAX_DEPTH: usize = 64;
/// How many bytes of a command's name and of its key are kept for matching.
pub const CAPTURE: usize = 4096;
/// How many bytes of an error reply are kept to find its first word.
const ERROR_CAPTURE: usize = 128;

/// Which side's bytes a scanner frames: the client's commands, or the server's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Commands: arrays of bulk strings, or inline commands (a line of words).
    Client,
    /// Replies: any RESP2 or RESP3 value.
    Server,
}

/// Why bytes are not RESP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Garbage {
    /// A byte where a type was expected that is no RESP type.
    #[error("byte {0:#04x} is not a RESP type")]
    BadType(u8),
    /// A length or count that is not a number, or out of range.
    #[error("bad length or count {0:?}")]
    BadLength(String),
    /// A line longer than [`MAX_LINE`].
    #[error("a line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// A bulk string or aggregate larger than the bounds.
    #[error("a bulk string or aggregate over the bounds")]
    TooLarge,
    /// Aggregates nested deeper than [`MAX_DEPTH`].
    #[error("aggregates nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A line or bulk string not ended by CRLF, or a client command element that is not a bulk string.
    #[error("malformed frame")]
    Malformed,
}

/// A command's name and first key, as far as they were captured: read from the scanner
/// ([`Scanner::head`]) right after the event that says they are known, so that no command allocates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head<'a> {
    /// The command's name, upper-cased.
    pub name: &'a str,
    /// Its first argument (the key of most commands), when it has one; at most [`CAPTURE`] bytes.
    pub key: Option<&'a [u8]>,
}

/// What a scanner found in the bytes it consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Client side: the current command's name and key are known (the rest of the command may follow); read
    /// them with [`Scanner::head`].
    Head,
    /// A frame ended with the bytes consumed.
    End(End),
}

/// A frame that ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct End {
    /// Client side: the command's head is known now ([`Scanner::head`]) and no [`Event::Head`] came before (a
    /// command of one word). False with no head before either: an empty command (`*0`, an empty inline line),
    /// which Redis answers with nothing.
    pub head: bool,
    /// Server side: the first word of an error reply (`OOM`, `LOADING`, `ERR`).
    pub error: Option<String>,
    /// Server side: a RESP3 push message, which answers no command.
    pub push: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a value: its type byte comes next.
    Type,
    /// Reading the rest of a typed line (its type byte kept).
    Line(u8),
    /// Reading an inline command's line.
    Inline,
    /// Skipping a bulk payload: this many bytes left, then CRLF.
    Bulk(u64),
    /// Expecting the `\r` then the `\n` after a bulk payload (2, then 1 left).
    Crlf(u8),
}

/// An incremental RESP framer for one direction of one connection.
#[derive(Debug, Clone)]
pub struct Scanner {
    side: Side,
    state: State,
    /// Elements still to come in each open aggregate, outermost first.
    stack: Vec<u64>,
    line: Vec<u8>,
    /// The top-level frame's type, once read.
    top: Option<u8>,
    /// The index of the current argument of a client command (its element at depth 1).
    arg: u64,
    /// Whether the current bulk payload is being captured (a command's name or key, an error's start).
    capture: Option<Capture>,
    /// The current command's name and key as captured, and whether it has a key; kept until the next command's
    /// name begins, so that its head can be read after the event.
    name: Vec<u8>,
    key: Vec<u8>,
    has_key: bool,
    /// The name as [`Head`] gives it, upper-cased, and the captured bytes it was made from (a connection sends
    /// the same few names over and over: each is upper-cased once in a row).
    head_name: String,
    named: Vec<u8>,
    head_sent: bool,
    error: Vec<u8>,
    /// A RESP3 attribute came first: the frame goes on to the value it describes.
    attribute: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capture {
    Name,
    Key,
    Error,
}

impl Scanner {
    /// A scanner at the start of a frame.
    pub fn new(side: Side) -> Scanner {
        Scanner {
            side,
            state: State::Type,
            stack: Vec::new(),
            line: Vec::new(),
            top: None,
            arg: 0,
            capture: None,
            name: Vec::new(),
            key: Vec::new(),
            has_key: false,
            head_name: String::new(),
            named: Vec::new(),
            head_sent: false,
            error: Vec::new(),
            attribute: false,
        }
    }

    /// Whether the scanner is between frames.
    pub fn at_boundary(&self) -> bool {
        self.state == State::Type && self.stack.is_empty() && self.top.is_none() && !self.attribute
    }

    /// Whether the frame in progress is a RESP3 push message (known once its type byte was read).
    pub fn in_push(&self) -> bool {
        self.top == Some(b'>')
    }

    /// Consumes bytes of `input` up to the next event (or all of them): how many, and the event they end with.
    /// Call again with the rest. After a [`Garbage`] the scanner's state is meaningless.
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, Option<Event>), Garbage> {
        if let Some(step) = self.fast(input) {
            return Ok(step);
        }
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Type => {
                    let b = input[i];
                    if self.stack.is_empty() && self.top.is_none() && self.side == Side::Client {
                        if b != b'*' {
                            self.state = State::Inline;
                            self.line.clear();
                            continue;
                        }
                    } else if self.side == Side::Client && b != b'$' {
                        return Err(Garbage::Malformed);
                    }
                    if !is_type(b) {
                        return Err(Garbage::BadType(b));
                    }
                    if self.top.is_none() {
                        self.top = Some(b);
                    }
                    i += 1;
                    self.line.clear();
                    self.state = State::Line(b);
                }
                State::Line(_) | State::Inline => {
                    let rest = &input[i..];
                    let found = rest.iter().position(|&c| c == b'\n');
                    let take = found.map_or(rest.len(), |p| p + 1);
                    if self.line.len() + take > MAX_LINE + 2 {
                        return Err(Garbage::LineTooLong);
                    }
                    i += take;
                    let state = self.state;
                    let event = if found.is_none() {
                        self.line.extend_from_slice(&rest[..take]);
                        continue;
                    } else if self.line.is_empty() {
                        // The whole line is in this read: read where it lies.
                        self.state = State::Type;
                        self.line_event(state, &rest[..take])?
                    } else {
                        self.line.extend_from_slice(&rest[..take]);
                        self.state = State::Type;
                        let line = std::mem::take(&mut self.line);
                        let event = self.line_event(state, &line);
                        self.line = line;
                        self.line.clear();
                        event?
                    };
                    if let Some(event) = event {
                        return Ok((i, Some(event)));
                    }
                }
                State::Bulk(left) => {
                    let mut take = (left.min((input.len() - i) as u64)) as usize;
                    if self.capture == Some(Capture::Key) {
                        // Up to the end of the key's capture at most, so that its head comes at the same byte
                        // however the reads were cut.
                        let kept = self.key.len();
                        if kept < CAPTURE {
                            take = take.min(CAPTURE - kept);
                        }
                    }
                    self.keep(&input[i..i + take]);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::Crlf(2)
                    } else {
                        State::Bulk(left)
                    };
                    if left == 0 && self.capture == Some(Capture::Key) {
                        self.capture = None;
                    }
                    if let Some(event) = self.head_if_captured() {
                        return Ok((i, Some(event)));
                    }
                }
                State::Crlf(n) => {
                    let expected = if n == 2 { b'\r' } else { b'\n' };
                    if input[i] != expected {
                        return Err(Garbage::Malformed);
                    }
                    i += 1;
                    if n == 2 {
                        self.state = State::Crlf(1);
                    } else {
                        self.capture = None;
                        self.state = State::Type;
                        if let Some(event) = self.element_done() {
                            return Ok((i, Some(event)));
                        }
                    }
                }
            }
        }
        Ok((i, None))
    }

    /// Keeps the bytes of a payload being captured, up to its bound.
    fn keep(&mut self, bytes: &[u8]) {
        let (into, bound) = match self.capture {
            None => return,
            Some(Capture::Name) => (&mut self.name, CAPTURE),
            Some(Capture::Key) => (&mut self.key, CAPTURE),
            Some(Capture::Error) => (&mut self.error, ERROR_CAPTURE),
        };
        let room = bound.saturating_sub(into.len());
        into.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    /// A client command's head once its key is captured as far as it will be: at the key's end, or as soon as
    /// [`CAPTURE`] bytes of it are in (so a command whose key is huge is not held back whole).
    fn head_if_captured(&mut self) -> Option<Event> {
        if self.side != Side::Client || self.head_sent || self.arg != 1 {
            return None;
        }
        let full = self.has_key && self.key.len() >= CAPTURE;
        let done = matches!(self.state, State::Crlf(_));
        (full || done).then(|| {
            self.head_sent = true;
            self.name_known();
            Event::Head
        })
    }

    /// The name and key of the command the last [`Event::Head`], or [`End`] with `head`, was about.
    pub fn head(&self) -> Head<'_> {
        Head {
            name: &self.head_name,
            key: self.has_key.then_some(&self.key[..]),
        }
    }

    /// The name is captured: its upper-cased form for [`Scanner::head`].
    fn name_known(&mut self) {
        if same(&self.named, &self.name) && !self.named.is_empty() {
            return;
        }
        self.named.clear();
        self.named.extend_from_slice(&self.name);
        self.head_name.clear();
        match std::str::from_utf8(&self.name) {
            Ok(name) => self.head_name.push_str(name),
            Err(_) => self
                .head_name
                .push_str(&String::from_utf8_lossy(&self.name)),
        }
        self.head_name.make_ascii_uppercase();
    }

    /// A whole line (with its `\n`) read in state `state`.
    fn line_event(&mut self, state: State, line: &[u8]) -> Result<Option<Event>, Garbage> {
        if state == State::Inline {
            return Ok(Some(self.inline(line)));
        }
        // A typed line ends with CRLF exactly.
        if line.len() < 2 || line[line.len() - 2] != b'\r' {
            return Err(Garbage::Malformed);
        }
        let State::Line(kind) = state else {
            return Err(Garbage::Malformed);
        };
        self.value_line(kind, &line[..line.len() - 2])
    }

    fn inline(&mut self, line: &[u8]) -> Event {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let mut words = text
            .split(|c| c.is_ascii_whitespace())
            .filter(|w| !w.is_empty());
        let head = match words.next() {
            Some(name) => {
                self.name.clear();
                self.name
                    .extend_from_slice(&name[..name.len().min(CAPTURE)]);
                self.name_known();
                self.key.clear();
                self.has_key = match words.next() {
                    Some(k) => {
                        self.key.extend_from_slice(&k[..k.len().min(CAPTURE)]);
                        true
                    }
                    None => false,
                };
                true
            }
            None => false,
        };
        self.reset();
        Event::End(End {
            head,
            error: None,
            push: false,
        })
    }

    fn value_line(&mut self, kind: u8, line: &[u8]) -> Result<Option<Event>, Garbage> {
        match kind {
            b'+' | b':' | b',' | b'(' => {}
            b'-' => {
                if self.stack.is_empty() {
                    self.error = line[..line.len().min(ERROR_CAPTURE)].to_vec();
                }
            }
            b'_' => {
                if !line.is_empty() {
                    return Err(Garbage::Malformed);
                }
            }
            b'#' => {
                if line != b"t" && line != b"f" {
                    return Err(Garbage::Malformed);
                }
            }
            b'$' | b'!' | b'=' => {
                let n = number(line)?;
                if n == -1 && kind == b'$' {
                    return Ok(self.element_done());
                }
                let n = u64::try_from(n).map_err(|_| bad(line))?;
                if n > MAX_BULK {
                    return Err(Garbage::TooLarge);
                }
                self.capture = match (self.side, self.arg, kind) {
                    (Side::Client, 0, _) => {
                        // A new command: the last one's head is no longer read.
                        self.name.clear();
                        self.has_key = false;
                        Some(Capture::Name)
                    }
                    (Side::Client, 1, _) => {
                        self.key.clear();
                        self.has_key = true;
                        Some(Capture::Key)
                    }
                    (Side::Server, _, b'!') if self.stack.is_empty() => {
                        self.error.clear();
                        Some(Capture::Error)
                    }
                    _ => None,
                };
                self.state = if n == 0 {
                    State::Crlf(2)
                } else {
                    State::Bulk(n)
                };
                return Ok(self.head_if_captured());
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = number(line)?;
                if n == -1 && kind == b'*' {
                    return Ok(self.element_done());
                }
                let mut n = u64::try_from(n).map_err(|_| bad(line))?;
                if n > MAX_ELEMENTS {
                    return Err(Garbage::TooLarge);
                }
                if kind == b'%' || kind == b'|' {
                    n *= 2;
                }
                if kind == b'|' && self.stack.is_empty() {
                    self.attribute = true;
                }
                if n == 0 {
                    return Ok(self.element_done());
                }
                if self.stack.len() >= MAX_DEPTH {
                    return Err(Garbage::TooDeep);
                }
                self.stack.push(n);
                return Ok(None);
            }
            other => return Err(Garbage::BadType(other)),
        }
        Ok(self.element_done())
    }

    /// One value ended: counts it in the aggregates it is in, and ends the frame when it was the last.
    fn element_done(&mut self) -> Option<Event> {
        if self.side == Side::Client && self.stack.len() == 1 {
            self.arg += 1;
        }
        while let Some(top) = self.stack.last_mut() {
            *top -= 1;
            if *top > 0 {
                return None;
            }
            self.stack.pop();
        }
        if self.attribute && self.top == Some(b'|') {
            // The attribute is over; the value it describes follows, in the same frame.
            self.top = None;
            return None;
        }
        let end = match self.side {
            Side::Client => {
                let head = !self.head_sent && self.arg > 0;
                if head {
                    self.name_known();
                }
                End {
                    head,
                    error: None,
                    push: false,
                }
            }
            Side::Server => End {
                head: false,
                error: matches!(self.top, Some(b'-') | Some(b'!')).then(|| first_word(&self.error)),
                push: self.top == Some(b'>'),
            },
        };
        self.reset();
        Some(Event::End(end))
    }

    fn reset(&mut self) {
        self.state = State::Type;
        self.stack.clear();
        self.top = None;
        self.arg = 0;
        self.capture = None;
        self.head_sent = false;
        self.error.clear();
        self.attribute = false;
    }
}

/// Whether two short byte strings (command names) are equal, compared in place rather than through memcmp.
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

fn is_type(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b':'
            | b'$'
            | b'*'
            | b'_'
            | b','
            | b'#'
            | b'!'
            | b'='
            | b'('
            | b'%'
            | b'~'
            | b'|'
            | b'>'
    )
}

fn bad(line: &[u8]) -> Garbage {
    Garbage::BadLength(String::from_utf8_lossy(&line[..line.len().min(32)]).into_owned())
}

/// A length or count: decimal digits with an optional sign, -1 at least (what `str::parse::<i64>` reads, without
/// its detour through UTF-8).
fn number(line: &[u8]) -> Result<i64, Garbage> {
    let (negative, digits) = match line {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, line),
    };
    if digits.is_empty() {
        return Err(bad(line));
    }
    let mut n: i64 = 0;
    for d in digits {
        if !d.is_ascii_digit() {
            return Err(bad(line));
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(d - b'0')))
            .ok_or_else(|| bad(line))?;
    }
    let n = if negative { -n } else { n };
    if n < -1 {
        return Err(bad(line));
    }
    Ok(n)
}

/// The first word of an error's text (`OOM` of `OOM command not allowed`), at most 32 bytes, `ERR` when empty.
pub fn first_word(text: &[u8]) -> String {
    let word: Vec<u8> = text
        .iter()
        .copied()
        .take_while(|c| !c.is_ascii_whitespace())
        .take(32)
        .collect();
    if word.is_empty() {
        "ERR".to_string()
    } else {
        String::from_utf8_lossy(&word).into_owned()
    }
}

mod fast;
#[cfg(test)]
mod tests;
