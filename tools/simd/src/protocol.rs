//! What a client and the device process say to each other.
//!
//! The device process listens on one `SOCK_SEQPACKET` Unix socket per DRM
//! node, named as the node (`card0`, `renderD128`) in its directory.
//! Connecting to one and sending [`Op::Open`] opens a DRM file through
//! that node, and the connected socket *is* the client's descriptor of the
//! file: `dup`, `fork`, `SCM_RIGHTS` and `exec` share it as they share any
//! descriptor, the device sees the file close when the last copy in any
//! process does, and any process holding it can tell what it is from its
//! peer's address alone ([`node_of_peer`]).
//!
//! Each call on the file (an ioctl, an mmap, a query) is one [`Request`]
//! on a *channel*: a connection to the device's `calls` socket, carrying
//! the file's descriptor. A call has its channel to itself, so concurrent
//! calls from several threads or processes never share a reply stream;
//! a process keeps the channels of finished calls for its next ones
//! ([`crate::pool`]). An ioctl's argument struct travels with the request
//! and its copy-out with the result; anything else the call touches, the
//! device reaches through the channel ([`Call`]: read, write, take a
//! descriptor, install one), as the kernel reaches user space from an
//! ioctl; the caller answers each ([`Answer`]) until [`CallOp::Done`]
//! carries the result.
//! A signal that interrupts the caller's wait is passed on
//! ([`Op::Interrupt`]), so that a blocking wait in the device ends with
//! `EINTR` as the kernel's would.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agx_sim::NodeKind;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The first word of every message.
pub const MAGIC: u32 = u32::from_le_bytes(*b"AGXd");

/// The most bytes of user memory one [`Call`] or [`Answer`] carries;
/// larger copies are split.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 10;

/// The most descriptors one message carries.
const MAX_FDS: usize = 2;

/// The largest message: a header and a payload.
const MAX_MESSAGE_BYTES: usize = 64 + MAX_PAYLOAD_BYTES;

/// What a [`Request`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Op {
    /// The first message on a new connection: open a DRM file through the
    /// node the socket stands for. `flags`: the `open` flags. Answered on
    /// the connection itself with an [`Answer`].
    Open = 1,
    /// `ioctl(fd, a, b)`.
    Ioctl = 2,
    /// `mmap` of `b` bytes at offset `a`: answered with the object's
    /// memfd and the offset within it.
    Mmap = 3,
    /// The file's access mode (in the answer's value) and its fdinfo
    /// lines (the payload).
    Query = 4,
    /// `ioctl` request `a` with the argument at `b` on the file attached
    /// after the channel: a sync file or a PRIME buffer of the device
    /// (`SYNC_IOC_FILE_INFO`, the dma-buf ioctls). Also the first message
    /// of a connection that opens no file.
    FileIoctl = 5,
    /// A signal interrupted the caller's wait for request `a`: interrupt
    /// the device's thread running it. No channel, no answer.
    Interrupt = 6,
    /// The client closed a descriptor of the DRM file whose socket end is
    /// inode `b` of device `a`: if that was the last, the device releases
    /// the file before it answers, so that `close` is synchronous as on
    /// Linux (the master, handles and memory are gone when it returns).
    Closed = 7,
}

impl Op {
    fn from_u32(op: u32) -> Option<Op> {
        Some(match op {
            1 => Op::Open,
            2 => Op::Ioctl,
            3 => Op::Mmap,
            4 => Op::Query,
            5 => Op::FileIoctl,
            6 => Op::Interrupt,
            7 => Op::Closed,
            _ => return None,
        })
    }
}

/// A call on a DRM file, client to device.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Request {
    /// [`MAGIC`].
    pub magic: u32,
    /// An [`Op`].
    pub op: u32,
    /// The caller's id for this request (for [`Op::Interrupt`]).
    pub id: u64,
    /// The calling thread (what `current->pid` is to the kernel).
    pub tid: u32,
    /// `open` flags, for [`Op::Open`].
    pub flags: u32,
    /// The first argument.
    pub a: u64,
    /// The second argument.
    pub b: u64,
}

impl Request {
    /// A request for `op`, numbered `id`, whose high 32 bits are the
    /// calling thread's id (as the client numbers its requests).
    pub fn new(op: Op, id: u64, a: u64, b: u64) -> Request {
        Request {
            magic: MAGIC,
            op: op as u32,
            id,
            tid: (id >> 32) as u32,
            flags: 0,
            a,
            b,
        }
    }

    /// The request at the start of `bytes`, if it is one.
    pub fn parse(bytes: &[u8]) -> Option<(Request, Op)> {
        let (request, _) = Request::read_from_prefix(bytes).ok()?;
        if request.magic != MAGIC {
            return None;
        }
        Some((request, Op::from_u32(request.op)?))
    }
}

/// What the device asks of the caller during a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum CallOp {
    /// Send `len` bytes at `address` of your memory.
    Read = 1,
    /// Write the payload at `address`.
    Write = 2,
    /// Send your descriptor number `value`.
    TakeFd = 3,
    /// Keep the attached descriptor (close-on-exec if `len` is 1) and
    /// say its number.
    InstallFd = 4,
    /// The request is done: `value` is its result, or `-errno`; a
    /// descriptor and a payload may come with it.
    Done = 5,
}

/// A message of the device on a channel.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Call {
    /// [`MAGIC`].
    pub magic: u32,
    /// A [`CallOp`].
    pub op: u32,
    /// The user address.
    pub address: u64,
    /// Bytes (or a flag).
    pub len: u64,
    /// A descriptor number, or the result.
    pub value: i64,
}

impl Call {
    /// A call for `op`.
    pub fn new(op: CallOp, address: u64, len: u64, value: i64) -> Call {
        Call {
            magic: MAGIC,
            op: op as u32,
            address,
            len,
            value,
        }
    }

    /// The call at the start of `bytes`, if it is one.
    pub fn parse(bytes: &[u8]) -> Option<(Call, CallOp)> {
        let (call, _) = Call::read_from_prefix(bytes).ok()?;
        if call.magic != MAGIC {
            return None;
        }
        let op = match call.op {
            1 => CallOp::Read,
            2 => CallOp::Write,
            3 => CallOp::TakeFd,
            4 => CallOp::InstallFd,
            5 => CallOp::Done,
            _ => return None,
        };
        Some((call, op))
    }
}

/// The caller's answer to a [`Call`] (and the device's to [`Op::Open`]).
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Answer {
    /// [`MAGIC`].
    pub magic: u32,
    /// 0, or the errno of a failure.
    pub status: i32,
    /// A descriptor number.
    pub value: i64,
}

impl Answer {
    /// An answer.
    pub fn new(status: i32, value: i64) -> Answer {
        Answer {
            magic: MAGIC,
            status,
            value,
        }
    }

    /// The answer at the start of `bytes`, if it is one.
    pub fn parse(bytes: &[u8]) -> Option<Answer> {
        let (answer, _) = Answer::read_from_prefix(bytes).ok()?;
        (answer.magic == MAGIC).then_some(answer)
    }
}

/// A message as received: its bytes and the descriptors that came with it.
#[derive(Debug)]
pub struct Message {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The descriptors (close-on-exec).
    pub fds: Vec<OwnedFd>,
}

impl Message {
    /// The bytes after a header of type `T`.
    pub fn payload<T>(&self) -> &[u8] {
        self.bytes.get(size_of::<T>()..).unwrap_or(&[])
    }
}

/// A new close-on-exec `SOCK_SEQPACKET` Unix socket, what every socket of
/// the protocol is.
pub fn seqpacket_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Sends one message: `header` then `payload`, with `fds` attached.
/// Never raises `SIGPIPE`; an interrupted send is retried.
pub fn send(
    socket: BorrowedFd<'_>,
    header: &[u8],
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let iov = [IoSlice::new(header), IoSlice::new(payload)];
    loop {
        match rustix::net::sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => return Ok(()),
        }
    }
}

/// Receives one message; `None` at end of file (the other side closed).
/// An interrupted receive is an `Interrupted` error: the caller decides.
pub fn recv(socket: BorrowedFd<'_>) -> io::Result<Option<Message>> {
    recv_with(socket, RecvFlags::empty(), None)
}

/// A buffer for the largest message, zeroed once, for a thread that
/// receives many messages on one socket (a device thread serving a
/// channel): receiving into it takes one system call per message, where
/// [`recv`] first asks the message's length.
#[derive(Debug)]
pub struct RecvBuffer(Vec<u8>);

impl RecvBuffer {
    /// A buffer for any message.
    pub fn new() -> RecvBuffer {
        RecvBuffer(vec![0u8; MAX_MESSAGE_BYTES])
    }
}

impl Default for RecvBuffer {
    fn default() -> Self {
        RecvBuffer::new()
    }
}

/// Drops every message queued on `socket` now, closing the descriptors
/// they carry, without waiting.
pub fn drop_queued(socket: BorrowedFd<'_>) {
    while let Ok(Some(_)) = recv_with(socket, RecvFlags::DONTWAIT, None) {}
}

fn recv_with(
    socket: BorrowedFd<'_>,
    flags: RecvFlags,
    buffer: Option<&mut RecvBuffer>,
) -> io::Result<Option<Message>> {
    if let Some(RecvBuffer(buffer)) = buffer {
        // Room for any message: one receive, then its bytes copied out.
        return Ok(
            recv_into(socket, flags, buffer)?.map(|(length, fds)| Message {
                bytes: buffer[..length].to_vec(),
                fds,
            }),
        );
    }
    // The next message's length first (a peek with MSG_TRUNC returns the
    // whole length of a packet; without room for control data it installs
    // none of the descriptors the message carries), so the buffer is what
    // the message needs: zeroing the largest message's 64 KiB twice a
    // round trip cost more than the extra system call.
    let length = {
        let mut probe = [0u8; 1];
        let mut iov = [IoSliceMut::new(&mut probe)];
        rustix::net::recvmsg(
            socket,
            &mut iov,
            &mut RecvAncillaryBuffer::default(),
            RecvFlags::PEEK | RecvFlags::TRUNC | flags,
        )?
        .bytes
    };
    let mut bytes = vec![0u8; length.clamp(1, MAX_MESSAGE_BYTES)];
    Ok(recv_into(socket, flags, &mut bytes)?.map(|(length, fds)| {
        bytes.truncate(length);
        Message { bytes, fds }
    }))
}

/// Receives one message into `bytes` (its length the most it takes):
/// the message's length and the descriptors it carried; `None` at end of
/// file.
fn recv_into(
    socket: BorrowedFd<'_>,
    flags: RecvFlags,
    bytes: &mut [u8],
) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = {
        let mut iov = [IoSliceMut::new(bytes)];
        rustix::net::recvmsg(
            socket,
            &mut iov,
            &mut control,
            RecvFlags::CMSG_CLOEXEC | flags,
        )?
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if received.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if received.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok(Some((received.bytes, fds)))
}

/// [`recv`] (into `buffer` if given), polling for up to `spin` first. A
/// call's answer (and a client's next call) usually comes within
/// microseconds; a thread that
/// blocks at once gives its core up, and on a virtual machine an idle
/// core's wakeup costs tens of microseconds on each side of a round trip.
/// Between polls the thread yields, so on a busy machine the other side
/// (or anyone else) gets the core: a pure spin there tripled a round
/// trip.
pub fn recv_spinning(
    socket: BorrowedFd<'_>,
    spin: std::time::Duration,
    mut buffer: Option<&mut RecvBuffer>,
) -> io::Result<Option<Message>> {
    let start = std::time::Instant::now();
    loop {
        match recv_with(socket, RecvFlags::DONTWAIT, buffer.as_deref_mut()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if start.elapsed() >= spin {
                    return recv_with(socket, RecvFlags::empty(), buffer);
                }
                std::thread::yield_now();
            }
            other => return other,
        }
    }
}

/// [`recv`], retrying interrupted receives.
pub fn recv_retrying(socket: BorrowedFd<'_>) -> io::Result<Option<Message>> {
    loop {
        match recv(socket) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// A new channel: a pair of connected, close-on-exec sequenced-packet
/// sockets.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Why a private directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// A filesystem call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The directory exists but is not this user's private one.
    #[error("{path} is not a directory private to uid {uid} (mode 0700)")]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// The user.
        uid: u32,
    },
}

/// The directory private to this user where the shim keeps its state
/// (the enumeration tree, the device process's sockets): `agx-sim-<uid>`
/// in `$XDG_RUNTIME_DIR`, or in the temporary directory without one.
pub fn user_dir() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && dir.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    base.join(format!("agx-sim-{}", rustix::process::getuid().as_raw()))
}

/// Makes `dir` (mode 0700) if it does not exist, and checks that it is
/// this user's and private. The user's directory ([`user_dir`]) is made
/// first (private too) when `dir` is in it: on a fresh machine the
/// default device directory's parent does not exist yet.
pub fn ensure_private_dir(dir: &Path) -> Result<(), DirError> {
    let uid = rustix::process::getuid().as_raw();
    let user = user_dir();
    if dir != user && dir.parent() == Some(user.as_path()) {
        ensure_private_dir(&user)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(DirError::Io {
                what: "creating",
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| DirError::Io {
        what: "checking",
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(DirError::NotPrivate {
            path: dir.to_path_buf(),
            uid,
        });
    }
    Ok(())
}

/// The device process's directory: `$AGX_SIM_DEVICE_DIR`, or `device` in
/// [`user_dir`].
pub fn device_dir() -> PathBuf {
    std::env::var_os("AGX_SIM_DEVICE_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(|| user_dir().join("device"))
}

/// The socket standing for `node` in the device directory `dir`.
pub fn socket_path(dir: &Path, node: NodeKind) -> PathBuf {
    dir.join(match node {
        NodeKind::Primary => "card0",
        NodeKind::Render => "renderD128",
    })
}

/// The device's socket for calls on DRM files (every request but
/// [`Op::Open`]), in the device directory `dir`. Kept apart from the
/// nodes' sockets so that a call's connection is never taken for a file.
pub fn calls_path(dir: &Path) -> PathBuf {
    dir.join("calls")
}

/// The abstract socket name of the device's second calls socket, for
/// device directory `dir`. It has no file, so no directory's permissions
/// guard it: a process that holds a DRM file of the device but may not
/// enter its directory (it changed its user after it inherited the file)
/// still makes calls on it, as a Linux file works for whoever holds it.
/// The device serves calls of another user only on a descriptor the
/// request carries, which is the proof of holding it.
pub fn calls_abstract_name(dir: &Path) -> Vec<u8> {
    // FNV-1a of the directory's path: a name of fixed length, whatever
    // the path's.
    let hash = dir
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("agx-simd-calls-{hash:016x}").into_bytes()
}

/// The nodes' sockets in the device directory `dir`, for
/// [`node_of_peer`] (made once: the check runs on every descriptor a
/// client closes or stats).
pub fn node_sockets(dir: &Path) -> [(NodeKind, PathBuf); 2] {
    [NodeKind::Primary, NodeKind::Render].map(|node| (node, socket_path(dir, node)))
}

/// The node a DRM file of the device whose [`node_sockets`] are `sockets`
/// was opened through, if `fd` is such a file: a socket connected to one
/// of the device's.
pub fn node_of_peer(sockets: &[(NodeKind, PathBuf)], fd: BorrowedFd<'_>) -> Option<NodeKind> {
    let peer = rustix::net::getpeername(fd).ok()??;
    let peer = rustix::net::SocketAddrUnix::try_from(peer).ok()?;
    let path = peer.path()?;
    let path = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    sockets
        .iter()
        .find(|(_, socket)| socket == path)
        .map(|&(node, _)| node)
}

/// The device directory and node of `fd` if it is a DRM file of any
/// device: a socket connected to a socket named as a node's (`card0`,
/// `renderD128`). For a file of another directory than a process's own
/// (one it inherited across a change of user and `exec`, whose new image
/// looks for its own user's device): its calls go to that directory's
/// device, on a channel checked to lead to the process at the file's
/// other end.
pub fn device_of_peer(fd: BorrowedFd<'_>) -> Option<(PathBuf, NodeKind)> {
    let peer = rustix::net::getpeername(fd).ok()??;
    let peer = rustix::net::SocketAddrUnix::try_from(peer).ok()?;
    let path = peer.path()?;
    let path = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let node = [NodeKind::Primary, NodeKind::Render]
        .into_iter()
        .find(|&node| path.file_name() == socket_path(Path::new(""), node).file_name())?;
    Some((path.parent()?.to_path_buf(), node))
}

/// The errno of an I/O error (`EIO` if it has none).
pub fn errno_of(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}
