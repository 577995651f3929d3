// SPDX-License-Identifier: GPL-2.0

//! In-kernel TCP over IPv4, for exchanging connection data with a peer (the
//! RDMA_RC_example protocol).
//!
//! C header: [`include/linux/net.h`](srctree/include/linux/net.h)
//!
//! Every blocking call takes a timeout and a [`Cancel`] token: sockets wait
//! in slices of 100 ms (`SO_RCVTIMEO`), checking the token, the deadline
//! and pending signals between slices.

use crate::bindings;
use crate::qp::Cancel;
use crate::Deadline;
use core::ptr::{self, NonNull};
use kernel::prelude::*;

/// `SHUT_RDWR`.
const SHUT_RDWR: u32 = 2;
/// `MSG_NOSIGNAL`.
const MSG_NOSIGNAL: u32 = 0x4000;
/// The slice a blocking call waits before looking at its token again.
const SLICE_MS: u32 = 100;

/// An IPv4 address.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Ipv4(pub [u8; 4]);

impl Ipv4 {
    /// `0.0.0.0`.
    pub const ANY: Ipv4 = Ipv4([0; 4]);

    fn be(self) -> u32 {
        u32::from_ne_bytes(self.0)
    }
}

impl core::fmt::Display for Ipv4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let a = self.0;
        write!(f, "{}.{}.{}.{}", a[0], a[1], a[2], a[3])
    }
}
crate::kernel_display!(Ipv4);

/// A kernel socket, shut down and released on drop.
///
/// # Invariants
///
/// The pointer is a socket from `sock_create_kern` or `kernel_accept`,
/// not yet released.
struct Socket(NonNull<bindings::socket>);

// SAFETY: Kernel sockets may be used from any thread.
unsafe impl Send for Socket {}
// SAFETY: The socket calls lock the socket themselves.
unsafe impl Sync for Socket {}

impl Socket {
    fn new_tcp() -> Result<Self> {
        let mut sock = ptr::null_mut();
        // SAFETY: `sock` is a valid out pointer.
        kernel::error::to_result(unsafe { bindings::kverbs_sock_create_tcp(&mut sock) })?;
        // INVARIANT: just created.
        let sock = Socket(NonNull::new(sock).ok_or(ENOMEM)?);
        sock.set_timeouts(SLICE_MS, SLICE_MS);
        Ok(sock)
    }

    fn raw(&self) -> *mut bindings::socket {
        self.0.as_ptr()
    }

    fn set_timeouts(&self, rcv_ms: u32, snd_ms: u32) {
        // SAFETY: The socket is live (type invariant).
        unsafe { bindings::kverbs_sock_set_timeouts(self.raw(), rcv_ms, snd_ms) };
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: The socket is live and ours; shutting down an unconnected
        // socket only returns an error.
        unsafe {
            bindings::kernel_sock_shutdown(self.raw(), SHUT_RDWR);
            bindings::sock_release(self.raw());
        }
    }
}

/// Maps a slice that ran out (`EAGAIN`) to `None`, a signal to `EINTR`.
fn slice_result(ret: i32) -> Result<Option<i32>> {
    let eagain = -(kernel::bindings::EAGAIN as i32);
    let erestartsys = -(kernel::bindings::ERESTARTSYS as i32);
    let eintr = -(kernel::bindings::EINTR as i32);
    match ret {
        r if r >= 0 => Ok(Some(r)),
        r if r == eagain => Ok(None),
        r if r == erestartsys || r == eintr => Err(EINTR),
        r => Err(Error::from_errno(r)),
    }
}

/// A listening TCP socket.
pub struct TcpListener(Socket);

impl TcpListener {
    /// Listens on `addr:port`.
    pub fn bind(addr: Ipv4, port: u16) -> Result<Self> {
        let sock = Socket::new_tcp()?;
        // SAFETY: The socket is live.
        kernel::error::to_result(unsafe {
            bindings::kverbs_sock_bind_v4(sock.raw(), addr.be(), port)
        })?;
        // SAFETY: The socket is live and bound.
        kernel::error::to_result(unsafe { bindings::kernel_listen(sock.raw(), 1) })?;
        Ok(TcpListener(sock))
    }

    /// Accepts one connection, waiting at most `timeout_ms`.
    pub fn accept(&self, timeout_ms: u32, cancel: &Cancel) -> Result<TcpStream> {
        let deadline = Deadline::new(timeout_ms, cancel);
        loop {
            let mut new = ptr::null_mut();
            // SAFETY: The socket is live and listening; `new` is a valid out
            // pointer.
            let ret = unsafe { bindings::kernel_accept(self.0.raw(), &mut new, 0) };
            if slice_result(ret)?.is_some() {
                // INVARIANT: `kernel_accept` returned a new socket.
                let sock = Socket(NonNull::new(new).ok_or(ENOMEM)?);
                sock.set_timeouts(SLICE_MS, SLICE_MS);
                return Ok(TcpStream(sock));
            }
            deadline.check()?;
        }
    }
}

/// A connected TCP socket.
pub struct TcpStream(Socket);

impl TcpStream {
    /// Connects to `addr:port`, waiting at most `timeout_ms`, in slices of
    /// 100 ms between which `cancel` and signals are checked (as every
    /// other wait of kverbs), so that a device removal never waits for a
    /// connect that does not come.
    pub fn connect(addr: Ipv4, port: u16, timeout_ms: u32, cancel: &Cancel) -> Result<Self> {
        let sock = Socket::new_tcp()?;
        // Each connect call waits at most one slice (the send timeout).
        sock.set_timeouts(SLICE_MS, SLICE_MS);
        let deadline = Deadline::new(timeout_ms, cancel);
        let inprogress = -(kernel::bindings::EINPROGRESS as i32);
        let already = -(kernel::bindings::EALREADY as i32);
        let isconn = -(kernel::bindings::EISCONN as i32);
        loop {
            deadline.check()?;
            // SAFETY: The socket is live. A call after one that ran out of
            // time goes on waiting for the same connection (`EALREADY`
            // case of `__inet_stream_connect`).
            let ret = unsafe { bindings::kverbs_sock_connect_v4(sock.raw(), addr.be(), port) };
            match ret {
                0 => break,
                r if r == isconn => break,
                r if r == inprogress || r == already => continue,
                r => {
                    slice_result(r)?;
                }
            }
        }
        Ok(TcpStream(sock))
    }

    /// Sends all of `data`.
    pub fn send_all(&self, mut data: &[u8], timeout_ms: u32, cancel: &Cancel) -> Result {
        let deadline = Deadline::new(timeout_ms, cancel);
        while !data.is_empty() {
            let mut vec = bindings::kvec {
                iov_base: data.as_ptr().cast_mut().cast(),
                iov_len: data.len(),
            };
            let mut msg = bindings::msghdr {
                msg_flags: MSG_NOSIGNAL,
                ..Default::default()
            };
            // SAFETY: The socket is live; `vec` describes `data`, which the
            // call only reads.
            let ret = unsafe {
                bindings::kernel_sendmsg(self.0.raw(), &mut msg, &mut vec, 1, data.len())
            };
            match slice_result(ret)? {
                Some(n) => data = &data[n as usize..],
                None => deadline.check()?,
            }
        }
        Ok(())
    }

    /// Fills `buf` from the stream; `ECONNRESET` if the peer closes first.
    pub fn recv_exact(&self, buf: &mut [u8], timeout_ms: u32, cancel: &Cancel) -> Result {
        let deadline = Deadline::new(timeout_ms, cancel);
        let mut got = 0;
        while got < buf.len() {
            let rest = &mut buf[got..];
            let mut vec = bindings::kvec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            let mut msg = bindings::msghdr::default();
            // SAFETY: The socket is live; `vec` describes writable memory.
            let ret = unsafe {
                bindings::kernel_recvmsg(self.0.raw(), &mut msg, &mut vec, 1, rest.len(), 0)
            };
            match slice_result(ret)? {
                Some(0) => return Err(crate::errno::econnreset()),
                Some(n) => got += n as usize,
                None => deadline.check()?,
            }
        }
        Ok(())
    }
}
