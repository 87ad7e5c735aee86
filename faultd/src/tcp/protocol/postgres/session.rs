//! One connection's PostgreSQL session as faultd follows it: which statement each client message runs, what the
//! server's replies answer, and where a taken statement's fault goes in.
//!
//! For: pairing replies with statements (a simple query's reply runs to its ReadyForQuery; an Execute's to its
//! CommandComplete, EmptyQueryResponse, PortalSuspended or ErrorResponse; after an error in the extended protocol
//! the server skips to Sync, and so do the expected replies), the texts of prepared statements and portals (a
//! Bind's statement is the one its Parse gave, named or unnamed), the transaction status of the last
//! ReadyForQuery, and rewriting a statement that an error entry takes. Not for: sockets (see `conn`) or which
//! entry takes a statement (the caller decides and passes the fault in).
//!
//! How an error is made: the taken statement is not sent; in its place the server runs
//! `DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '<sqlstate>'; END$$`, which fails as the statement would have, so
//! the server itself is left in the state a real failure leaves: inside an explicit transaction the transaction is
//! aborted (the next statement gets 25P02 until ROLLBACK), outside one nothing ran and the ReadyForQuery says idle.
//! The server's ErrorResponse for it is replaced by the entry's (severity ERROR, its SQLSTATE and message). In the
//! extended protocol the Execute becomes Parse, Bind and Execute of that statement on the unnamed statement and
//! portal (their ParseComplete and BindComplete are dropped), and the server skips the rest up to Sync as after
//! any error. A server whose transaction was already aborted answers 25P02 instead, as it would have to the
//! statement: that answer passes unchanged.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::frame::{body, cstr, message};
use crate::behaviours::{PostgresError, StatementFault};

/// Prepared statements and portals remembered per connection; past this the oldest names are forgotten (their
/// statements then run unmatched).
const MAX_NAMES: usize = 10_000;

/// A statement in flight: where its reply ends and what it was given.
#[derive(Debug, Clone)]
pub struct Call {
    /// The entry it is recorded under (`other` for none).
    pub entry: Arc<str>,
    /// The phase it started in.
    pub phase: Arc<str>,
    /// When the client's message went on.
    pub started: Instant,
    /// The fault it was given, if taken.
    pub fault: Option<StatementFault>,
    /// The SQLSTATE of the error its reply carried.
    pub sqlstate: Option<String>,
}

impl Call {
    /// When its reply may go out: after the delay of a delay fault.
    pub fn due(&self) -> Option<Instant> {
        match &self.fault {
            Some(StatementFault::Delay(d)) => Some(self.started + *d),
            _ => None,
        }
    }
}

/// What the server's replies to one client message look like.
#[derive(Debug)]
enum Ends {
    /// A simple query or function call: everything up to ReadyForQuery.
    Ready,
    /// Sync: its ReadyForQuery.
    Sync,
    /// Parse, Bind or Close: one message of this type.
    One(u8),
    /// Describe: up to RowDescription or NoData (a statement's ParameterDescription comes first).
    Describe,
    /// Execute: up to CommandComplete, EmptyQueryResponse or PortalSuspended.
    Execute,
    /// The ParseComplete or BindComplete of faultd's own rewrite: dropped.
    Swallow(u8),
    /// Close the connection when this is reached (a terminate entry).
    Terminate,
}

#[derive(Debug)]
struct Expect {
    ends: Ends,
    call: Option<Call>,
}

/// What the downstream side does with one server message.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// Pass it to the client.
    Pass,
    /// Drop it (faultd's own rewrite's acknowledgement).
    Drop,
    /// Pass these bytes instead.
    Replace(Vec<u8>),
}

/// A statement whose reply ended, to record.
pub type Finished = Call;

/// One connection's session.
#[derive(Debug, Default)]
pub struct Session {
    expects: VecDeque<Expect>,
    statements: HashMap<Vec<u8>, Arc<str>>,
    portals: HashMap<Vec<u8>, Arc<str>>,
    /// The status byte of the last ReadyForQuery (`I`, `T` or `E`).
    pub status: u8,
    /// Framing gave up (garbage passed through, TLS or a cancel): both directions move raw bytes.
    pub raw: bool,
}

/// A statement the client sent: its text, for the caller to decide on.
#[derive(Debug, PartialEq)]
pub enum Statement {
    /// Not a statement (Parse, Bind, Sync, ...): forward it.
    None,
    /// A simple query or an Execute, with the text it runs (empty when faultd does not know it).
    Runs(Arc<str>),
}

fn text(b: &[u8]) -> Arc<str> {
    String::from_utf8_lossy(b).into()
}

fn remember(map: &mut HashMap<Vec<u8>, Arc<str>>, name: &[u8], text: Arc<str>) {
    // A name bound again (the unnamed portal, a prepared statement's) keeps its key: no allocation.
    if let Some(slot) = map.get_mut(name) {
        *slot = text;
        return;
    }
    if map.len() >= MAX_NAMES {
        map.clear();
    }
    map.insert(name.to_vec(), text);
}

impl Session {
    /// A session at startup.
    pub fn new() -> Session {
        Session {
            status: b'I',
            ..Session::default()
        }
    }

    /// Notes what a whole client message defines and says whether it runs a statement.
    pub fn client_statement(&mut self, tag: u8, msg: &[u8]) -> Statement {
        let b = body(msg);
        match tag {
            b'Q' => Statement::Runs(text(cstr(b).map_or(b, |(q, _)| q))),
            b'P' => {
                if let Some((name, rest)) = cstr(b) {
                    let query = cstr(rest).map_or(&b""[..], |(q, _)| q);
                    remember(&mut self.statements, name, text(query));
                }
                Statement::None
            }
            b'B' => {
                if let Some((portal, rest)) = cstr(b) {
                    let statement = cstr(rest).map_or(&b""[..], |(s, _)| s);
                    let known = self
                        .statements
                        .get(statement)
                        .cloned()
                        .unwrap_or_else(|| "".into());
                    remember(&mut self.portals, portal, known);
                }
                Statement::None
            }
            b'E' => {
                let portal = cstr(b).map_or(&b""[..], |(p, _)| p);
                Statement::Runs(
                    self.portals
                        .get(portal)
                        .cloned()
                        .unwrap_or_else(|| "".into()),
                )
            }
            _ => Statement::None,
        }
    }

    /// Sends on a whole client message: the bytes to forward to the server (empty for none) after noting what
    /// its replies will be. `call` is the statement's, when the message runs one; its fault decides the rewrite.
    pub fn client_message(&mut self, tag: u8, msg: &[u8], call: Option<Call>, out: &mut Vec<u8>) {
        let fault = call.as_ref().and_then(|c| c.fault.clone());
        match (tag, fault) {
            (_, Some(StatementFault::Terminate)) => {
                self.expects.push_back(Expect {
                    ends: Ends::Terminate,
                    call,
                });
            }
            (b'Q', Some(StatementFault::Error(e))) => {
                out.extend_from_slice(&message(b'Q', &nul(&raise(&e))));
                self.expects.push_back(Expect {
                    ends: Ends::Ready,
                    call,
                });
            }
            (b'E', Some(StatementFault::Error(e))) => {
                let mut parse = nul(b"");
                parse.extend_from_slice(&nul(&raise(&e)));
                parse.extend_from_slice(&0u16.to_be_bytes());
                out.extend_from_slice(&message(b'P', &parse));
                // Unnamed portal from the unnamed statement, no parameters, no result formats.
                out.extend_from_slice(&message(b'B', &[0, 0, 0, 0, 0, 0, 0, 0]));
                out.extend_from_slice(&message(b'E', &[0, 0, 0, 0, 0]));
                self.expects.push_back(Expect {
                    ends: Ends::Swallow(b'1'),
                    call: None,
                });
                self.expects.push_back(Expect {
                    ends: Ends::Swallow(b'2'),
                    call: None,
                });
                self.expects.push_back(Expect {
                    ends: Ends::Execute,
                    call,
                });
            }
            _ => {
                out.extend_from_slice(msg);
                let ends = match tag {
                    b'Q' | b'F' => Ends::Ready,
                    b'S' => Ends::Sync,
                    b'P' => Ends::One(b'1'),
                    b'B' => Ends::One(b'2'),
                    b'C' => Ends::One(b'3'),
                    b'D' => Ends::Describe,
                    b'E' => Ends::Execute,
                    _ => return,
                };
                self.expects.push_back(Expect { ends, call });
            }
        }
    }

    /// Whether the next reply due is a terminate entry's: the connection closes there.
    pub fn terminate_due(&self) -> bool {
        matches!(
            self.expects.front(),
            Some(Expect {
                ends: Ends::Terminate,
                ..
            })
        )
    }

    /// When the message at the head of the replies may go out (a delayed statement's reply).
    pub fn due(&self) -> Option<Instant> {
        self.expects
            .front()
            .and_then(|e| e.call.as_ref())
            .and_then(Call::due)
    }

    /// Takes a whole server message (or the first bytes of a long one: `tag` and what came) and says what to
    /// do with it; statements whose reply it ended go to `finished`.
    pub fn server_message(&mut self, tag: u8, msg: &[u8], finished: &mut Vec<Finished>) -> Reply {
        match tag {
            // Asynchronous messages may come at any time and answer nothing.
            b'N' | b'A' | b'S' => return Reply::Pass,
            b'Z' => {
                self.status = body(msg).first().copied().unwrap_or(self.status);
                while let Some(e) = self.expects.pop_front() {
                    let last = matches!(e.ends, Ends::Ready | Ends::Sync);
                    finished.extend(e.call);
                    if last {
                        break;
                    }
                }
                return Reply::Pass;
            }
            b'E' => return self.error(msg, finished),
            _ => {}
        }
        let Some(head) = self.expects.front() else {
            return Reply::Pass;
        };
        let (done, reply) = match head.ends {
            Ends::One(t) => (t == tag, Reply::Pass),
            Ends::Swallow(t) => (t == tag, if t == tag { Reply::Drop } else { Reply::Pass }),
            Ends::Describe => (matches!(tag, b'T' | b'n'), Reply::Pass),
            Ends::Execute => (matches!(tag, b'C' | b'I' | b's'), Reply::Pass),
            Ends::Ready | Ends::Sync | Ends::Terminate => (false, Reply::Pass),
        };
        if done {
            if let Some(e) = self.expects.pop_front() {
                finished.extend(e.call);
            }
        }
        reply
    }

    fn error(&mut self, msg: &[u8], finished: &mut Vec<Finished>) -> Reply {
        let sqlstate = error_field(body(msg), b'C');
        let Some(head) = self.expects.front_mut() else {
            return Reply::Pass;
        };
        let extended = !matches!(head.ends, Ends::Ready | Ends::Sync | Ends::Terminate);
        let mut reply = Reply::Pass;
        // The statement the error ends: the head's, or in the extended protocol the first one up to Sync (a
        // Parse's or Bind's error is its statement's, and so is one of faultd's rewrite).
        let call = if extended {
            self.expects
                .iter_mut()
                .take_while(|e| !matches!(e.ends, Ends::Sync | Ends::Ready | Ends::Terminate))
                .find_map(|e| e.call.as_mut())
        } else {
            head.call.as_mut()
        };
        if let Some(call) = call {
            if let Some(StatementFault::Error(e)) = &call.fault {
                if sqlstate.as_deref() == Some(e.sqlstate.as_str()) {
                    reply = Reply::Replace(error_response(e));
                }
            }
            call.sqlstate = sqlstate;
        }
        if extended {
            // The server discards every message up to Sync: so do the replies expected.
            while let Some(e) = self.expects.front() {
                if matches!(e.ends, Ends::Sync | Ends::Ready | Ends::Terminate) {
                    break;
                }
                if let Some(e) = self.expects.pop_front() {
                    finished.extend(e.call);
                }
            }
        }
        reply
    }

    /// Every statement still waiting for its reply (the connection is ending).
    pub fn drain(&mut self) -> Vec<Finished> {
        self.expects.drain(..).filter_map(|e| e.call).collect()
    }
}

fn nul(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.push(0);
    v
}

/// The statement the server runs in place of a taken one: it fails with the entry's SQLSTATE (checked to be five
/// digits or capital letters, so it needs no quoting).
fn raise(e: &PostgresError) -> Vec<u8> {
    format!(
        "DO $faultd$BEGIN RAISE EXCEPTION USING ERRCODE = '{}'; END$faultd$",
        e.sqlstate
    )
    .into_bytes()
}

/// The ErrorResponse of an entry: severity ERROR, its SQLSTATE and message.
pub fn error_response(e: &PostgresError) -> Vec<u8> {
    let mut b = Vec::new();
    for (field, value) in [
        (b'S', "ERROR"),
        (b'V', "ERROR"),
        (b'C', e.sqlstate.as_str()),
        (b'M', e.message.as_str()),
    ] {
        b.push(field);
        b.extend_from_slice(value.as_bytes());
        b.push(0);
    }
    b.push(0);
    message(b'E', &b)
}

/// One field of an ErrorResponse or NoticeResponse body.
pub fn error_field(mut b: &[u8], field: u8) -> Option<String> {
    while let Some((&code, rest)) = b.split_first() {
        if code == 0 {
            return None;
        }
        let (value, after) = cstr(rest)?;
        if code == field {
            return Some(String::from_utf8_lossy(value).into_owned());
        }
        b = after;
    }
    None
}

/// How long a statement's reply took.
pub fn latency(call: &Call, now: Instant) -> Duration {
    now.saturating_duration_since(call.started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(fault: Option<StatementFault>) -> Option<Call> {
        Some(Call {
            entry: "e".into(),
            phase: "p".into(),
            started: Instant::now(),
            fault,
            sqlstate: None,
        })
    }

    fn serialization() -> StatementFault {
        StatementFault::Error(PostgresError {
            sqlstate: "40001".into(),
            message: "could not serialize".into(),
        })
    }

    fn server(s: &mut Session, tag: u8, body: &[u8]) -> (Reply, Vec<Finished>) {
        let mut done = Vec::new();
        let r = s.server_message(tag, &message(tag, body), &mut done);
        (r, done)
    }

    fn raised(sqlstate: &str) -> Vec<u8> {
        let mut b = format!("SERROR\0C{sqlstate}\0Mraised\0").into_bytes();
        b.push(0);
        b
    }

    #[test]
    fn an_execute_reads_the_text_its_parse_gave_through_its_bind() {
        let mut s = Session::new();
        assert_eq!(
            s.client_statement(b'P', &message(b'P', b"s1\0UPDATE accounts SET x = 1\0\0\0")),
            Statement::None
        );
        s.client_statement(b'B', &message(b'B', b"p\0s1\0\0\0\0\0\0\0"));
        assert_eq!(
            s.client_statement(b'E', &message(b'E', b"p\0\0\0\0\0")),
            Statement::Runs("UPDATE accounts SET x = 1".into())
        );
        assert_eq!(
            s.client_statement(b'Q', &message(b'Q', b"select 1\0")),
            Statement::Runs("select 1".into())
        );
        assert_eq!(
            s.client_statement(b'E', &message(b'E', b"nope\0\0\0\0\0")),
            Statement::Runs("".into())
        );
    }

    #[test]
    fn a_simple_query_error_is_rewritten_and_its_raised_error_replaced() {
        let mut s = Session::new();
        let mut out = Vec::new();
        s.client_message(
            b'Q',
            &message(b'Q', b"UPDATE a\0"),
            call(Some(serialization())),
            &mut out,
        );
        assert!(String::from_utf8_lossy(&out).contains("RAISE EXCEPTION USING ERRCODE = '40001'"));
        let (r, _) = server(&mut s, b'E', &raised("40001"));
        let Reply::Replace(bytes) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            error_field(body(&bytes), b'M').as_deref(),
            Some("could not serialize")
        );
        let (r, done) = server(&mut s, b'Z', b"E");
        assert_eq!(r, Reply::Pass);
        assert_eq!(done[0].sqlstate.as_deref(), Some("40001"));
        assert_eq!(s.status, b'E');
    }

    #[test]
    fn an_already_aborted_transaction_answer_passes_unchanged() {
        let mut s = Session::new();
        let mut out = Vec::new();
        s.client_message(
            b'Q',
            &message(b'Q', b"UPDATE a\0"),
            call(Some(serialization())),
            &mut out,
        );
        let (r, _) = server(&mut s, b'E', &raised("25P02"));
        assert_eq!(r, Reply::Pass);
    }

    #[test]
    fn an_extended_error_swallows_the_rewrite_and_skips_to_sync() {
        let mut s = Session::new();
        let mut out = Vec::new();
        s.client_message(b'P', &message(b'P', b"\0UPDATE a\0\0\0"), None, &mut out);
        s.client_message(b'B', &message(b'B', b"\0\0\0\0\0\0\0\0"), None, &mut out);
        s.client_message(b'D', &message(b'D', b"P\0"), None, &mut out);
        s.client_message(
            b'E',
            &message(b'E', b"\0\0\0\0\0"),
            call(Some(serialization())),
            &mut out,
        );
        s.client_message(b'S', &message(b'S', b""), None, &mut out);
        assert_eq!(server(&mut s, b'1', b"").0, Reply::Pass);
        assert_eq!(server(&mut s, b'2', b"").0, Reply::Pass);
        assert_eq!(server(&mut s, b'n', b"").0, Reply::Pass);
        assert_eq!(server(&mut s, b'1', b"").0, Reply::Drop);
        assert_eq!(server(&mut s, b'2', b"").0, Reply::Drop);
        let (r, done) = server(&mut s, b'E', &raised("40001"));
        assert!(matches!(r, Reply::Replace(_)));
        assert_eq!(done.len(), 1);
        assert_eq!(server(&mut s, b'Z', b"I").1.len(), 0);
        assert!(s.drain().is_empty());
    }

    #[test]
    fn an_error_before_execute_ends_the_statement_with_the_servers_sqlstate() {
        let mut s = Session::new();
        let mut out = Vec::new();
        s.client_message(b'P', &message(b'P', b"\0bad\0\0\0"), None, &mut out);
        s.client_message(b'B', &message(b'B', b"\0\0\0\0\0\0\0\0"), None, &mut out);
        s.client_message(b'E', &message(b'E', b"\0\0\0\0\0"), call(None), &mut out);
        s.client_message(b'S', &message(b'S', b""), None, &mut out);
        let (_, done) = server(&mut s, b'E', &raised("42601"));
        assert_eq!(done.len(), 1);
        assert_eq!(
            done[0].sqlstate.as_deref(),
            Some("42601"),
            "the Parse's error is its statement's"
        );
        server(&mut s, b'Z', b"I");
    }
}
