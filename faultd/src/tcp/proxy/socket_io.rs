//! Socket reads and writes of the byte proxy without system calls beyond the one that moves the bytes.
//! For: the worker thread's read buffer, a read that notes an emptied socket, a write straight to the socket.
//! Not for: deciding what to move (see the parent).

use std::cell::RefCell;
use std::io;

use tokio::io::Interest;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use super::READ_SIZE;

/// What one read from a socket gave.
pub(super) enum Read {
    /// This many bytes, at the start of the buffer.
    Bytes(usize),
    /// The peer finished sending.
    Eof,
    /// The readiness was stale: nothing to read after all.
    Nothing,
}

/// Runs `f` with the worker thread's read buffer: bytes are read into it and leave it copied to their own size or
/// written out, so no connection holds a read buffer between reads.
pub(super) fn with_scratch<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    thread_local! {
        static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_SIZE].into_boxed_slice());
    }
    SCRATCH.with_borrow_mut(|scratch| f(scratch))
}

/// Reads what `src` holds now into `buf`. A read shorter than the buffer emptied the socket: its readiness is
/// cleared there and then, so the next wait goes to epoll instead of first trying a read that fails with EAGAIN
/// (one system call less per chunk). The read itself goes to the socket: `try_io` has checked the readiness
/// already, which `TcpStream::try_read` would do a second time.
pub(super) fn read_into(src: &TcpStream, buf: &mut [u8]) -> io::Result<Read> {
    let mut drained = None;
    let socket = socket2::SockRef::from(src);
    let read = src.try_io(Interest::READABLE, || {
        let n = io::Read::read(&mut &*socket, buf)?;
        if n > 0 && n < buf.len() {
            drained = Some(n);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match (read, drained) {
        (_, Some(n)) => Ok(Read::Bytes(n)),
        (Ok(0), None) => Ok(Read::Eof),
        (Ok(n), None) => Ok(Read::Bytes(n)),
        (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
        (Err(e), None) => Err(e),
    }
}

/// Writes what the socket takes of `bytes` now, straight to the socket. The direct path writes right after a read
/// and only rarely finds the socket full; tokio's readiness for writing is then left as it was, and the rest goes
/// through `write_all`, whose first attempt meets the full socket (EAGAIN) and waits for room.
pub(super) fn send_now(dst: &OwnedWriteHalf, bytes: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(dst.as_ref()).send_with_flags(bytes, libc::MSG_NOSIGNAL)
}
