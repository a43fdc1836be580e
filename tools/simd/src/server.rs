//! The device process: one simulated AGX system whose DRM files clients in
//! any number of processes hold (the protocol is in [`crate::protocol`]).
//!
//! Each socket has a thread accepting connections from processes of this
//! user (checked with `SO_PEERCRED`); a connection that opens a file has a
//! thread only for the open (one thread waits for every open file's close,
//! in an epoll set), and each call channel a thread running its calls one
//! after another, with the caller's memory and
//! descriptors reached through the channel
//! ([`agx_kmd::uaccess::UserSpace`]). A call that blocks (a syncobj wait)
//! holds up only its own channel: the caller's other threads make their
//! calls on channels of their own. The file
//! closes when its connection does: when the last process holding it
//! closes it or dies. A device started by a client exits once it has had
//! no connection for the idle time it was given.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agx_kmd::auth::Caller;
use agx_kmd::mem::backing::Inode;
use agx_kmd::uaccess::{Fault, InstallError, UserSpace};
use agx_kmd::{Errno, File};
use agx_sim::{NodeKind, System, SystemConfig};
use zerocopy::IntoBytes;

use crate::protocol::{
    self, Answer, Call, CallOp, DirError, Message, Op, Request, MAX_PAYLOAD_BYTES,
};
use crate::signal::Running;

/// How to run the device.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where its sockets go.
    pub dir: PathBuf,
    /// Exit after this long without a connection (`None`: never).
    pub idle_exit: Option<Duration>,
    /// The simulated system.
    pub config: SystemConfig,
    /// The call channels (each a device thread) one client process may
    /// have at once; past it a new channel is closed unanswered and the
    /// client makes its call on one it gives back.
    pub client_channel_limit: usize,
}

/// The call channels one client process may have at once by default: a
/// channel is a device thread, and a client has one per thread calling at
/// once (and keeps up to eight idle).
pub const CLIENT_CHANNEL_LIMIT: usize = 256;

/// How long a channel's thread polls for the client's next call before it
/// blocks (see [`protocol::recv_spinning`]), while calls come at most this
/// far apart: Mesa's calls come in bursts.
const NEXT_CALL_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Why the device could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The directory is not usable.
    #[error(transparent)]
    Dir(#[from] DirError),
    /// Another device process serves the directory.
    #[error("a device process already serves {dir}")]
    AlreadyRunning {
        /// The directory.
        dir: PathBuf,
    },
    /// The simulated GPU did not probe.
    #[error("the simulated GPU did not probe: {0}")]
    Probe(#[from] agx_sim::ProbeError),
    /// A socket or the lock could not be set up.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ServeError + 'a {
    move |source| ServeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Connections open now (and whether the device has decided to exit),
/// and a wakeup when that changes.
#[derive(Debug, Default)]
struct Live {
    state: Mutex<LiveState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct LiveState {
    count: usize,
    exiting: bool,
}

impl Live {
    fn state(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new connection; `None` once the device is exiting (the
    /// connection is then dropped unanswered, and its client starts a
    /// new device).
    fn enter(self: &Arc<Self>) -> Option<LiveGuard> {
        let mut state = self.state();
        if state.exiting {
            return None;
        }
        state.count += 1;
        // Only the idle watcher waits, and only for the count to leave or
        // reach 0: waking it on every call would cost each call two
        // context switches.
        if state.count == 1 {
            self.changed.notify_all();
        }
        Some(LiveGuard(Arc::clone(self)))
    }

    /// Returns once there has been no connection for `idle`, having
    /// marked the device as exiting (in the same critical section, so no
    /// connection is served after the decision).
    fn wait_idle(&self, idle: Duration) {
        let mut state = self.state();
        loop {
            while state.count > 0 {
                state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            let (after, timeout) = self
                .changed
                .wait_timeout_while(state, idle, |state| state.count == 0)
                .unwrap_or_else(|e| e.into_inner());
            state = after;
            if timeout.timed_out() {
                state.exiting = true;
                return;
            }
        }
    }
}

struct LiveGuard(Arc<Live>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.count -= 1;
        if state.count == 0 {
            self.0.changed.notify_all();
        }
    }
}

/// Runs the device in `options.dir` until it has been idle for
/// `options.idle_exit` (forever without). `ready` is called once the
/// sockets accept connections, or with the reason they never will.
pub fn serve(
    options: Options,
    ready: impl FnOnce(Result<(), &ServeError>),
) -> Result<(), ServeError> {
    match start(&options) {
        Ok(started) => {
            ready(Ok(()));
            started.run(options.idle_exit);
            Ok(())
        }
        Err(error) => {
            ready(Err(&error));
            Err(error)
        }
    }
}

struct Started {
    server: Arc<Server>,
    listeners: Vec<Listener>,
    _lock: std::fs::File,
}

/// A socket the device accepts connections on.
struct Listener {
    /// A node's socket, or (`None`) a calls socket.
    node: Option<NodeKind>,
    /// Its path, or its abstract name for the log.
    name: PathBuf,
    socket: OwnedFd,
    /// Whether processes of other users may connect (the abstract calls
    /// socket, whose calls must carry the file they are on).
    any_user: bool,
}

fn start(options: &Options) -> Result<Started, ServeError> {
    let dir = &options.dir;
    protocol::ensure_private_dir(dir)?;
    let lock = take_lock(dir)?;
    let descriptors = raise_soft_limits();
    let config = SystemConfig {
        keep_object_descriptors: true,
        // One client's objects may take a quarter of the device's
        // descriptors, so that one client alone cannot exhaust them, and
        // all clients' objects together three quarters, so that the
        // device keeps descriptors for its files, call channels and slabs.
        client_descriptor_limit: options.config.client_descriptor_limit.min(descriptors / 4),
        device_descriptor_limit: options
            .config
            .device_descriptor_limit
            .min(descriptors - descriptors / 4),
        ..options.config
    };
    let system = Arc::new(System::new(config)?);
    crate::signal::install_interrupt_handler()
        .map_err(io_error("installing the interrupt handler in", dir))?;
    let mut listeners = Vec::new();
    for node in [Some(NodeKind::Primary), Some(NodeKind::Render), None] {
        let path = match node {
            Some(node) => protocol::socket_path(dir, node),
            None => protocol::calls_path(dir),
        };
        listeners.push(Listener {
            node,
            name: path.clone(),
            socket: listen(&path)?,
            any_user: false,
        });
    }
    // Without it (the name is taken), calls from processes that left the
    // device's user fail with ENODEV; nothing else does.
    let name = protocol::calls_abstract_name(dir);
    match listen_abstract(&name) {
        Ok(socket) => listeners.push(Listener {
            node: None,
            name: PathBuf::from(format!("@{}", String::from_utf8_lossy(&name))),
            socket,
            any_user: true,
        }),
        Err(error) => tracing::warn!(
            %error,
            name = %String::from_utf8_lossy(&name),
            "device: cannot listen on the abstract calls socket"
        ),
    }
    let server = Arc::new(Server {
        system,
        files: Mutex::new(HashMap::new()),
        hangups: Hangups::new().map_err(io_error("waiting for hangups in", dir))?,
        channels: Mutex::new(HashMap::new()),
        client_channel_limit: options.client_channel_limit.max(1),
    });
    {
        let server = Arc::clone(&server);
        std::thread::Builder::new()
            .name("agx-simd-hangups".into())
            .spawn(move || server.close_hung_up_files())
            .map_err(io_error("starting the hangup thread in", dir))?;
    }
    Ok(Started {
        server,
        listeners,
        _lock: lock,
    })
}

/// Raises the soft resource limits to the hard ones, and returns the
/// descriptor limit the device then runs with. The device serves every
/// client, but whoever started it passed on its own soft limits: a test
/// harness's `ulimit -S -v` (the simulated RAM alone is a window of
/// gigabytes) or `-f`, a low descriptor limit (the device keeps a
/// descriptor of every exportable object's memfd and of every slab). A
/// hard limit the starter lowered stays: an unprivileged process cannot
/// raise it. The core-file size and the scheduling limits are left as
/// they are.
fn raise_soft_limits() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    for resource in [
        Resource::Nofile,
        Resource::As,
        Resource::Data,
        Resource::Stack,
        Resource::Fsize,
        Resource::Cpu,
        Resource::Nproc,
        Resource::Memlock,
        Resource::Sigpending,
        Resource::Msgqueue,
        Resource::Locks,
    ] {
        let limit = getrlimit(resource);
        if limit.current != limit.maximum {
            let raised = rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if let Err(error) = setrlimit(resource, raised) {
                tracing::warn!(%error, ?resource, "device: cannot raise a soft limit");
            }
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The directory's lock, held for the device's life: one device per
/// directory. Another device starting at the same time waits a little
/// for it, in case the holder is on its way out.
fn take_lock(dir: &Path) -> Result<std::fs::File, ServeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_error("opening", &path))?;
    for _ in 0..100 {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(io_error("locking", &path)(e.into())),
        }
    }
    Err(ServeError::AlreadyRunning {
        dir: dir.to_path_buf(),
    })
}

fn listen(path: &Path) -> Result<OwnedFd, ServeError> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("removing the stale socket", path)(e)),
    }
    let socket =
        protocol::seqpacket_socket().map_err(|e| io_error("creating a socket for", path)(e))?;
    let address = rustix::net::SocketAddrUnix::new(path)
        .map_err(|e| io_error("naming a socket", path)(e.into()))?;
    rustix::net::bind(&socket, &address).map_err(|e| io_error("binding", path)(e.into()))?;
    // The directory is private already; the socket is too.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_error("restricting", path))?;
    rustix::net::listen(&socket, 128).map_err(|e| io_error("listening on", path)(e.into()))?;
    Ok(socket)
}

/// Listens on the abstract socket `name`.
fn listen_abstract(name: &[u8]) -> io::Result<OwnedFd> {
    let socket = protocol::seqpacket_socket()?;
    let address = rustix::net::SocketAddrUnix::new_abstract_name(name)?;
    rustix::net::bind(&socket, &address)?;
    rustix::net::listen(&socket, 128)?;
    Ok(socket)
}

impl Started {
    fn run(self, idle_exit: Option<Duration>) {
        let live = Arc::new(Live::default());
        let server = self.server;
        let mut paths = Vec::new();
        for listener in self.listeners {
            let server = Arc::clone(&server);
            let live = Arc::clone(&live);
            tracing::info!(path = %listener.name.display(), "device: listening");
            if !listener.any_user {
                paths.push(listener.name.clone());
            }
            std::thread::spawn(move || accept_loop(&server, &listener, &live));
        }
        match idle_exit {
            Some(idle) => live.wait_idle(idle),
            None => loop {
                std::thread::park();
            },
        }
        tracing::info!("device: idle, exiting");
        for path in paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn accept_loop(server: &Arc<Server>, listener: &Listener, live: &Arc<Live>) {
    let uid = rustix::process::getuid();
    let node = listener.node;
    loop {
        let socket =
            match rustix::net::accept_with(&listener.socket, rustix::net::SocketFlags::CLOEXEC) {
                Ok(socket) => socket,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "device: accept failed");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
        let peer = match crate::peer::credentials(socket.as_fd()) {
            Ok(peer) => peer,
            Err(e) => {
                tracing::warn!(error = %e, "device: refused a connection without credentials");
                continue;
            }
        };
        let Some(pid) = peer.pid else {
            tracing::warn!(
                uid = peer.uid,
                "device: refused a connection from a process outside its pid namespace"
            );
            continue;
        };
        if peer.uid != uid.as_raw() && !listener.any_user {
            tracing::warn!(
                pid,
                uid = peer.uid,
                "device: refused a connection from another user"
            );
            continue;
        }
        let own_user = peer.uid == uid.as_raw();
        // A call channel is a thread for as long as the client keeps it:
        // past its limit the channel is closed unanswered, and the client
        // makes the call on a channel another of its calls gives back.
        let slot = match node {
            Some(_) => None,
            None => match server.channel_slot(pid) {
                Some(slot) => Some(slot),
                None => {
                    tracing::warn!(
                        pid,
                        limit = server.client_channel_limit,
                        "device: refused a call channel: the client has its limit of them"
                    );
                    continue;
                }
            },
        };
        let Some(guard) = live.enter() else {
            continue;
        };
        let server = Arc::clone(server);
        let live = Arc::clone(live);
        let spawned = std::thread::Builder::new()
            .name("agx-simd-conn".into())
            .spawn(move || {
                server.serve_connection(node, socket, (pid, own_user), guard, &live);
                drop(slot);
            });
        if let Err(error) = spawned {
            // The connection (moved into the closure) is dropped: its
            // client sees the device hang up and fails the call.
            tracing::error!(%error, pid, "device: no thread for a connection");
        }
    }
}

/// The device's state shared by its threads.
struct Server {
    system: Arc<System>,
    /// Open DRM files, by the identity of the client's end of their
    /// socket (which a request carries).
    files: Mutex<HashMap<Inode, Entry>>,
    /// Waits for every open file's hangup: one thread for all files, so
    /// that an open file costs the device no thread.
    hangups: Hangups,
    /// Call channels by client process, against the limit.
    channels: Mutex<HashMap<u32, usize>>,
    client_channel_limit: usize,
}

/// One of a client's call channels, counted while its thread serves it.
struct ChannelSlot {
    server: Arc<Server>,
    pid: u32,
}

impl Server {
    /// A channel slot for client `pid`, if it has fewer than its limit.
    fn channel_slot(self: &Arc<Self>, pid: u32) -> Option<ChannelSlot> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let count = channels.entry(pid).or_insert(0);
        if *count >= self.client_channel_limit {
            return None;
        }
        *count += 1;
        Some(ChannelSlot {
            server: Arc::clone(self),
            pid,
        })
    }
}

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        let mut channels = self
            .server
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = channels.get_mut(&self.pid) {
            *count -= 1;
            if *count == 0 {
                channels.remove(&self.pid);
            }
        }
    }
}

/// The open files whose hangup (their last client descriptor closed) the
/// device waits for, in one epoll set.
struct Hangups {
    epoll: OwnedFd,
    watched: Mutex<HashMap<u64, Watched>>,
    next_token: std::sync::atomic::AtomicU64,
}

/// A file waiting for its hangup, with what closing it needs.
struct Watched {
    inode: Inode,
    open: Arc<OpenFile>,
    socket: Arc<OwnedFd>,
    /// An open file keeps the device from exiting idle.
    _live: LiveGuard,
}

impl Hangups {
    fn new() -> io::Result<Hangups> {
        Ok(Hangups {
            epoll: rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)?,
            watched: Mutex::new(HashMap::new()),
            next_token: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A DRM file a connection opened.
struct OpenFile {
    /// The file (taken when this drops, before `released` is set).
    file: Option<File>,
    /// The access mode it was opened with.
    access_mode: i32,
    running: Running,
    released: Arc<Released>,
}

impl OpenFile {
    fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("the file lives as long as its OpenFile")
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        drop(self.file.take());
        self.released.set();
    }
}

/// Set once a DRM file is released (every reference gone, the kmd's
/// file dropped).
#[derive(Debug, Default)]
struct Released {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Released {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    /// Waits (at most `limit`) for the release.
    fn wait(&self, limit: Duration) {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .changed
            .wait_timeout_while(done, limit, |done| !*done)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// What the device keeps of an open file, by its client end's identity.
struct Entry {
    open: Arc<OpenFile>,
    /// The device's end of the file's socket.
    socket: Arc<OwnedFd>,
}

fn identity(fd: BorrowedFd<'_>) -> Option<Inode> {
    agx_kmd::export::inode_of(fd).ok()
}

impl Server {
    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<Inode, Entry>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The DRM file a request's attached descriptor is.
    fn file_of(&self, fd: Option<&OwnedFd>) -> Option<Arc<OpenFile>> {
        let inode = identity(fd?.as_fd())?;
        self.files()
            .get(&inode)
            .map(|entry| Arc::clone(&entry.open))
    }

    /// Serves a connection to `node`'s socket (`None`: the calls socket),
    /// counted live by `guard` while it holds a file open or runs a call.
    fn serve_connection(
        &self,
        node: Option<NodeKind>,
        socket: OwnedFd,
        (pid, own_user): (u32, bool),
        guard: LiveGuard,
        live: &Arc<Live>,
    ) {
        // A connection says what it is for at once.
        let timeout = |t| {
            rustix::net::sockopt::set_socket_timeout(
                &socket,
                rustix::net::sockopt::Timeout::Recv,
                t,
            )
        };
        let _ = timeout(Some(Duration::from_secs(10)));
        let Ok(Some(first)) = protocol::recv_retrying(socket.as_fd()) else {
            return;
        };
        let _ = timeout(None);
        let Some((request, op)) = Request::parse(&first.bytes) else {
            tracing::warn!(pid, "device: a connection that sent no request");
            return;
        };
        match (node, op) {
            (Some(node), Op::Open) => {
                let attached = first.fds.into_iter().next();
                self.open(node, socket, pid, request, attached, guard);
            }
            (Some(_), _) | (None, Op::Open) => tracing::warn!(
                pid,
                ?op,
                "device: a request on the wrong socket (opens go to a node's, calls to `calls`)"
            ),
            (None, _) => self.serve_calls(Rc::new(socket), (pid, own_user), first, guard, live),
        }
    }

    /// Serves the calls a client makes on a channel, one after another,
    /// starting with `first`, until the client closes it. The channel
    /// counts as live only while it runs a call: a client keeps its idle
    /// channels, and they must not keep an idle device from exiting.
    /// A channel of another user (`own_user` false: the abstract socket)
    /// is served only calls that carry the file they are on.
    fn serve_calls(
        &self,
        channel: Rc<OwnedFd>,
        (pid, own_user): (u32, bool),
        first: Message,
        guard: LiveGuard,
        live: &Arc<Live>,
    ) {
        let mut message = first;
        let mut guard = Some(guard);
        // Polling pays while calls come close together; after a gap longer
        // than the poll, the channel blocks at once until they do again.
        let mut spin = NEXT_CALL_SPIN;
        let mut buffer = protocol::RecvBuffer::new();
        loop {
            let Some((request, op)) = Request::parse(&message.bytes) else {
                tracing::warn!(pid, "device: a call channel that sent no request");
                return;
            };
            let attached = std::mem::take(&mut message.fds).into_iter().next();
            if op == Op::Open {
                tracing::warn!(pid, "device: an open on the calls socket");
                return;
            }
            if !own_user && matches!(op, Op::Closed) {
                // Names a file by number, not by descriptor: not for
                // another user (its close is then asynchronous).
                send_done(&channel, Done::of(Err(Errno::EPERM)));
                return;
            }
            let argument = message.payload::<Request>().to_vec();
            self.call(&channel, pid, (request, argument), op, attached);
            drop(guard.take());
            let waiting = std::time::Instant::now();
            message = match protocol::recv_spinning(channel.as_fd(), spin, Some(&mut buffer)) {
                Ok(Some(message)) => message,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    match protocol::recv_retrying(channel.as_fd()) {
                        Ok(Some(message)) => message,
                        _ => return,
                    }
                }
                _ => return,
            };
            spin = if waiting.elapsed() <= NEXT_CALL_SPIN {
                NEXT_CALL_SPIN
            } else {
                std::time::Duration::ZERO
            };
            // An exiting device answers no more: the client's next call
            // sees the channel close unanswered.
            guard = Some(match live.enter() {
                Some(guard) => guard,
                None => return,
            });
        }
    }

    /// Serves a call on a calls channel: `request`, with the bytes of an
    /// ioctl's argument the client sent along (see [`Remote`]).
    fn call(
        &self,
        channel: &Rc<OwnedFd>,
        pid: u32,
        (request, argument): (Request, Vec<u8>),
        op: Op,
        attached: Option<OwnedFd>,
    ) {
        match op {
            Op::Open => {}
            Op::Interrupt => {
                if let Some(open) = self.file_of(attached.as_ref()) {
                    open.running.interrupt(request.a);
                }
            }
            Op::Closed => {
                let found = self.files().get(&(request.a, request.b)).map(|entry| {
                    // Not the file itself: holding it would delay its
                    // release.
                    (Arc::clone(&entry.socket), Arc::clone(&entry.open.released))
                });
                if let Some((file_socket, released)) = found {
                    if hung_up(&file_socket, Some(Duration::ZERO)) {
                        released.wait(Duration::from_secs(5));
                    }
                }
                send_done(channel, Done::of(Ok(0)));
            }
            Op::FileIoctl => {
                let request = (request, Vec::new());
                run_request(&self.system, None, channel, pid, request, op, attached);
            }
            Op::Ioctl | Op::Mmap | Op::Query => {
                match self.file_of(attached.as_ref()) {
                    Some(open) => {
                        // The `Arc` holds the file for the call, as the
                        // kernel's fget does. The client's end is not kept:
                        // if every process closes the file (or dies) during
                        // the call, the device must see it and interrupt
                        // the call.
                        drop(attached);
                        let request = (request, argument);
                        run_request(&self.system, Some(&open), channel, pid, request, op, None);
                    }
                    None => send_done(channel, Done::of(Err(Errno::EBADF))),
                }
            }
        }
    }

    /// Opens a DRM file for the connection `socket`, whose client end
    /// came `attached` (to learn its identity), and serves it until every
    /// process has closed it.
    fn open(
        &self,
        node: NodeKind,
        socket: OwnedFd,
        pid: u32,
        request: Request,
        client_end: Option<OwnedFd>,
        live: LiveGuard,
    ) {
        let Some(inode) = client_end.as_ref().and_then(|fd| identity(fd.as_fd())) else {
            return;
        };
        // Not kept: the file must close when the client's copies do.
        drop(client_end);
        // Nothing the client sends on its DRM file is ever read: refuse
        // descriptors there (a DRM file sent over itself would sit in the
        // device's queue and keep the file open forever), and drop any
        // sent already.
        if let Err(error) = agx_kmd::sync_file::refuse_passed_descriptors(socket.as_fd()) {
            tracing::debug!(%error, "device: the host kernel cannot refuse descriptors on a DRM file");
        }
        protocol::drop_queued(socket.as_fd());
        let caller = Caller {
            tgid: pid,
            tid: request.tid,
            cap_sys_admin: has_cap_sys_admin(pid, request.tid),
        };
        let open = Arc::new(OpenFile {
            file: Some(self.system.open_node_as(node, caller)),
            access_mode: request.flags as i32 & libc::O_ACCMODE,
            running: Running::default(),
            released: Arc::new(Released::default()),
        });
        let id = open.file().client_id();
        let socket = Arc::new(socket);
        {
            let mut files = self.files();
            // A descriptor of a file already open is not this connection's
            // own end: refused, so that no one can take over the routing
            // of another file's calls.
            if files.contains_key(&inode) {
                drop(files);
                tracing::warn!(pid, "device: an open that named another file's descriptor");
                let refused = Answer::new(libc::EINVAL, 0);
                let _ = protocol::send(socket.as_fd(), refused.as_bytes(), &[], &[]);
                return;
            }
            files.insert(
                inode,
                Entry {
                    open: Arc::clone(&open),
                    socket: Arc::clone(&socket),
                },
            );
        }
        tracing::debug!(pid, file = id, ?node, "device: opened");
        if protocol::send(socket.as_fd(), Answer::new(0, 0).as_bytes(), &[], &[]).is_err() {
            self.close(inode, &open);
            return;
        }
        // The connection's thread ends here; the hangup thread closes the
        // file when its last client descriptor goes.
        let token = self
            .hangups
            .next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut watched = self.hangups.watched();
        let added = rustix::event::epoll::add(
            &self.hangups.epoll,
            &*socket,
            rustix::event::epoll::EventData::new_u64(token),
            // None asked for: a hangup or an error is always reported (the
            // client's end may have sent bytes that are never read).
            rustix::event::epoll::EventFlags::empty(),
        );
        match added {
            Ok(()) => {
                watched.insert(
                    token,
                    Watched {
                        inode,
                        open,
                        socket,
                        _live: live,
                    },
                );
            }
            Err(error) => {
                // Without a place in the set (the host's epoll limit), the
                // file keeps this thread and waits here, as before.
                drop(watched);
                tracing::warn!(%error, file = id, "device: a file's hangup waits on a thread of its own");
                hung_up(&socket, None);
                self.close(inode, &open);
            }
        }
    }

    /// Closes the file `open` once no process holds it: forgets it, and
    /// interrupts any request still running there (it has no one to
    /// answer to).
    fn close(&self, inode: Inode, open: &Arc<OpenFile>) {
        {
            let mut files = self.files();
            if files
                .get(&inode)
                .is_some_and(|entry| Arc::ptr_eq(&entry.open, open))
            {
                files.remove(&inode);
            }
        }
        open.running.interrupt_all();
        tracing::debug!(file = open.file().client_id(), "device: closed");
    }

    /// The hangup thread: closes each open file when its socket reports
    /// that every client descriptor of it is gone.
    fn close_hung_up_files(&self) {
        use rustix::event::epoll;
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            events.clear();
            match epoll::wait(
                &self.hangups.epoll,
                rustix::buffer::spare_capacity(&mut events),
                None,
            ) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(error) => {
                    tracing::error!(%error, "device: waiting for hangups failed");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
            for event in &events {
                let token = event.data.u64();
                let Some(watched) = self.hangups.watched().remove(&token) else {
                    continue;
                };
                let _ = epoll::delete(&self.hangups.epoll, &*watched.socket);
                self.close(watched.inode, &watched.open);
            }
        }
    }
}

/// Whether the other end of `socket` is closed in every process, waiting
/// up to `limit` for it (`None`: until it is).
fn hung_up(socket: &OwnedFd, limit: Option<Duration>) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let timeout = limit.map(|limit| Timespec {
        tv_sec: i64::try_from(limit.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(limit.subsec_nanos()),
    });
    loop {
        // No events asked for: only a hangup or an error counts (the
        // client's end may have sent bytes that are never read).
        let mut fds = [PollFd::new(socket, PollFlags::empty())];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return true,
            Ok(_) => {
                return fds[0]
                    .revents()
                    .intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL)
            }
        }
    }
}

/// Whether thread `tid` of process `pid` has `CAP_SYS_ADMIN` in its
/// effective set (capabilities are per thread, and the kernel checks the
/// calling thread's; a `tid` that is not a thread of `pid` has none).
fn has_cap_sys_admin(pid: u32, tid: u32) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// The result a request's `Done` carries.
struct Done {
    /// The result, or `-errno`.
    value: i64,
    fd: Option<OwnedFd>,
    payload: Vec<u8>,
}

impl Done {
    fn of(result: Result<i64, Errno>) -> Done {
        Done {
            value: result.unwrap_or_else(|errno| -i64::from(errno.0)),
            fd: None,
            payload: Vec::new(),
        }
    }
}

fn run_request(
    system: &System,
    open: Option<&OpenFile>,
    channel: &Rc<OwnedFd>,
    caller_pid: u32,
    (request, argument): (Request, Vec<u8>),
    op: Op,
    attached: Option<OwnedFd>,
) {
    let remote = Rc::new(Remote {
        channel: Rc::clone(channel),
        argument: (op == Op::Ioctl).then(|| Argument::new(request.a, request.b, argument)),
    });
    let space: Rc<dyn UserSpace> = Rc::clone(&remote) as Rc<dyn UserSpace>;
    let done = match (op, open) {
        (Op::Ioctl, Some(open)) => {
            let caller = Caller {
                tgid: caller_pid,
                tid: request.tid,
                // Only the card node's checks ask (and a render file's
                // ioctls should not read /proc each time).
                cap_sys_admin: open.file().node() == NodeKind::Primary
                    && has_cap_sys_admin(caller_pid, request.tid),
            };
            let _entered = open.running.enter(request.id);
            let result = agx_kmd::uaccess::with_user_space(space, || {
                open.file().ioctl_as(Some(caller), request.a, request.b)
            });
            Done {
                payload: remote.written_back(),
                ..Done::of(result.map(i64::from))
            }
        }
        (Op::Mmap, Some(open)) => {
            let found = open
                .file()
                .mmap_descriptor(request.a, request.b)
                .and_then(|(fd, within)| Ok((memfd_for(fd, open.access_mode)?, within)));
            match found {
                Ok((fd, within)) => Done {
                    value: i64::try_from(within).unwrap_or(i64::MAX),
                    fd: Some(fd),
                    payload: Vec::new(),
                },
                Err(errno) => Done::of(Err(errno)),
            }
        }
        (Op::Query, Some(open)) => Done {
            value: i64::from(open.access_mode),
            fd: None,
            payload: open.file().fdinfo().into_bytes(),
        },
        (Op::FileIoctl, _) => {
            let result = match attached {
                // A file that is no sync file or buffer of the device:
                // ENOTTY, as Linux for a file without the ioctl.
                Some(file) => agx_kmd::uaccess::with_user_space(space, || {
                    system
                        .device()
                        .exported_file_ioctl(file.as_fd(), request.a, request.b)
                }),
                None => Err(Errno::EBADF),
            };
            Done::of(result.map(i64::from))
        }
        _ => Done::of(Err(Errno::EINVAL)),
    };
    send_done(channel, done);
}

/// The memfd a client with a file opened `access_mode` maps an object
/// through: for a read-only file, the object's memfd reopened read-only,
/// so that the host kernel refuses a writable shared mapping of it with
/// `EACCES` (as Linux's `mmap` does for a DRM file without `FMODE_WRITE`),
/// whatever the client's shim does; for a write-only file, none (`EACCES`:
/// Linux maps only files open for reading).
fn memfd_for(memfd: OwnedFd, access_mode: i32) -> Result<OwnedFd, Errno> {
    match access_mode {
        libc::O_RDONLY => rustix::fs::open(
            format!("/proc/self/fd/{}", memfd.as_raw_fd()),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| {
            tracing::warn!(error = %e, "device: cannot reopen an object's memfd read-only");
            Errno(e.raw_os_error())
        }),
        libc::O_WRONLY => Err(Errno::EACCES),
        _ => Ok(memfd),
    }
}

fn send_done(channel: &OwnedFd, done: Done) {
    let call = Call::new(CallOp::Done, 0, done.payload.len() as u64, done.value);
    let fds: Vec<BorrowedFd<'_>> = done.fd.iter().map(AsFd::as_fd).collect();
    // The caller may be gone; nothing to do then.
    let _ = protocol::send(channel.as_fd(), call.as_bytes(), &done.payload, &fds);
}

/// The user space of a caller in another process, reached through its
/// request's channel.
struct Remote {
    channel: Rc<OwnedFd>,
    /// For an ioctl: its argument struct, as the client sent it along.
    argument: Option<Argument>,
}

/// An ioctl's argument struct, which `drm_ioctl` copies in whole before
/// the handler runs and out whole after it: the client sends the bytes
/// with its request (when its `_IOC_WRITE` bit is set and it could read
/// them), and the device sends the copy-out back with the result, so that
/// a small ioctl costs one round trip, not three.
struct Argument {
    /// Where it is in the caller's memory.
    address: u64,
    /// The bytes the client read there (empty: none sent; reads go to the
    /// client, which faults them as the kernel would). Dropped once the
    /// device writes the client's memory: reads then go to the client.
    sent: std::cell::RefCell<Vec<u8>>,
    /// The `_IOC_READ` size: a write of exactly this many bytes at
    /// `address` is the copy-out, held for the result.
    copy_out_bytes: usize,
    /// The copy-out, once the ioctl made it.
    copied_out: std::cell::RefCell<Option<Vec<u8>>>,
}

impl Argument {
    fn new(request: u64, address: u64, sent: Vec<u8>) -> Argument {
        // Linux's _IOC layout: the size in bits 16-29, the direction in
        // bits 30-31 (_IOC_READ = 2: the kernel writes the argument).
        let size_bytes = ((request >> 16) & 0x3FFF) as usize;
        let copies_out = (request >> 30) & 2 != 0;
        Argument {
            address,
            sent: std::cell::RefCell::new(sent),
            copy_out_bytes: if copies_out { size_bytes } else { 0 },
            copied_out: std::cell::RefCell::new(None),
        }
    }

    /// `buf` filled from the bytes sent, if they cover `address`.
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        let Some(start) = address
            .checked_sub(self.address)
            .and_then(|at| usize::try_from(at).ok())
        else {
            return false;
        };
        match self.sent.borrow().get(start..start + buf.len()) {
            Some(bytes) if !buf.is_empty() => {
                buf.copy_from_slice(bytes);
                true
            }
            _ => false,
        }
    }
}

impl Remote {
    /// The argument's copy-out, to go back with the result.
    fn written_back(&self) -> Vec<u8> {
        self.argument
            .as_ref()
            .and_then(|argument| argument.copied_out.borrow_mut().take())
            .unwrap_or_default()
    }

    /// Sends a held copy-out to the client now: a later write overlaps
    /// it, and must land after it.
    fn flush_copy_out(&self) -> Result<(), Fault> {
        let Some(argument) = &self.argument else {
            return Ok(());
        };
        let held = argument.copied_out.borrow_mut().take();
        match held {
            Some(bytes) => self.write_through(argument.address, &bytes),
            None => Ok(()),
        }
    }
}

impl Remote {
    /// Sends `call` (with `payload` and `fd`) and waits for the answer.
    fn ask(&self, call: Call, payload: &[u8], fd: Option<BorrowedFd<'_>>) -> Option<Message> {
        let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
        protocol::send(self.channel.as_fd(), call.as_bytes(), payload, &fds).ok()?;
        protocol::recv_retrying(self.channel.as_fd()).ok()?
    }

    /// Asks and returns the answer, `None` if the caller failed it or is
    /// gone.
    fn ask_ok(
        &self,
        call: Call,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> Option<(Answer, Message)> {
        let message = self.ask(call, payload, fd)?;
        let answer = Answer::parse(&message.bytes)?;
        (answer.status == 0).then_some((answer, message))
    }
}

impl UserSpace for Remote {
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Fault> {
        // The argument is read from the bytes sent until the device first
        // writes; a read after a held copy-out sees it landed first.
        self.flush_copy_out()?;
        if self
            .argument
            .as_ref()
            .is_some_and(|argument| argument.read(address, buf))
        {
            return Ok(());
        }
        let fault = Fault {
            address,
            len_bytes: buf.len(),
        };
        let mut at = address;
        for chunk in buf.chunks_mut(MAX_PAYLOAD_BYTES) {
            let call = Call::new(CallOp::Read, at, chunk.len() as u64, 0);
            let (_, message) = self.ask_ok(call, &[], None).ok_or(fault)?;
            let data = message.payload::<Answer>();
            if data.len() != chunk.len() {
                return Err(fault);
            }
            chunk.copy_from_slice(data);
            at += chunk.len() as u64;
        }
        Ok(())
    }

    fn write(&self, address: u64, data: &[u8]) -> Result<(), Fault> {
        if let Some(argument) = &self.argument {
            let is_copy_out = address == argument.address
                && !data.is_empty()
                && data.len() == argument.copy_out_bytes;
            if is_copy_out && argument.copied_out.borrow().is_none() {
                *argument.copied_out.borrow_mut() = Some(data.to_vec());
                return Ok(());
            }
            self.flush_copy_out()?;
        }
        self.write_through(address, data)
    }

    fn take_fd(&self, fd: i32) -> Option<OwnedFd> {
        let call = Call::new(CallOp::TakeFd, 0, 0, i64::from(fd));
        let (_, mut message) = self.ask_ok(call, &[], None)?;
        message.fds.pop()
    }

    fn install_fd(&self, fd: OwnedFd) -> Result<i32, InstallError> {
        let cloexec = rustix::io::fcntl_getfd(&fd)
            .is_ok_and(|flags| flags.contains(rustix::io::FdFlags::CLOEXEC));
        let call = Call::new(CallOp::InstallFd, 0, u64::from(cloexec), 0);
        let (answer, _) = self
            .ask_ok(call, &[], Some(fd.as_fd()))
            .ok_or(InstallError::NoDescriptor)?;
        i32::try_from(answer.value).map_err(|_| InstallError::NoDescriptor)
    }
}

impl Remote {
    /// Writes `data` at `address` of the client's memory, through the
    /// channel.
    fn write_through(&self, address: u64, data: &[u8]) -> Result<(), Fault> {
        if let Some(argument) = &self.argument {
            argument.sent.borrow_mut().clear();
        }
        let fault = Fault {
            address,
            len_bytes: data.len(),
        };
        let mut at = address;
        for chunk in data.chunks(MAX_PAYLOAD_BYTES) {
            let call = Call::new(CallOp::Write, at, chunk.len() as u64, 0);
            self.ask_ok(call, chunk, None).ok_or(fault)?;
            at += chunk.len() as u64;
        }
        Ok(())
    }
}
