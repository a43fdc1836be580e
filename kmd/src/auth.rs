//! DRM master and authentication: who may use the primary node's
//! privileged ioctls.
//!
//! A render-only driver still gets a primary node (`card0`) from the DRM
//! core, and with it the legacy access model: the first file opened on the
//! primary node while no master exists becomes DRM master; other primary
//! files share that master object and are unauthenticated (unless their
//! opener has `CAP_SYS_ADMIN`) until the master authenticates them with
//! the magic token GET_MAGIC gave them (AUTH_MAGIC). SET_MASTER and
//! DROP_MASTER move the role, allowed to the process that first became
//! master or to `CAP_SYS_ADMIN`. Render-node files have no master and are
//! never asked for authentication. This module follows `drm_auth.c` and
//! the permission checks of `drm_ioctl_permit` in Linux 6.12.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The kind of DRM node (minor) a file was opened through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// The primary node (`/dev/dri/card0`, minors 0..63): DRM master,
    /// authentication and mode setting live here.
    Primary,
    /// The render node (`/dev/dri/renderD128`, minors 128..191): only
    /// the ioctls marked `DRM_RENDER_ALLOW`.
    Render,
}

/// Who is making a call: what `current` is to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The calling process (thread group) id.
    pub tgid: u32,
    /// The calling thread id.
    pub tid: u32,
    /// Whether the caller has `CAP_SYS_ADMIN`.
    pub cap_sys_admin: bool,
}

impl Caller {
    /// The current thread of this process.
    pub fn current() -> Caller {
        let cap_sys_admin = rustix::thread::capabilities(None).is_ok_and(|sets| {
            sets.effective
                .contains(rustix::thread::CapabilitySet::SYS_ADMIN)
        });
        Caller {
            tgid: std::process::id(),
            tid: rustix::thread::gettid()
                .as_raw_nonzero()
                .get()
                .unsigned_abs(),
            cap_sys_admin,
        }
    }
}

/// The caller of one ioctl, found out only if a check or a handler asks
/// (a render file's ioctls never do, and skip the system calls).
#[derive(Debug)]
pub(crate) struct LazyCaller {
    given: Option<Caller>,
    found: std::cell::OnceCell<Caller>,
}

impl LazyCaller {
    /// `given`, or (`None`) this process's current thread when asked.
    pub(crate) fn new(given: Option<Caller>) -> LazyCaller {
        LazyCaller {
            given,
            found: std::cell::OnceCell::new(),
        }
    }

    pub(crate) fn get(&self) -> Caller {
        *self
            .found
            .get_or_init(|| self.given.unwrap_or_else(Caller::current))
    }
}

/// A DRM master object: the magic tokens handed out under it and the bus
/// id SET_VERSION set.
#[derive(Debug, Default)]
pub(crate) struct Master {
    /// Magic -> the file it was given to; `None` once it authenticated
    /// that file (a token works once).
    magics: Mutex<BTreeMap<u32, Option<Weak<Mutex<FileAuth>>>>>,
    /// The bus id GET_UNIQUE reports, once SET_VERSION asked for 1.1+.
    unique: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device's side: which master object is the current one
/// (`dev->master`), under the lock that serialises master changes
/// (`dev->master_mutex`).
#[derive(Debug, Default)]
pub(crate) struct Masters {
    current: Mutex<Option<Arc<Master>>>,
}

/// A file's side of it.
#[derive(Debug)]
pub(crate) struct FileAuth {
    node: NodeKind,
    /// The master object the file belongs to (primary files only).
    master: Option<Arc<Master>>,
    /// Whether the file holds (or last held) the master role.
    is_master: bool,
    /// Whether the file was ever master: its process keeps the right to
    /// set and drop master without `CAP_SYS_ADMIN`.
    was_master: bool,
    authenticated: bool,
    /// The file's magic token (0: none yet).
    magic: u32,
    /// The process the file belongs to: its opener, then the last caller
    /// (except for a file that was master).
    pid: u32,
}

/// Why an ioctl was refused on permission or master grounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A `DRM_ROOT_ONLY` ioctl without `CAP_SYS_ADMIN`.
    #[error("needs CAP_SYS_ADMIN")]
    NotRoot,
    /// A `DRM_AUTH` ioctl on an unauthenticated primary file.
    #[error("the file is not authenticated")]
    NotAuthenticated,
    /// A `DRM_MASTER` ioctl from a file that is not the current master.
    #[error("the file is not DRM master")]
    NotMaster,
    /// SET_MASTER or DROP_MASTER by a process that did not become master
    /// with this file, without `CAP_SYS_ADMIN`.
    #[error("process {caller} is not the one (process {owner}) that was master with this file")]
    NotMasterProcess {
        /// The calling process.
        caller: u32,
        /// The process the file belongs to.
        owner: u32,
    },
    /// SET_MASTER while another file is master.
    #[error("another file is DRM master")]
    MasterBusy,
    /// SET_MASTER on a file with no master object (a render file).
    #[error("the file has no master object")]
    NoMasterObject,
    /// DROP_MASTER by a file that is not the current master.
    #[error("the file is not the current master")]
    NotCurrentMaster,
    /// AUTH_MAGIC of a token this master never gave out (or that was used).
    #[error("unknown magic {magic}")]
    UnknownMagic {
        /// The token.
        magic: u32,
    },
    /// SET_VERSION asking for an interface or driver version that does
    /// not exist.
    #[error("version {major}.{minor} is not available")]
    BadVersion {
        /// The major version asked for.
        major: i32,
        /// The minor version asked for.
        minor: i32,
    },
    /// GET_CLIENT of a client other than the caller (index 0).
    #[error("client index {idx} (only 0, the caller, exists)")]
    NoSuchClient {
        /// The index asked for.
        idx: i32,
    },
    /// Every magic number is in use (`idr_alloc` fails).
    #[error("every magic number is in use")]
    MagicsExhausted,
    /// An ioctl Linux refuses on a render node (no `DRM_RENDER_ALLOW`).
    #[error("not allowed on a render node")]
    NotOnRenderNode,
    /// An ioctl Linux no longer implements (SET_UNIQUE).
    #[error("removed ioctl")]
    Removed,
    /// A mode-setting ioctl on a driver without mode setting.
    #[error("the driver has no mode setting")]
    NoModesetting,
    /// MODE_GETFB2 on a driver without mode setting (its handler says
    /// `EINVAL` where the others say `EOPNOTSUPP`).
    #[error("the driver has no mode setting (GETFB2)")]
    NoModesettingGetfb2,
    /// A dumb-buffer ioctl on a driver without `dumb_create`.
    #[error("the driver has no dumb buffers")]
    NoDumbBuffers,
}

bitflags::bitflags! {
    /// An ioctl's permission flags (`drm_ioctl_desc.flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct IoctlFlags: u8 {
        /// `DRM_AUTH`: primary files must be authenticated.
        const AUTH = 1;
        /// `DRM_MASTER`: only the current master.
        const MASTER = 2;
        /// `DRM_ROOT_ONLY`: only `CAP_SYS_ADMIN`.
        const ROOT_ONLY = 4;
        /// `DRM_RENDER_ALLOW`: allowed on render nodes.
        const RENDER_ALLOW = 8;
    }
}

/// The interface version SET_VERSION negotiates (`DRM_IF_MAJOR`,
/// `DRM_IF_MINOR`).
const INTERFACE_VERSION: (i32, i32) = (1, 4);

impl Masters {
    /// A new file's state: on the primary node it becomes master if
    /// there is none (`drm_master_open`), else it joins the current one.
    pub(crate) fn open(&self, node: NodeKind, caller: Caller) -> Arc<Mutex<FileAuth>> {
        let mut auth = FileAuth {
            node,
            master: None,
            is_master: false,
            was_master: false,
            authenticated: caller.cap_sys_admin,
            magic: 0,
            pid: caller.tgid,
        };
        if node == NodeKind::Primary {
            let mut current = lock(&self.current);
            match &*current {
                Some(master) => auth.master = Some(Arc::clone(master)),
                None => {
                    let master = Arc::new(Master::default());
                    *current = Some(Arc::clone(&master));
                    auth.master = Some(master);
                    auth.is_master = true;
                    auth.was_master = true;
                    auth.authenticated = true;
                }
            }
        }
        Arc::new(Mutex::new(auth))
    }

    /// A file closes (`drm_master_release`): its magic is forgotten, and
    /// if it was the current master there is none until a file takes the
    /// role.
    pub(crate) fn release(&self, file: &Mutex<FileAuth>) {
        let mut current = lock(&self.current);
        let auth = lock(file);
        if let Some(master) = &auth.master {
            if auth.magic != 0 {
                lock(&master.magics).remove(&auth.magic);
            }
            if is_current(&current, &auth) {
                *current = None;
            }
        }
    }

    /// `drm_ioctl_permit`, in its order, after `drm_file_update_pid`.
    pub(crate) fn permit(
        &self,
        file: &Mutex<FileAuth>,
        flags: IoctlFlags,
        caller: Caller,
    ) -> Result<(), AuthError> {
        let current = lock(&self.current);
        let mut auth = lock(file);
        if !auth.was_master {
            auth.pid = caller.tgid;
        }
        let render = auth.node == NodeKind::Render;
        if flags.contains(IoctlFlags::ROOT_ONLY) && !caller.cap_sys_admin {
            return Err(AuthError::NotRoot);
        }
        if flags.contains(IoctlFlags::AUTH) && !render && !auth.authenticated {
            return Err(AuthError::NotAuthenticated);
        }
        if flags.contains(IoctlFlags::MASTER) && !is_current(&current, &auth) {
            return Err(AuthError::NotMaster);
        }
        if !flags.contains(IoctlFlags::RENDER_ALLOW) && render {
            return Err(AuthError::NotOnRenderNode);
        }
        Ok(())
    }

    /// SET_MASTER (`drm_setmaster_ioctl`).
    pub(crate) fn set_master(
        &self,
        file: &Mutex<FileAuth>,
        caller: Caller,
    ) -> Result<(), AuthError> {
        let mut current = lock(&self.current);
        let mut auth = lock(file);
        check_perm(&auth, caller)?;
        if is_current(&current, &auth) {
            return Ok(());
        }
        if current.is_some() {
            return Err(AuthError::MasterBusy);
        }
        let Some(master) = &auth.master else {
            return Err(AuthError::NoMasterObject);
        };
        let master = if auth.is_master {
            // It held the role before: its own master object comes back.
            Arc::clone(master)
        } else {
            // A file that was never master gets a master object of its
            // own (its magics and bus id start empty).
            let fresh = Arc::new(Master::default());
            auth.master = Some(Arc::clone(&fresh));
            auth.is_master = true;
            fresh
        };
        *current = Some(master);
        auth.was_master = true;
        auth.authenticated = true;
        Ok(())
    }

    /// DROP_MASTER (`drm_dropmaster_ioctl`).
    pub(crate) fn drop_master(
        &self,
        file: &Mutex<FileAuth>,
        caller: Caller,
    ) -> Result<(), AuthError> {
        let mut current = lock(&self.current);
        let auth = lock(file);
        check_perm(&auth, caller)?;
        if !is_current(&current, &auth) {
            return Err(AuthError::NotCurrentMaster);
        }
        *current = None;
        Ok(())
    }

    /// AUTH_MAGIC: authenticates the file `magic` was given to.
    pub(crate) fn auth_magic(&self, file: &Mutex<FileAuth>, magic: u32) -> Result<(), AuthError> {
        let _current = lock(&self.current);
        let master = lock(file).master.clone().ok_or(AuthError::NoMasterObject)?;
        // The token is used up under the map's lock; the file it names is
        // locked after that lock is dropped (GET_MAGIC takes a file's lock
        // and then the map's).
        let named = {
            let mut magics = lock(&master.magics);
            let Some(slot) = magics.get_mut(&magic).filter(|slot| slot.is_some()) else {
                return Err(AuthError::UnknownMagic { magic });
            };
            slot.take()
        };
        if let Some(other) = named.and_then(|weak| weak.upgrade()) {
            lock(&other).authenticated = true;
        }
        Ok(())
    }
}

/// `drm_is_current_master`: the file holds the role and its master object
/// is the device's current one.
fn is_current(current: &Option<Arc<Master>>, auth: &FileAuth) -> bool {
    auth.is_master && matches!((current, &auth.master), (Some(c), Some(m)) if Arc::ptr_eq(c, m))
}

/// `drm_master_check_perm`.
fn check_perm(auth: &FileAuth, caller: Caller) -> Result<(), AuthError> {
    if (auth.was_master && auth.pid == caller.tgid) || caller.cap_sys_admin {
        Ok(())
    } else {
        Err(AuthError::NotMasterProcess {
            caller: caller.tgid,
            owner: auth.pid,
        })
    }
}

impl FileAuth {
    /// GET_MAGIC: the file's token, allocated on first use as the lowest
    /// free number from 1 in its master's map.
    pub(crate) fn get_magic(file: &Arc<Mutex<FileAuth>>) -> Result<u32, AuthError> {
        let mut auth = lock(file);
        if auth.magic != 0 {
            return Ok(auth.magic);
        }
        let master = auth.master.clone().ok_or(AuthError::NoMasterObject)?;
        let mut magics = lock(&master.magics);
        let magic = lowest_free_id(&magics).ok_or(AuthError::MagicsExhausted)?;
        magics.insert(magic, Some(Arc::downgrade(file)));
        auth.magic = magic;
        Ok(magic)
    }

    /// Whether the file is authenticated (GET_CLIENT's `auth`).
    pub(crate) fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// GET_UNIQUE: the bus id of the file's master, empty until
    /// SET_VERSION 1.1+ set it.
    pub(crate) fn unique(&self) -> String {
        self.master
            .as_ref()
            .and_then(|m| lock(&m.unique).clone())
            .unwrap_or_default()
    }

    /// SET_VERSION (`drm_setversion`, already checked to be from the
    /// master): validates the versions asked for, sets the bus id for
    /// interface 1.1+, and returns (interface, driver) versions to write
    /// back whatever the outcome.
    pub(crate) fn set_version(
        &self,
        interface: (i32, i32),
        driver_asked: (i32, i32),
        driver: (i32, i32),
        bus_id: &str,
    ) -> Result<(), AuthError> {
        if interface.0 != -1 {
            if interface.0 != INTERFACE_VERSION.0
                || interface.1 < 0
                || interface.1 > INTERFACE_VERSION.1
            {
                return Err(AuthError::BadVersion {
                    major: interface.0,
                    minor: interface.1,
                });
            }
            if interface.1 >= 1 {
                if let Some(master) = &self.master {
                    *lock(&master.unique) = Some(bus_id.to_string());
                }
            }
        }
        if driver_asked.0 != -1
            && (driver_asked.0 != driver.0 || driver_asked.1 < 0 || driver_asked.1 > driver.1)
        {
            return Err(AuthError::BadVersion {
                major: driver_asked.0,
                minor: driver_asked.1,
            });
        }
        Ok(())
    }
}

/// The lowest id from 1 that `map` does not hold (`idr_alloc` from 1), in
/// one pass over its keys.
pub(crate) fn lowest_free_id<V>(map: &BTreeMap<u32, V>) -> Option<u32> {
    let mut candidate = 1u32;
    for &key in map.keys().skip_while(|&&key| key == 0) {
        if key != candidate {
            return Some(candidate);
        }
        candidate = candidate.checked_add(1)?;
    }
    Some(candidate)
}

/// The interface version SET_VERSION reports.
pub(crate) fn interface_version() -> (i32, i32) {
    INTERFACE_VERSION
}
