//! A client's side of the device process: opening DRM files on it
//! (starting it if none runs), and making calls on them.
//!
//! Everything here is stateless but for the device directory: a DRM file
//! is recognised by its socket's peer, so a descriptor inherited across
//! `fork` or `exec` or received over a socket works as the one `open`
//! returned.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agx_kmd::uaccess;
use agx_kmd::Errno;
use agx_sim::NodeKind;
use zerocopy::IntoBytes;

use crate::pool::ChannelPool;
use crate::protocol::{self, Answer, Call, CallOp, Op, Request, MAX_PAYLOAD_BYTES};

/// How often an interrupted caller repeats its interrupt until the
/// device answers.
const INTERRUPT_REPEAT: Duration = Duration::from_millis(20);

/// How long a call polls for its answer before it blocks (see
/// [`protocol::recv_spinning`]): a trivial ioctl's round trip fits.
const ANSWER_SPIN: Duration = Duration::from_micros(50);

/// How long call `(op, a)` polls for its answer: not at all for the
/// syncobj waits, the calls a signal interrupts (the kernel's wait is
/// interruptible; a handler without `SA_RESTART` that ran while the call
/// polled would not interrupt the blocking receive that follows).
fn answer_spin(op: Op, a: u64) -> Duration {
    use agx_uapi::drm::{DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, DRM_IOCTL_SYNCOBJ_WAIT};
    let waits = op == Op::Ioctl
        && [DRM_IOCTL_SYNCOBJ_WAIT, DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT]
            .iter()
            .any(|&wait| u64::from(wait) == a & 0xFFFF_FFFF);
    if waits {
        Duration::ZERO
    } else {
        ANSWER_SPIN
    }
}

/// How long a client waits for a device process it started.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a DRM file could not be opened on the device process.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No device process runs, and none could be started.
    #[error("no device process serves {dir} and none could be started: {reason}")]
    NotStarted {
        /// The device directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// The device refused the open (or went away during it).
    #[error("the device process refused the open: {0}")]
    Refused(Errno),
    /// A socket call failed.
    #[error("connecting to {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl OpenError {
    /// The errno `open` fails with.
    pub fn errno(&self) -> i32 {
        match self {
            OpenError::NotStarted { .. } => libc::ENODEV,
            OpenError::Refused(errno) => errno.0,
            OpenError::Io { source, .. } => protocol::errno_of(source),
        }
    }
}

/// What a call returned.
#[derive(Debug)]
pub struct Reply {
    /// The result.
    pub value: i64,
    /// A descriptor (an mmap's memfd).
    pub fd: Option<OwnedFd>,
    /// Bytes (a query's fdinfo lines).
    pub payload: Vec<u8>,
}

/// The device process as a client sees it.
#[derive(Debug)]
pub struct Client {
    dir: PathBuf,
    /// The nodes' sockets, by which a DRM file is recognised.
    node_sockets: [(NodeKind, PathBuf); 2],
    /// Finds the program to start when no device runs.
    program: fn() -> Option<PathBuf>,
    /// Call channels left idle by finished calls.
    channels: ChannelPool,
    /// Calls of this process in flight (each holds a channel, or is about
    /// to): a call that cannot make a channel at the descriptor limit
    /// waits for one of theirs.
    calls_in_flight: std::sync::atomic::AtomicUsize,
}

/// Numbers this thread's requests (with its thread id, unique on the
/// machine while it runs).
fn next_request_id() -> u64 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let tid = rustix::thread::gettid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    (u64::from(tid) << 32) | u64::from(NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Client {
    /// The device of directory `dir`, started (when none runs and
    /// `AGX_SIMD` names no program) by running the `agx-simd` that
    /// `program` finds.
    pub fn new(dir: PathBuf, program: fn() -> Option<PathBuf>) -> Client {
        Client {
            node_sockets: protocol::node_sockets(&dir),
            dir,
            program,
            channels: ChannelPool::new(),
            calls_in_flight: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The device directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node `fd` was opened through, if it is a DRM file of this
    /// device.
    pub fn node_of(&self, fd: BorrowedFd<'_>) -> Option<NodeKind> {
        protocol::node_of_peer(&self.node_sockets, fd)
    }

    fn connect(&self, node: NodeKind) -> io::Result<OwnedFd> {
        connect(&protocol::socket_path(&self.dir, node))
    }

    /// Connects to `node`'s socket, starting the device process if none
    /// listens.
    fn connect_or_start(&self, node: NodeKind) -> Result<OwnedFd, OpenError> {
        let absent =
            |e: &io::Error| matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED));
        match self.connect(node) {
            Ok(socket) => return Ok(socket),
            Err(e) if absent(&e) => {}
            Err(source) => {
                return Err(OpenError::Io {
                    path: protocol::socket_path(&self.dir, node),
                    source,
                })
            }
        }
        self.start()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.connect(node) {
                Ok(socket) => return Ok(socket),
                Err(e) if absent(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(source) => {
                    return Err(OpenError::Io {
                        path: protocol::socket_path(&self.dir, node),
                        source,
                    })
                }
            }
        }
    }

    /// Starts a device process for the directory: `program --spawned`,
    /// which returns once the device listens (or says why it cannot).
    fn start(&self) -> Result<(), OpenError> {
        let not_started = |reason: String| OpenError::NotStarted {
            dir: self.dir.clone(),
            reason,
        };
        let program = std::env::var_os("AGX_SIMD")
            .map(PathBuf::from)
            .or_else(self.program)
            .ok_or_else(|| {
                not_started("AGX_SIMD names no program and agx-simd was not found".into())
            })?;
        let mut starter = std::process::Command::new(&program)
            .arg("--spawned")
            .arg("--dir")
            .arg(&self.dir)
            // The device is every client's: of the starting client's
            // environment it takes only its own settings (`AGX_*`, the
            // log filter `RUST_LOG`) and where things go (`PATH`, `HOME`,
            // `TMPDIR`, `XDG_RUNTIME_DIR`), never the client's libraries,
            // allocator or driver settings (and not the shim: the device
            // must not load it into itself).
            .env_clear()
            .envs(device_environment())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| not_started(format!("{}: {e}", program.display())))?;
        // The starter reports on standard error and exits once the device
        // is ready; it is given as long as the device is (and a little
        // more), then killed.
        let stderr = starter.stderr.take();
        let said =
            stderr.map(|pipe| read_within(pipe, START_TIMEOUT + Duration::from_secs(5), false));
        let said = match said {
            Some(Ok(Some(bytes))) => bytes,
            Some(Ok(None)) => {
                let _ = starter.kill();
                let _ = starter.wait();
                return Err(not_started(format!(
                    "{} did not finish within {} s",
                    program.display(),
                    START_TIMEOUT.as_secs() + 5
                )));
            }
            _ => Vec::new(),
        };
        match starter.wait() {
            Ok(status) if status.success() => Ok(()),
            Ok(_) => Err(not_started(format!(
                "{}: {}",
                program.display(),
                String::from_utf8_lossy(&said).trim()
            ))),
            // A client that reaps every child (or ignores SIGCHLD) may
            // have taken the status; the device may still have started.
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Ok(()),
            Err(e) => Err(not_started(format!("{}: {e}", program.display()))),
        }
    }

    /// Opens a DRM file through `node` with the `open` flags `flags`; the
    /// descriptor is the client's.
    pub fn open(&self, node: NodeKind, flags: i32) -> Result<OwnedFd, OpenError> {
        // A device that was exiting when we connected closes the
        // connection unanswered: try once more (starting a new one).
        let mut attempts = 0;
        let socket = loop {
            attempts += 1;
            let socket = self.connect_or_start(node)?;
            let mut request = Request::new(Op::Open, next_request_id(), 0, 0);
            request.flags = flags as u32;
            // Our own end goes along, so the device knows the descriptor
            // that later requests carry.
            let answer = protocol::send(socket.as_fd(), request.as_bytes(), &[], &[socket.as_fd()])
                .ok()
                .and_then(|()| protocol::recv_retrying(socket.as_fd()).ok().flatten())
                .and_then(|message| Answer::parse(&message.bytes));
            match answer {
                Some(answer) if answer.status == 0 => break socket,
                Some(answer) => return Err(OpenError::Refused(Errno(answer.status))),
                None if attempts < 3 => continue,
                None => return Err(OpenError::Refused(Errno::ENODEV)),
            }
        };
        let io = |e: rustix::io::Errno| OpenError::Io {
            path: protocol::socket_path(&self.dir, node),
            source: e.into(),
        };
        // A DRM file reports only `POLLIN`, for events: never writable.
        agx_kmd::sync_file::fill_send_buffer(socket.as_fd()).map_err(io)?;
        if flags & libc::O_NONBLOCK != 0 {
            rustix::fs::fcntl_setfl(&socket, rustix::fs::OFlags::NONBLOCK).map_err(io)?;
        }
        if flags & libc::O_CLOEXEC == 0 {
            rustix::io::fcntl_setfd(&socket, rustix::io::FdFlags::empty()).map_err(io)?;
        }
        Ok(socket)
    }

    /// Makes call `op` on DRM file `file` (no file for
    /// [`Op::FileIoctl`]), with `attach` passed along, on a channel of
    /// its own: one this process kept from an earlier call, or a new
    /// connection. A channel whose call ended cleanly is kept for the
    /// next.
    pub fn call(
        &self,
        file: Option<BorrowedFd<'_>>,
        op: Op,
        a: u64,
        b: u64,
        attach: Option<BorrowedFd<'_>>,
    ) -> Result<Reply, Errno> {
        let own = uaccess::OwnMemory::new();
        self.call_with(file, (op, a, b), attach, &[], None, own)
    }

    /// [`Client::call`] with `argument` sent along, and (`copy_out`) the
    /// address where the payload of the result goes; `own` is this
    /// process's memory, which the device's reads and writes reach.
    fn call_with(
        &self,
        file: Option<BorrowedFd<'_>>,
        call: (Op, u64, u64),
        attach: Option<BorrowedFd<'_>>,
        argument: &[u8],
        copy_out: Option<u64>,
        own: uaccess::OwnMemory,
    ) -> Result<Reply, Errno> {
        self.calls_in_flight.fetch_add(1, Ordering::AcqRel);
        let reply = self.call_on_a_channel(file, call, attach, argument, copy_out, own);
        self.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
        reply
    }

    fn call_on_a_channel(
        &self,
        file: Option<BorrowedFd<'_>>,
        (op, a, b): (Op, u64, u64),
        attach: Option<BorrowedFd<'_>>,
        argument: &[u8],
        copy_out: Option<u64>,
        own: uaccess::OwnMemory,
    ) -> Result<Reply, Errno> {
        let id = next_request_id();
        let fds: Vec<BorrowedFd<'_>> = file.into_iter().chain(attach).collect();
        let request = Request::new(op, id, a, b);
        // The call on `channel`: its reply, or `None` when the device
        // closed the channel before it ran anything.
        // (A kept channel comes with its socket's inode, and goes back
        // without a second look.)
        let attempt = |channel: OwnedFd, inode: Option<u32>| -> Option<Result<Reply, Errno>> {
            protocol::send(channel.as_fd(), request.as_bytes(), argument, &fds).ok()?;
            match self.converse(
                file,
                channel.as_fd(),
                (id, answer_spin(op, a)),
                copy_out,
                own,
            ) {
                Conversation::Ended(reply) => {
                    match inode {
                        Some(inode) => self.channels.put_kept(channel, inode),
                        None => self.channels.put(channel),
                    }
                    Some(reply)
                }
                Conversation::Interrupted(reply) => Some(reply),
                Conversation::Unanswered => None,
            }
        };
        // A kept channel the device has closed (it exited, or is exiting)
        // fails at once, before the device ran anything: then once more on
        // a new connection.
        if let Some(reply) = self
            .channels
            .take_kept(own.pid())
            .and_then(|(channel, inode)| attempt(channel, Some(inode)))
        {
            return reply;
        }
        let mut channel = match self.new_channel(file) {
            Ok(channel) => channel,
            // At the descriptor limit a call on an open file still works,
            // as on Linux: on a channel another call of this process gives
            // back.
            // With no other call to wait for (the first call after
            // `exec`, or of a process that received its file), the
            // channel goes just past the process's limit.
            Err(error) if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => self
                .channel_given_back()
                .or_else(|| self.channel_past_the_limit(file))
                .ok_or(Errno::ENODEV)?,
            Err(_) => return Err(Errno::ENODEV),
        };
        loop {
            if let Some(reply) = attempt(channel, None) {
                return reply;
            }
            // Closed before it ran anything: the device refused the
            // channel (this process has as many as it may), or is going
            // away. The call goes on a channel another call gives back;
            // with no other call in flight, there is no device.
            channel = self.channel_given_back().ok_or(Errno::ENODEV)?;
        }
    }

    /// A new call channel: a connection to the device's calls socket, or,
    /// for a call on `file` by a process that may not enter the device's
    /// directory (it changed its user after it inherited the file), to its
    /// abstract calls socket, checked to be the process at the file's
    /// other end.
    fn new_channel(&self, file: Option<BorrowedFd<'_>>) -> io::Result<OwnedFd> {
        let error = match connect(&protocol::calls_path(&self.dir)) {
            Ok(channel) => return Ok(channel),
            Err(error) => error,
        };
        let Some(file) = file else {
            return Err(error);
        };
        if !matches!(error.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
            return Err(error);
        }
        let device = crate::peer::credentials(file)?;
        let name = protocol::calls_abstract_name(&self.dir);
        let channel = connect_to(&rustix::net::SocketAddrUnix::new_abstract_name(&name)?)?;
        let peer = crate::peer::credentials(channel.as_fd())?;
        if peer.pid.is_some() && peer == device {
            Ok(channel)
        } else {
            Err(io::Error::from_raw_os_error(libc::ENODEV))
        }
    }

    /// A new channel at the descriptor limit (`EMFILE`): the soft limit
    /// raised by one for the moment of the connection (when the hard limit
    /// allows), so that the channel takes the number just past the
    /// process's limit, which no descriptor of its own may take, and is
    /// kept there. One call at a time does this (a second one, meanwhile,
    /// waits for a channel or fails), so the limit is always put back as
    /// the program set it.
    fn channel_past_the_limit(&self, file: Option<BorrowedFd<'_>>) -> Option<OwnedFd> {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        static RAISING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if RAISING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        let limit = getrlimit(Resource::Nofile);
        let channel = match (limit.current, limit.maximum) {
            (Some(soft), hard) if hard.is_none_or(|hard| soft < hard) => {
                let raised = Rlimit {
                    current: Some(soft + 1),
                    maximum: hard,
                };
                let channel = setrlimit(Resource::Nofile, raised)
                    .ok()
                    .and_then(|()| self.new_channel(file).ok());
                if getrlimit(Resource::Nofile).current == Some(soft + 1) {
                    let _ = setrlimit(Resource::Nofile, limit);
                }
                channel
            }
            _ => None,
        };
        RAISING.store(false, Ordering::Release);
        match &channel {
            Some(channel) => tracing::debug!(
                fd = channel.as_raw_fd(),
                "at the descriptor limit, a call channel made past it"
            ),
            None => tracing::warn!(
                soft = ?limit.current,
                hard = ?limit.maximum,
                "at the descriptor limit, with no room below the hard limit for a call channel"
            ),
        }
        channel
    }

    /// A channel another call of this process gives back (at the
    /// descriptor limit, or at the device's limit of channels per
    /// client), waited for while some call is in flight (it ends: a
    /// blocking wait ends at its deadline, or when its file goes); `None`
    /// when no other call holds one, or after a minute.
    fn channel_given_back(&self) -> Option<OwnedFd> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut pause = std::time::Duration::from_micros(50);
        loop {
            if let Some(channel) = self.channels.take() {
                return Some(channel);
            }
            if self.calls_in_flight.load(Ordering::Acquire) <= 1
                || std::time::Instant::now() >= deadline
            {
                tracing::warn!("a call that could not make a channel found none to use");
                return None;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
        }
    }

    /// Tells the device that this process closed a descriptor of the DRM
    /// file whose socket end is `identity` (device, inode), and returns
    /// once the device has released the file if that was its last.
    pub fn closed(&self, identity: (u64, u64)) {
        let _ = self.call(None, Op::Closed, identity.0, identity.1, None);
    }

    /// Tells the device a signal interrupted our wait for request `id` on
    /// `file`.
    fn interrupt(&self, file: BorrowedFd<'_>, id: u64) {
        let socket = match self.new_channel(Some(file)) {
            Ok(socket) => Some(socket),
            Err(error) if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                self.channel_past_the_limit(Some(file))
            }
            Err(_) => None,
        };
        if let Some(socket) = socket {
            let request = Request::new(Op::Interrupt, id, id, 0);
            let _ = protocol::send(socket.as_fd(), request.as_bytes(), &[], &[file]);
        }
    }

    /// `ioctl(file, request, arg)`. The argument struct (`_IOC_SIZE`
    /// bytes at `arg`, when `_IOC_WRITE` says the kernel reads it) goes
    /// with the request, and its copy-out comes back with the result, as
    /// `drm_ioctl` copies it in and out whole: a small ioctl is one round
    /// trip. Bytes that cannot be read are not sent; the device then asks
    /// for them and the fault is its `EFAULT`.
    pub fn ioctl(&self, file: BorrowedFd<'_>, request: u64, arg: u64) -> Result<i32, Errno> {
        let size_bytes = ((request >> 16) & 0x3FFF) as usize;
        let copies_in = (request >> 30) & 1 != 0;
        let mut argument = vec![0u8; if copies_in { size_bytes } else { 0 }];
        let own = uaccess::OwnMemory::new();
        if own.read(&mut argument, arg).is_err() {
            argument.clear();
        }
        let reply = self.call_with(
            Some(file),
            (Op::Ioctl, request, arg),
            None,
            &argument,
            Some(arg),
            own,
        )?;
        Ok(i32::try_from(reply.value).unwrap_or(i32::MAX))
    }

    /// What `mmap` of `len_bytes` at `offset` of `file` maps: a memfd and
    /// the offset within it.
    pub fn mmap(
        &self,
        file: BorrowedFd<'_>,
        offset: u64,
        len_bytes: u64,
    ) -> Result<(OwnedFd, u64), Errno> {
        let reply = self.call(Some(file), Op::Mmap, offset, len_bytes, None)?;
        let fd = reply.fd.ok_or(Errno::EIO)?;
        Ok((fd, reply.value.unsigned_abs()))
    }

    /// `file`'s access mode and fdinfo lines.
    pub fn query(&self, file: BorrowedFd<'_>) -> Result<(i32, String), Errno> {
        let reply = self.call(Some(file), Op::Query, 0, 0, None)?;
        let mode = i32::try_from(reply.value).map_err(|_| Errno::EIO)?;
        Ok((mode, String::from_utf8_lossy(&reply.payload).into_owned()))
    }

    /// `ioctl(file, request, arg)` on a file the device handed out that
    /// is no DRM file: `SYNC_IOC_FILE_INFO` on a sync file, the dma-buf
    /// ioctls on a PRIME buffer (`ENOTTY` for another file or request;
    /// `ENODEV` if no device runs).
    pub fn file_ioctl(&self, file: BorrowedFd<'_>, request: u64, arg: u64) -> Result<i32, Errno> {
        let reply = self.call(None, Op::FileIoctl, request, arg, Some(file))?;
        Ok(i32::try_from(reply.value).unwrap_or(i32::MAX))
    }
}

impl Client {
    /// Answers the device's calls on `channel` until request `id` is done,
    /// polling for each message for up to `spin` before blocking;
    /// the result's payload is written at `copy_out` if given (an ioctl's
    /// argument, copied out whatever the result, as `drm_ioctl` does; a
    /// fault there is the call's `EFAULT`).
    fn converse(
        &self,
        file: Option<BorrowedFd<'_>>,
        channel: BorrowedFd<'_>,
        (id, spin): (u64, Duration),
        copy_out: Option<u64>,
        own: uaccess::OwnMemory,
    ) -> Conversation {
        let mut interrupted = false;
        let mut answered = false;
        let ended = |reply: Result<Reply, Errno>, interrupted: bool| {
            if interrupted {
                Conversation::Interrupted(reply)
            } else {
                Conversation::Ended(reply)
            }
        };
        loop {
            let spin = if interrupted { Duration::ZERO } else { spin };
            let message = match protocol::recv_spinning(channel, spin, None) {
                Ok(Some(message)) => message,
                // The device closed the channel before it said anything:
                // it never ran the call (closed with the request unread,
                // the channel reads as reset).
                Ok(None) if !answered && !interrupted => return Conversation::Unanswered,
                Err(e)
                    if e.raw_os_error() == Some(libc::ECONNRESET) && !answered && !interrupted =>
                {
                    return Conversation::Unanswered
                }
                // The device went away.
                Ok(None) => return Conversation::Interrupted(Err(Errno::ENODEV)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    // A handler without SA_RESTART ran: interrupt the request
                    // as the signal would have interrupted the kernel's wait,
                    // and keep waiting for its (now prompt) answer. An
                    // interrupt that reaches the device's thread just before
                    // it starts to wait is lost, so it is sent again every
                    // few milliseconds until the answer comes.
                    if let Some(file) = file {
                        self.interrupt(file, id);
                        // The channel is not kept after this: its timeout
                        // stays set.
                        interrupted = true;
                        let _ = rustix::net::sockopt::set_socket_timeout(
                            channel,
                            rustix::net::sockopt::Timeout::Recv,
                            Some(INTERRUPT_REPEAT),
                        );
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Only after an interrupt (the channel has no timeout
                    // before one): repeat it.
                    if let Some(file) = file {
                        self.interrupt(file, id);
                    }
                    continue;
                }
                Err(_) => return Conversation::Interrupted(Err(Errno::ENODEV)),
            };
            answered = true;
            let Some((call, op)) = Call::parse(&message.bytes) else {
                return Conversation::Interrupted(Err(Errno::EIO));
            };
            let len = usize::try_from(call.len).unwrap_or(usize::MAX);
            let answer = |status: i32, value: i64, payload: &[u8], fd: Option<BorrowedFd<'_>>| {
                let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
                protocol::send(
                    channel,
                    Answer::new(status, value).as_bytes(),
                    payload,
                    &fds,
                )
                .is_ok()
            };
            let sent = match op {
                CallOp::Read if len <= MAX_PAYLOAD_BYTES => {
                    let mut data = vec![0u8; len];
                    match own.read(&mut data, call.address) {
                        Ok(()) => answer(0, 0, &data, None),
                        Err(_) => answer(libc::EFAULT, 0, &[], None),
                    }
                }
                CallOp::Write => {
                    let data = message.payload::<Call>();
                    let status = match own.write(call.address, data) {
                        Ok(()) => 0,
                        Err(_) => libc::EFAULT,
                    };
                    answer(status, 0, &[], None)
                }
                CallOp::TakeFd => {
                    let fd = i32::try_from(call.value)
                        .ok()
                        .and_then(uaccess::dup_user_fd);
                    match fd {
                        Some(fd) => answer(0, 0, &[], Some(fd.as_fd())),
                        None => answer(libc::EBADF, 0, &[], None),
                    }
                }
                CallOp::InstallFd => {
                    let mut fds = message.fds;
                    match fds.pop() {
                        Some(fd) => {
                            if call.len == 0 {
                                let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty());
                            }
                            answer(0, i64::from(fd.into_raw_fd()), &[], None)
                        }
                        None => answer(libc::EMFILE, 0, &[], None),
                    }
                }
                CallOp::Done => {
                    if let Some(address) = copy_out {
                        let data = message.payload::<Call>();
                        if !data.is_empty() && own.write(address, data).is_err() {
                            return ended(Err(Errno::EFAULT), interrupted);
                        }
                    }
                    if call.value < 0 {
                        let errno = Errno(i32::try_from(-call.value).unwrap_or(libc::EIO));
                        return ended(Err(errno), interrupted);
                    }
                    let payload = message.payload::<Call>().to_vec();
                    let mut fds = message.fds;
                    let reply = Reply {
                        value: call.value,
                        fd: fds.pop(),
                        payload,
                    };
                    return ended(Ok(reply), interrupted);
                }
                CallOp::Read => answer(libc::EFAULT, 0, &[], None),
            };
            if !sent {
                return Conversation::Interrupted(Err(Errno::ENODEV));
            }
        }
    }
}

/// How a call's conversation on its channel ended.
enum Conversation {
    /// With the call's result; the channel can carry another call.
    Ended(Result<Reply, Errno>),
    /// With a result, but the channel is spent (a signal interrupted the
    /// wait, or the device went away mid-call).
    Interrupted(Result<Reply, Errno>),
    /// The device closed the channel before it ran the call.
    Unanswered,
}

/// The variables of this process's environment a device it starts takes
/// (see [`Client::open`]'s starter).
pub fn device_environment() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    const KEPT: [&str; 5] = ["RUST_LOG", "PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR"];
    std::env::vars_os()
        .filter(|(name, _)| {
            name.to_str()
                .is_some_and(|name| name.starts_with("AGX_") || KEPT.contains(&name))
        })
        .collect()
}

/// Reads `pipe` until its end (or, with `one_line`, a newline) within
/// `timeout`: what was read, or `None` if the time ran out first.
pub fn read_within(
    pipe: impl AsFd,
    timeout: Duration,
    one_line: bool,
) -> io::Result<Option<Vec<u8>>> {
    use rustix::event::{poll, PollFd, PollFlags};
    let deadline = Instant::now() + timeout;
    let mut read = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        if one_line && read.contains(&b'\n') {
            return Ok(Some(read));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let left = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&pipe, PollFlags::IN)];
        match poll(&mut fds, Some(&left)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match rustix::io::read(&pipe, &mut buffer) {
            Ok(0) => return Ok(Some(read)),
            Ok(n) => read.extend_from_slice(&buffer[..n]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Connects to the device's socket at `path`, checking that the device is
/// this user's (the directory is private, but `AGX_SIM_DEVICE_DIR` can
/// name any).
fn connect(path: &Path) -> io::Result<OwnedFd> {
    let socket = connect_to(&rustix::net::SocketAddrUnix::new(path)?)?;
    let peer = crate::peer::credentials(socket.as_fd())?;
    if peer.uid != rustix::process::getuid().as_raw() {
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    Ok(socket)
}

/// Connects a new socket to `address`.
fn connect_to(address: &rustix::net::SocketAddrUnix) -> io::Result<OwnedFd> {
    let socket = protocol::seqpacket_socket()?;
    loop {
        match rustix::net::connect(&socket, address) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(()) => return Ok(socket),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agx_uapi::drm::{
        DRM_IOCTL_GET_CAP, DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, DRM_IOCTL_SYNCOBJ_WAIT,
    };

    #[test]
    fn calls_a_signal_interrupts_block_at_once_and_others_poll_first() {
        for wait in [DRM_IOCTL_SYNCOBJ_WAIT, DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT] {
            assert_eq!(answer_spin(Op::Ioctl, u64::from(wait)), Duration::ZERO);
        }
        assert_eq!(
            answer_spin(Op::Ioctl, u64::from(DRM_IOCTL_GET_CAP)),
            ANSWER_SPIN
        );
        // The same number as another operation's argument is not a wait.
        assert_eq!(
            answer_spin(Op::Query, u64::from(DRM_IOCTL_SYNCOBJ_WAIT)),
            ANSWER_SPIN
        );
    }
}
