//! Passing a window (or any set of fds, [`send_fds`]) to another process over a Unix socket
//! (`SCM_RIGHTS`).
//!
//! The message is a fixed greeting naming the protocol and layout version, with the memfd
//! and the eventfds attached. The receiver refuses anything else: a wrong greeting, a
//! truncated set of fds, or a window that fails [`Window::open`]'s checks. Every fd received is
//! owned (closed on error) and close-on-exec.

use crate::layout::LAYOUT_VERSION;
use crate::window::{OpenError, Window};
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;

/// Most fds a window can come with (the memfd, two eventfds per ring, one for the pools).
const MAX_FDS: usize = 2 * crate::layout::MAX_RINGS + 2;

fn greeting() -> [u8; 16] {
    let mut g = *b"shmnet-window\0\0\0";
    g[14..16].copy_from_slice(&(LAYOUT_VERSION as u16).to_le_bytes());
    g
}

/// Why a window could not be received.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The socket failed or closed.
    #[error("socket: {0}")]
    Io(std::io::Error),
    /// The peer closed the socket before sending a window.
    #[error("the peer closed the socket before sending a window")]
    Closed,
    /// The message was not a window hand-off of this version.
    #[error(
        "unexpected message from the peer (not a shmnet window of layout version {LAYOUT_VERSION})"
    )]
    BadGreeting,
    /// The fds did not all arrive.
    #[error("the window's fds were truncated or missing ({0} received)")]
    MissingFds(usize),
    /// The window itself was refused.
    #[error(transparent)]
    Open(#[from] OpenError),
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<std::io::Error> for HandoffError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Sends `win`'s memfd and eventfds over the connected Unix socket `sock`.
pub fn send_window(sock: impl AsFd, win: &Window) -> std::io::Result<()> {
    let (memfd, signals) = win.fds();
    let mut fds = vec![memfd];
    fds.extend(signals);
    send_fds(sock, &greeting(), &fds)
}

/// Sends `fds` over the connected Unix socket `sock` in one message whose bytes are
/// `greeting` (what the receiver checks to know what it was sent).
pub fn send_fds(
    sock: impl AsFd,
    greeting: &[u8; 16],
    fds: &[rustix::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many fds for one message"));
    }
    let sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(greeting)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != greeting.len() {
        return Err(std::io::Error::other("short send of the hand-off greeting"));
    }
    Ok(())
}

/// Receives a window from the connected Unix socket `sock` and opens it.
pub fn recv_window(sock: impl AsFd) -> Result<Window, HandoffError> {
    let mut fds = recv_fds(sock, &greeting())?;
    if fds.len() < 2 {
        return Err(HandoffError::MissingFds(fds.len()));
    }
    let memfd = fds.remove(0);
    Ok(Window::open(memfd, fds)?)
}

/// Receives one message of [`send_fds`] from `sock`: its fds, owned (closed on every
/// refusal), if its bytes are `greeting` and none were truncated.
pub fn recv_fds(sock: impl AsFd, greeting: &[u8; 16]) -> Result<Vec<OwnedFd>, HandoffError> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut buf = [0u8; 16];
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    // Take ownership of every fd first, so that any refusal below closes them.
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Err(HandoffError::Closed);
    }
    if msg.bytes != buf.len() || &buf != greeting {
        return Err(HandoffError::BadGreeting);
    }
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(HandoffError::MissingFds(fds.len()));
    }
    Ok(fds)
}
