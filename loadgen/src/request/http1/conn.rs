//! One HTTP/1.1 keep-alive connection of a lane: its stream, its read buffer, and the hold that leaves an answer
//! in the kernel until the dispatcher's next wake-up, read then with the kernel's receive time.
//!
//! Not for the exchange itself (`client`) nor for reading a response (`response`).

use std::io;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::held;
use super::transport::{TransportError, STALE};
use crate::tls::Stream;

/// A live keep-alive connection and its read buffer (which survives between exchanges to avoid reallocating).
pub(crate) struct HttpConn {
    pub(super) stream: Stream,
    pub(super) buffer: BytesMut,
    /// When the kernel received the answer the last exchange read whole in one read after a hold.
    pub(super) received: Option<Instant>,
    /// The kernel stamps the bytes it receives on this connection (SO_TIMESTAMPNS).
    stamped: bool,
    /// The receive low-water mark is raised: epoll does not report an answer's arrival.
    pub(super) holding: bool,
    /// Exchanges left before holding is tried again, after a held answer was not there at the wake-up: a slow
    /// service's answers would only cost the hold's system calls.
    pub(super) skip: u8,
}

/// How many exchanges a connection reads as they arrive after a hold found no answer at the wake-up.
pub(super) const SKIP_AFTER_MISS: u8 = 8;

/// The receive low-water mark while an answer is held: epoll reports the socket readable only once this much has
/// arrived. An answer larger than this wakes the thread as before, and is then read as before.
const HOLD_LOWAT: i32 = 64 * 1024;

impl HttpConn {
    /// A connection over `stream`, nothing read yet.
    pub(super) fn new(stream: Stream) -> HttpConn {
        HttpConn {
            stream,
            buffer: BytesMut::with_capacity(8 * 1024),
            received: None,
            stamped: false,
            holding: false,
            skip: 0,
        }
    }

    /// Makes the kernel hold this connection's next answer unreported (and stamp it); false if it cannot (TLS,
    /// or a socket option refused), and the answer is then read as it arrives.
    pub(super) fn hold(&mut self) -> bool {
        let Stream::Plain(tcp) = &self.stream else {
            return false;
        };
        if !self.stamped {
            if held::set(tcp, libc::SO_TIMESTAMPNS, 1).is_err() {
                return false;
            }
            self.stamped = true;
        }
        if !self.holding {
            if held::set(tcp, libc::SO_RCVLOWAT, HOLD_LOWAT).is_err() {
                return false;
            }
            self.holding = true;
        }
        true
    }

    /// Lets epoll report this connection's bytes as they arrive again (the kernel reports at once what it holds).
    pub(super) fn release(&mut self) {
        if let (true, Stream::Plain(tcp)) = (self.holding, &self.stream) {
            // On failure the mark stays up and the connection is dropped by the error that follows it.
            if held::set(tcp, libc::SO_RCVLOWAT, 1).is_ok() {
                self.holding = false;
            }
        }
    }

    /// After the dispatcher's wake-up: reads what the kernel holds of the answer, with its receive time. An
    /// answer not there yet, or not whole, is read on as usual (`fill` releases the hold first).
    pub(super) fn read_held(&mut self) -> Result<(), TransportError> {
        let Stream::Plain(tcp) = &self.stream else {
            return Ok(());
        };
        if self.buffer.capacity() - self.buffer.len() < 1024 {
            self.buffer.reserve(8 * 1024);
        }
        match held::recv_stamped(tcp, &mut self.buffer) {
            // A clean end or a reset before any of the answer: a stale keep-alive connection, as in `read_response`.
            Ok((0, _)) => Err(TransportError(STALE.into())),
            // No stamp (the first socket of the system to ask for them switches the kernel's stamps on in
            // deferred work, so the first answers after may carry none): the answer ends at this read, late by
            // at most the hold, never early.
            Ok((_, stamp)) => {
                self.received = stamp.map(held::to_instant);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.skip = SKIP_AFTER_MISS;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                Err(TransportError(STALE.into()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads more of the answer as it arrives (releasing a hold first); the answer's end is then the read's time.
    pub(super) async fn read_more(&mut self) -> io::Result<usize> {
        self.received = None;
        self.release();
        self.stream.read_buf(&mut self.buffer).await
    }
}
