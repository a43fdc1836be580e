//! The device nodes' permission bits and owners, as `chmod` and `chown`
//! leave them.
//!
//! On Linux `/dev/dri/card0` and `renderD128` are devtmpfs inodes: udev
//! sets their mode and owner, root may change them (`chmod`, `chown`),
//! every process sees the change, and `open` and `access` check them
//! (`generic_permission`: the owner's bits, the group's, or the others';
//! root passes the read and write checks). Here the nodes are the shim's,
//! so their attributes are kept where every client of one device finds
//! them: a small file, `nodes`, in the device directory, mapped shared by
//! each process that uses it and read and written with atomics (a signal
//! handler may `stat`). Until anyone changes them (or where the directory
//! cannot be reached: a process that changed its user) they are udev's:
//! mode 0666, owned by root.
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use agx_sim::NodeKind;

/// The mode udev gives the nodes.
pub const UDEV_MODE: u32 = 0o666;

/// Marks a stored mode as set (a zero record is udev's).
const MODE_SET: u32 = 1 << 31;

/// The bytes of the file (and of its mapping): one page.
const FILE_BYTES: usize = 4096;

/// One node's attributes, as laid out in the file.
#[repr(C)]
#[derive(Debug)]
pub struct NodeRecord {
    /// `MODE_SET | mode`, or 0 for udev's.
    mode: AtomicU32,
    _reserved: AtomicU32,
    /// `uid << 32 | gid`.
    owner: AtomicU64,
}

impl NodeRecord {
    const fn udev() -> NodeRecord {
        NodeRecord {
            mode: AtomicU32::new(0),
            _reserved: AtomicU32::new(0),
            owner: AtomicU64::new(0),
        }
    }

    /// The permission bits (and set-id and sticky bits).
    pub fn mode(&self) -> u32 {
        match self.mode.load(Ordering::Relaxed) {
            0 => UDEV_MODE,
            mode => mode & 0o7777,
        }
    }

    /// The owner: (uid, gid).
    pub fn owner(&self) -> (u32, u32) {
        let owner = self.owner.load(Ordering::Relaxed);
        ((owner >> 32) as u32, owner as u32)
    }

    /// Sets the permission bits.
    pub fn set_mode(&self, mode: u32) {
        self.mode
            .store(MODE_SET | (mode & 0o7777), Ordering::Relaxed);
    }

    /// Sets the owner.
    pub fn set_owner(&self, uid: u32, gid: u32) {
        self.owner
            .store((u64::from(uid) << 32) | u64::from(gid), Ordering::Relaxed);
    }

    /// Whether a process of user `uid`, in the groups `in_group` says it
    /// is, may have the access `wanted` (`libc::R_OK | W_OK | X_OK` bits):
    /// the owner's bits, else the group's, else the others'; root may read
    /// and write anything, and execute what anyone may
    /// (`generic_permission`).
    pub fn permits(&self, uid: u32, in_group: impl Fn(u32) -> bool, wanted: u32) -> bool {
        let mode = self.mode();
        let wanted = wanted & 0o7;
        if uid == 0 {
            return wanted & 0o1 == 0 || mode & 0o111 != 0;
        }
        let (owner_uid, owner_gid) = self.owner();
        let bits = if uid == owner_uid {
            mode >> 6
        } else if in_group(owner_gid) {
            mode >> 3
        } else {
            mode
        } & 0o7;
        bits & wanted == wanted
    }
}

/// The file in device directory `dir` that holds its nodes' attributes.
pub fn attributes_path(dir: &Path) -> PathBuf {
    dir.join("nodes")
}

/// The nodes' attributes as one process sees them: the device
/// directory's file, mapped once found (or made), else the process's own
/// copy.
#[derive(Debug)]
pub struct NodeAttributes {
    /// The file's mapping (null until mapped).
    mapped: AtomicPtr<[NodeRecord; 2]>,
    /// The process's own, where the file cannot be reached.
    own: [NodeRecord; 2],
}

impl Default for NodeAttributes {
    fn default() -> Self {
        NodeAttributes::new()
    }
}

fn index(node: NodeKind) -> usize {
    usize::from(node == NodeKind::Render)
}

impl NodeAttributes {
    /// Udev's attributes, the file not yet looked for.
    pub const fn new() -> NodeAttributes {
        NodeAttributes {
            mapped: AtomicPtr::new(std::ptr::null_mut()),
            own: [NodeRecord::udev(), NodeRecord::udev()],
        }
    }

    /// Node `node`'s attributes, to read: device directory `dir`'s (if
    /// `dir` is given and its file exists), else this process's.
    pub fn get(&self, dir: Option<&Path>, node: NodeKind) -> &NodeRecord {
        &self.records(dir, false)[index(node)]
    }

    /// Node `node`'s attributes, to change: device directory `dir`'s
    /// (made if need be), else (no directory, or it cannot be made) this
    /// process's.
    pub fn get_for_change(&self, dir: Option<&Path>, node: NodeKind) -> &NodeRecord {
        &self.records(dir, true)[index(node)]
    }

    fn records(&self, dir: Option<&Path>, make: bool) -> &[NodeRecord; 2] {
        let mapped = self.mapped.load(Ordering::Acquire);
        if !mapped.is_null() {
            // SAFETY: a non-null pointer is a live shared mapping of
            // `FILE_BYTES` (never unmapped once published), page-aligned,
            // whose first bytes are the two records (all-zero is a valid
            // record: atomics of plain integers). Other processes write
            // it too, only through atomics.
            return unsafe { &*mapped };
        }
        let Some(dir) = dir else {
            return &self.own;
        };
        match map_file(dir, make) {
            Some(new) => match self.mapped.compare_exchange(
                std::ptr::null_mut(),
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: as above, for the mapping just published.
                Ok(_) => unsafe { &*new },
                Err(theirs) => {
                    // Another thread mapped it first: ours goes.
                    // SAFETY: `new` is our own mapping of FILE_BYTES,
                    // never published, so nothing refers to it.
                    let _ = unsafe { rustix::mm::munmap(new.cast(), FILE_BYTES) };
                    // SAFETY: as above, for the published one.
                    unsafe { &*theirs }
                }
            },
            None => &self.own,
        }
    }
}

/// Maps `dir`'s attribute file, making it (and the directory) first if
/// `make`; `None` if it does not exist (yet), is not this user's, or
/// cannot be mapped.
fn map_file(dir: &Path, make: bool) -> Option<*mut [NodeRecord; 2]> {
    use rustix::fs::{Mode, OFlags};
    let path = attributes_path(dir);
    let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let file = if make {
        crate::protocol::ensure_private_dir(dir).ok()?;
        rustix::fs::open(&path, flags | OFlags::CREATE, Mode::RUSR | Mode::WUSR).ok()?
    } else {
        rustix::fs::open(&path, flags, Mode::empty()).ok()?
    };
    let stat = rustix::fs::fstat(&file).ok()?;
    let regular =
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile;
    if !regular || stat.st_uid != rustix::process::geteuid().as_raw() {
        tracing::warn!(path = %path.display(), "the nodes' attribute file is not this user's file: ignored");
        return None;
    }
    if (stat.st_size as u64) < FILE_BYTES as u64 {
        if !make {
            // Being made: udev's attributes until it is whole.
            return None;
        }
        rustix::fs::ftruncate(&file, FILE_BYTES as u64).ok()?;
    }
    // SAFETY: a new shared mapping of a regular file of at least
    // FILE_BYTES bytes (checked or just made so), at an address the
    // kernel chooses: it aliases no Rust object.
    let mapped = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            FILE_BYTES,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            file.as_fd(),
            0,
        )
    }
    .ok()?;
    Some(mapped.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_follow_the_owner_group_and_other_bits_and_root_passes() {
        let record = NodeRecord::udev();
        assert_eq!((record.mode(), record.owner()), (0o666, (0, 0)));
        let no_groups = |_| false;
        assert!(record.permits(1000, no_groups, 0o6));
        assert!(!record.permits(1000, no_groups, 0o1));
        record.set_mode(0o640);
        record.set_owner(0, 44);
        assert!(!record.permits(1000, no_groups, 0o4), "other: none");
        assert!(record.permits(1000, |gid| gid == 44, 0o4), "group: read");
        assert!(
            !record.permits(1000, |gid| gid == 44, 0o2),
            "group: no write"
        );
        assert!(record.permits(0, no_groups, 0o6), "root reads and writes");
        assert!(
            !record.permits(0, no_groups, 0o1),
            "root executes only what anyone may"
        );
        record.set_owner(1000, 1000);
        record.set_mode(0o066);
        assert!(
            !record.permits(1000, |_| true, 0o4),
            "the owner's bits, not the others'"
        );
    }

    #[test]
    fn the_directorys_file_is_shared_by_every_reader_and_made_by_the_first_change() {
        let dir = std::env::temp_dir().join(format!("agx-nodes-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (first, second) = (NodeAttributes::new(), NodeAttributes::new());
        // No file yet: udev's, and nothing is made by reading.
        assert_eq!(first.get(Some(&dir), NodeKind::Primary).mode(), 0o666);
        assert!(!attributes_path(&dir).exists());
        first
            .get_for_change(Some(&dir), NodeKind::Primary)
            .set_mode(0o600);
        first
            .get_for_change(Some(&dir), NodeKind::Render)
            .set_owner(7, 8);
        // A second mapping (as another process has) sees both changes.
        assert_eq!(second.get(Some(&dir), NodeKind::Primary).mode(), 0o600);
        assert_eq!(second.get(Some(&dir), NodeKind::Render).owner(), (7, 8));
        assert_eq!(second.get(Some(&dir), NodeKind::Render).mode(), 0o666);
        // Without a directory, a process's own.
        let own = NodeAttributes::new();
        own.get_for_change(None, NodeKind::Primary).set_mode(0o644);
        assert_eq!(own.get(None, NodeKind::Primary).mode(), 0o644);
        assert_eq!(
            second.get(None, NodeKind::Primary).mode(),
            0o600,
            "mapped stays"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
