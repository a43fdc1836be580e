//! The device-process mode: DRM files that live in the shared device
//! process (`agx-simd`), reached through `agx_simd::client`.
//!
//! A DRM file's descriptor is a socket connected to the device's socket
//! for its node, so this module keeps no table of them: any descriptor
//! whose peer is the device's socket is a DRM file, however this process
//! came to hold it (`open`, `dup`, inherited across `fork` or `exec`,
//! received over a socket), and so is one whose peer is a node's socket
//! in another directory, of a device running as this user or root (a file
//! inherited across a change of user and `exec`). The only state is the access mode of the
//! files opened or duplicated here, which `write` consults before the
//! bytes would reach the device (a DRM file refuses writes).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use agx_simd::client::Client;

use crate::interpose::{fail, log};
use crate::tree::{self, Node, NodeKind};

/// The device-process mode's state.
pub(crate) struct Remote {
    client: Client,
    /// Devices of other directories whose DRM files this process holds:
    /// a file inherited across a change of user and `exec` belongs to the
    /// old user's device, while the new image looks for its own user's.
    /// Set once each, without a lock (calls may come from signal
    /// handlers); a process holding files of more devices than this
    /// cannot use the rest.
    foreign: [OnceLock<Client>; FOREIGN_DEVICES],
    /// Access modes of DRM files opened or duplicated in this process.
    modes: Mutex<HashMap<c_int, c_int>>,
}

/// A DRM file's socket (device, inode), and the device it belongs to.
pub(crate) struct FileIdentity<'a> {
    device: &'a Client,
    socket: (u64, u64),
}

/// How many other directories' devices a process can reach files of.
const FOREIGN_DEVICES: usize = 4;

/// The state, made on first use (it only reads the environment).
pub(crate) fn remote() -> &'static Remote {
    static REMOTE: OnceLock<Remote> = OnceLock::new();
    REMOTE.get_or_init(|| {
        // A child forked while another thread held `modes` must not wait
        // for it (`lock_map`).
        crate::register_fork_handler();
        Remote {
            client: Client::new(agx_simd::protocol::device_dir(), device_program),
            foreign: std::array::from_fn(|_| OnceLock::new()),
            modes: Mutex::new(HashMap::new()),
        }
    })
}

/// `agx-simd` beside this library (or, for a library in cargo's `deps/`,
/// in the directory above, where cargo puts the programs it builds).
fn device_program() -> Option<PathBuf> {
    // SAFETY: a zeroed Dl_info is a valid out-buffer; dladdr reads the
    // address of a function of this library.
    let library = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let address = device_program as fn() -> Option<PathBuf> as *const c_void;
        if libc::dladdr(address, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(info.dli_fname)
            .to_str()
            .ok()?
            .to_owned()
    };
    let dir = std::path::Path::new(&library).parent()?;
    let beside = dir.join("agx-simd");
    if beside.exists() {
        return Some(beside);
    }
    (dir.file_name()? == "deps").then(|| dir.parent().map(|up| up.join("agx-simd")))?
}

/// The caller's descriptor `fd`, borrowed for one call.
fn borrow(fd: c_int) -> Option<BorrowedFd<'static>> {
    // SAFETY: the number is the caller's and is only passed to system
    // calls, which fail with EBADF if it is not open (or reach whatever
    // file has the number if another thread reuses it meanwhile, as the
    // caller's own call would); -1 is never borrowed.
    (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
}

fn node(kind: NodeKind) -> &'static Node {
    match kind {
        NodeKind::Primary => &tree::CARD,
        NodeKind::Render => &tree::RENDER,
    }
}

impl Remote {
    /// The device directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        self.client.dir()
    }

    fn modes(&self, wait: bool) -> Option<std::sync::MutexGuard<'_, HashMap<c_int, c_int>>> {
        crate::lock_map(&self.modes, wait)
    }

    /// The node DRM file `fd` was opened through, if it is one.
    pub(crate) fn node_of(&self, fd: c_int) -> Option<&'static Node> {
        Some(node(self.device_of(borrow(fd)?)?.1))
    }

    /// The device DRM file `file` belongs to, and the node it was opened
    /// through, if it is one: this directory's device, or another's whose
    /// process runs as this process's user or as root (a file inherited
    /// from before a change of user; any other user's socket named as a
    /// node is not trusted with this process's calls, whose arguments a
    /// device reads and writes).
    fn device_of(&self, file: BorrowedFd<'_>) -> Option<(&Client, NodeKind)> {
        if let Some(node) = self.client.node_of(file) {
            return Some((&self.client, node));
        }
        let (dir, node) = agx_simd::protocol::device_of_peer(file)?;
        let device = agx_simd::peer::credentials(file).ok()?;
        // SAFETY: getuid and geteuid have no preconditions and cannot fail.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        let trusted = device.uid == 0 || device.uid == uid || device.uid == euid;
        if !trusted {
            return None;
        }
        for slot in &self.foreign {
            let client = slot.get_or_init(|| Client::new(dir.clone(), || None));
            if client.dir() == dir {
                return Some((client, node));
            }
        }
        None
    }

    /// Opens a DRM file through `node` on the device process.
    pub(crate) fn open(&self, node: &'static Node, flags: c_int) -> c_int {
        // drm_open_helper: a DRM node cannot be opened exclusively.
        if flags & libc::O_EXCL != 0 {
            return fail(libc::EBUSY, -1);
        }
        match self.client.open(node.kind, flags) {
            Ok(socket) => {
                let fd = socket.into_raw_fd();
                if let Some(mut modes) = self.modes(true) {
                    modes.insert(fd, flags & libc::O_ACCMODE);
                }
                fd
            }
            Err(error) => {
                static LOGGED: std::sync::Once = std::sync::Once::new();
                if matches!(error, agx_simd::client::OpenError::NotStarted { .. }) {
                    LOGGED.call_once(|| log(&format!("agx-shim: {error}\n")));
                }
                fail(error.errno(), -1)
            }
        }
    }

    /// `ioctl` on `fd` if it is a DRM file (`None` if not).
    pub(crate) fn ioctl(&self, fd: c_int, request: u64, arg: u64) -> Option<c_int> {
        let file = borrow(fd)?;
        let (client, _) = self.device_of(file)?;
        Some(match client.ioctl(file, request, arg) {
            Ok(result) => result,
            Err(errno) => fail(errno.0, -1),
        })
    }

    /// `mmap` of DRM file `fd` (`None` if it is not one): the object's
    /// memfd from the device, mapped as the caller asked.
    pub(crate) fn mmap(
        &self,
        fd: c_int,
        map: impl FnOnce(c_int, libc::off_t) -> *mut c_void,
        (len, prot, flags): (libc::size_t, c_int, c_int),
        offset: libc::off_t,
    ) -> Option<*mut c_void> {
        let file = borrow(fd)?;
        let (client, _) = self.device_of(file)?;
        if let Some(errno) = self
            .access_mode_of(fd, true)
            .and_then(|mode| crate::interpose::mmap_access_refusal(mode, prot, flags))
        {
            return Some(fail(errno, libc::MAP_FAILED));
        }
        let (memfd, within) = match client.mmap(file, offset as u64, len as u64) {
            Ok(found) => found,
            Err(errno) => return Some(fail(errno.0, libc::MAP_FAILED)),
        };
        let Ok(within) = libc::off_t::try_from(within) else {
            return Some(fail(libc::EINVAL, libc::MAP_FAILED));
        };
        let mapped = map(memfd.as_raw_fd(), within);
        // The mapping holds the memfd; closing our descriptor must not
        // change the errno a failed mapping set.
        let errno = crate::interpose::errno();
        drop(memfd);
        Some(fail(errno, mapped))
    }

    /// The access mode of DRM file `fd` (`wait`: as `lock_map`), from
    /// this process's record or else the device.
    pub(crate) fn access_mode_of(&self, fd: c_int, wait: bool) -> Option<c_int> {
        if let Some(&mode) = self.modes(wait)?.get(&fd) {
            return self.node_of(fd).map(|_| mode);
        }
        if !wait {
            return None;
        }
        self.fdinfo(fd).map(|(mode, _)| mode)
    }

    /// DRM file `fd`'s access mode and its fdinfo lines.
    pub(crate) fn fdinfo(&self, fd: c_int) -> Option<(c_int, String)> {
        let file = borrow(fd)?;
        let (client, _) = self.device_of(file)?;
        client.query(file).ok()
    }

    /// An ioctl on `fd` if it is a sync file or a PRIME buffer of the
    /// device (`None` if not).
    pub(crate) fn exported_file_ioctl(&self, fd: c_int, request: u64, arg: u64) -> Option<c_int> {
        let file = borrow(fd)?;
        match self.client.file_ioctl(file, request, arg) {
            Ok(result) => Some(result),
            Err(errno) if errno == agx_kmd::Errno::ENOTTY || errno == agx_kmd::Errno::ENODEV => {
                None
            }
            Err(errno) => Some(fail(errno.0, -1)),
        }
    }

    /// What a `write` to `fd` fails with before it is made, if `fd` is a
    /// DRM file opened or duplicated here (`EINVAL`, or `EBADF` if it was
    /// opened read-only). Never waits: `write` may be called from a signal
    /// handler.
    pub(crate) fn write_refusal(&self, fd: c_int) -> Option<c_int> {
        let mode = *self.modes(false)?.get(&fd)?;
        self.node_of(fd)?;
        Some(if mode == libc::O_RDONLY {
            libc::EBADF
        } else {
            libc::EINVAL
        })
    }

    /// The identity of DRM file `fd`'s socket, with its device, if it is
    /// one (for [`Remote::closed`]).
    pub(crate) fn identity(&self, fd: c_int) -> Option<FileIdentity<'_>> {
        let (device, _) = self.device_of(borrow(fd)?)?;
        Some(FileIdentity {
            device,
            socket: crate::interpose::real_identity(fd)?,
        })
    }

    /// A descriptor of the DRM file `closed` was closed: returns once the
    /// device has released the file if it was the last.
    pub(crate) fn closed(&self, closed: FileIdentity<'_>) {
        closed.device.closed(closed.socket);
    }

    /// `fd` was closed.
    pub(crate) fn forget(&self, fd: c_int) {
        if let Some(mut modes) = self.modes(true) {
            modes.remove(&fd);
        }
    }

    /// `new` is a duplicate of `old`.
    pub(crate) fn duplicated(&self, old: c_int, new: c_int) {
        if let Some(mut modes) = self.modes(true) {
            if let Some(&mode) = modes.get(&old) {
                modes.insert(new, mode);
            }
        }
    }
}
