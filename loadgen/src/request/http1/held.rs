//! The socket calls of an answer held in the kernel until the dispatcher's wake-up: a socket option, and a read
//! with the kernel's receive time (SO_TIMESTAMPNS).
//!
//! Not for deciding when to hold (`conn`, `client`).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Sets an integer option at the socket level.
pub(super) fn set(tcp: &TcpStream, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: the descriptor is the stream's own, open for as long as `tcp` is borrowed; the value is a c_int
    // of the size given.
    let r = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One read, without waiting, into the buffer's spare room, and the kernel's receive time of the last bytes
/// read (SO_TIMESTAMPNS, the system clock).
pub(super) fn recv_stamped(
    tcp: &TcpStream,
    buf: &mut BytesMut,
) -> io::Result<(usize, Option<SystemTime>)> {
    let spare = buf.chunk_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // Room for one SCM_TIMESTAMPNS message, aligned for its header.
    let mut control = [MaybeUninit::<u64>::uninit(); 8];
    // SAFETY: msghdr is plain data; the fields that matter are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the iovec points at the buffer's spare capacity and the control buffer at `control`, both live
    // and writable for the call; the descriptor is the stream's own and non-blocking.
    let n = unsafe { libc::recvmsg(tcp.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: recvmsg wrote `n` bytes into the spare capacity.
    unsafe { buf.advance_mut(n) };
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control messages recvmsg wrote within `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                if ts.tv_sec >= 0 && ts.tv_nsec >= 0 {
                    stamp = Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, stamp))
}

/// The monotonic instant of a system-clock time in the recent past (now, if the clock says it is ahead).
pub(super) fn to_instant(at: SystemTime) -> Instant {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let age = wall.duration_since(at).unwrap_or_default();
    now.checked_sub(age).unwrap_or(now)
}
