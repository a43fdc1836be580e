//! The device as the filesystem shows it: its nodes in `/dev/dri` and its
//! sysfs directories, as Linux presents a platform GPU bound to the asahi
//! driver.
//!
//! Clients find a DRM device by listing `/dev/dri`, `stat`ing the nodes
//! for their major and minor, and reading `/sys/dev/char/226:<minor>/`:
//! the `subsystem` link names the bus, `device/uevent` carries the
//! driver and the device-tree names, `device/drm/` lists the device's
//! nodes. The shim keeps a real directory tree with exactly those entries
//! (files, directories and relative symbolic links laid out as sysfs lays
//! them out), built once per user under the runtime directory, and
//! redirects paths in the faked namespaces into it. Directory listing,
//! link reading and path resolution are then the host kernel's own,
//! whatever libc function the client uses on the redirected path; only
//! the device nodes themselves (and `/proc/self/fd` entries of DRM files)
//! are answered by the shim.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The major number of DRM nodes.
pub const DRM_MAJOR: u32 = 226;

pub use agx_kmd::file::NodeKind;

/// A device node the driver creates.
#[derive(Debug, PartialEq, Eq)]
pub struct Node {
    /// Its name in `/dev/dri` and in the device's `drm/` directory.
    pub name: &'static str,
    /// Its path.
    pub path: &'static str,
    /// Its minor number (major [`DRM_MAJOR`]).
    pub minor: u32,
    /// What it is.
    pub kind: NodeKind,
}

/// The card node.
pub const CARD: Node = Node {
    name: "card0",
    path: "/dev/dri/card0",
    minor: 0,
    kind: NodeKind::Primary,
};

/// The render node.
pub const RENDER: Node = Node {
    name: "renderD128",
    path: "/dev/dri/renderD128",
    minor: 128,
    kind: NodeKind::Render,
};

/// Both nodes, card first (the order of their minors).
pub const NODES: [&Node; 2] = [&CARD, &RENDER];

/// The platform device's name (`<unit address>.<node name>`, as the
/// kernel names devices it creates from the device tree).
pub const PLATFORM_DEVICE: &str = agx_kmd::device::PLATFORM_DEVICE_NAME;

/// Where platform devices created from the device tree's `soc` bus live.
const SOC_DIR: &str = "/sys/devices/platform/soc";

/// The platform device's sysfs directory.
pub fn device_dir() -> String {
    format!("{SOC_DIR}/{PLATFORM_DEVICE}")
}

/// The device's modalias: its device-tree node name and compatibles.
const MODALIAS: &str = "of:NgpuT(null)Capple,agx-t8103Capple,agx-g13g";

/// The device's uevent: the driver bound to it and its device-tree node
/// (the M1's GPU, `gpu@206400000` in Asahi Linux's `t8103.dtsi`, which
/// the asahi driver matches by `apple,agx-t8103`), as `of_device_uevent`
/// prints them.
pub const DEVICE_UEVENT: &str = "DRIVER=asahi\n\
    OF_NAME=gpu\n\
    OF_FULLNAME=/soc/gpu@206400000\n\
    OF_COMPATIBLE_0=apple,agx-t8103\n\
    OF_COMPATIBLE_1=apple,agx-g13g\n\
    OF_COMPATIBLE_N=2\n\
    OF_ALIAS_0=gpu\n\
    MODALIAS=of:NgpuT(null)Capple,agx-t8103Capple,agx-g13g\n";

/// The namespaces the tree stands in for: a path in one of them (the
/// prefix itself or below it) is redirected.
const FAKED: &[&str] = &[
    "/dev/dri",
    "/sys/dev/char/226:0",
    "/sys/dev/char/226:128",
    "/sys/bus/platform/drivers/asahi",
    "/sys/class/drm",
];

/// One entry of the tree, by its absolute path on a real system.
enum Entry {
    Dir,
    File(String),
    Link(String),
}

fn layout() -> Vec<(String, Entry)> {
    let device_dir = device_dir();
    let link = |target: &str| Entry::Link(target.to_string());
    let mut entries = vec![
        ("/dev/dri".to_string(), Entry::Dir),
        ("/dev/dri/by-path".to_string(), Entry::Dir),
        ("/sys/dev/char".to_string(), Entry::Dir),
        ("/sys/bus/platform/drivers/asahi".to_string(), Entry::Dir),
        ("/sys/class/drm".to_string(), Entry::Dir),
        (device_dir.clone(), Entry::Dir),
        (
            format!("{device_dir}/uevent"),
            Entry::File(DEVICE_UEVENT.to_string()),
        ),
        (
            format!("{device_dir}/modalias"),
            Entry::File(format!("{MODALIAS}\n")),
        ),
        (
            format!("{device_dir}/subsystem"),
            link("../../../../bus/platform"),
        ),
        (
            format!("{device_dir}/driver"),
            link("../../../../bus/platform/drivers/asahi"),
        ),
        (
            format!("/sys/bus/platform/drivers/asahi/{PLATFORM_DEVICE}"),
            link(&format!("../../../..{}", dir_below_sys(&device_dir))),
        ),
        (format!("{device_dir}/drm"), Entry::Dir),
    ];
    for node in NODES {
        let (name, minor) = (node.name, node.minor);
        let dir = format!("{device_dir}/drm/{name}");
        entries.push((node.path.to_string(), Entry::File(String::new())));
        entries.push((dir.clone(), Entry::Dir));
        entries.push((
            format!("{dir}/uevent"),
            Entry::File(format!(
                "MAJOR={DRM_MAJOR}\nMINOR={minor}\nDEVNAME=dri/{name}\nDEVTYPE=drm_minor\n"
            )),
        ));
        entries.push((
            format!("{dir}/dev"),
            Entry::File(format!("{DRM_MAJOR}:{minor}\n")),
        ));
        entries.push((
            format!("{dir}/device"),
            link(&format!("../../../{PLATFORM_DEVICE}")),
        ));
        entries.push((
            format!("{dir}/subsystem"),
            link("../../../../../../class/drm"),
        ));
        // From /sys/dev/char and /sys/class/drm, two levels below /sys.
        let by_minor = format!("../..{}/drm/{name}", dir_below_sys(&device_dir));
        entries.push((
            format!("/sys/dev/char/{DRM_MAJOR}:{minor}"),
            link(&by_minor),
        ));
        entries.push((format!("/sys/class/drm/{name}"), link(&by_minor)));
        let suffix = match node.kind {
            NodeKind::Primary => "card",
            NodeKind::Render => "render",
        };
        entries.push((
            format!("/dev/dri/by-path/platform-{PLATFORM_DEVICE}-{suffix}"),
            link(&format!("../{name}")),
        ));
    }
    entries
}

/// `path` (in /sys) without its `/sys` prefix, for relative links.
fn dir_below_sys(path: &str) -> &str {
    path.strip_prefix("/sys").unwrap_or(path)
}

/// The tree's contents as one string, for naming the directory that
/// holds this version of it.
fn fingerprint(entries: &[(String, Entry)]) -> u64 {
    // FNV-1a.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (path, entry) in entries {
        let text = match entry {
            Entry::Dir => format!("{path} dir\n"),
            Entry::File(contents) => format!("{path} file 0444 {contents:?}\n"),
            Entry::Link(target) => format!("{path} link {target}\n"),
        };
        for byte in text.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    hash
}

/// Why the tree could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
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
    /// The per-user directory is not usable.
    #[error(transparent)]
    Dir(#[from] agx_simd::protocol::DirError),
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> TreeError + 'a {
    move |source| TreeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The directory private to this user where the shim keeps its state
/// (the tree, and the device process's directory), made if need be.
pub fn private_dir() -> Result<PathBuf, TreeError> {
    let dir = agx_simd::protocol::user_dir();
    agx_simd::protocol::ensure_private_dir(&dir)?;
    Ok(dir)
}

/// The tree, built on first use.
pub struct Tree {
    /// The real directory standing for `/` (canonical, so that resolved
    /// paths below it map back by stripping it).
    root: PathBuf,
}

static TREE: OnceLock<Result<Tree, String>> = OnceLock::new();

impl Tree {
    /// The tree, building it (or finding it built) on first use. An error
    /// is logged once and the faked paths then do not exist.
    pub fn get() -> Option<&'static Tree> {
        TREE.get_or_init(|| {
            Tree::build().map_err(|e| {
                let message = format!("agx-shim: cannot build the device's sysfs tree: {e}\n");
                crate::interpose::log(&message);
                message
            })
        })
        .as_ref()
        .ok()
    }

    fn build() -> Result<Tree, TreeError> {
        let entries = layout();
        let dir = private_dir()?;
        let name = format!("tree-{:016x}", fingerprint(&entries));
        let done = dir.join(&name);
        if !done.is_dir() {
            // Built aside and renamed into place, so that processes
            // starting together never see a half-built tree.
            let staging = dir.join(format!("{name}.{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            for (path, entry) in &entries {
                let at = staging.join(path.trim_start_matches('/'));
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent).map_err(io_error("creating", parent))?;
                }
                match entry {
                    Entry::Dir => std::fs::create_dir_all(&at),
                    Entry::File(contents) => std::fs::write(&at, contents).and_then(|()| {
                        // Read-only, as sysfs attributes mostly are.
                        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o444))
                    }),
                    Entry::Link(target) => std::os::unix::fs::symlink(target, &at),
                }
                .map_err(io_error("creating", &at))?;
            }
            if let Err(e) = std::fs::rename(&staging, &done) {
                let _ = std::fs::remove_dir_all(&staging);
                if !done.is_dir() {
                    return Err(io_error("renaming into", &done)(e));
                }
            }
        }
        let root = std::fs::canonicalize(&done).map_err(io_error("resolving", &done))?;
        Ok(Tree { root })
    }

    /// Where `path` (absolute, in a faked namespace) is in the tree.
    fn redirect(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// A path in the tree, resolved, as the path it stands for.
    fn unredirect(&self, real: &Path) -> Option<String> {
        let below = real.strip_prefix(&self.root).ok()?;
        Some(format!("/{}", below.to_str()?))
    }
}

/// Whether `path` is in one of the faked namespaces (the prefixes and
/// the platform device's directory).
pub fn is_faked(path: &str) -> bool {
    let within = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    FAKED.iter().any(|prefix| within(prefix)) || within(&device_dir())
}

/// The node at `path` exactly, if it is one.
pub fn node_at(path: &str) -> Option<&'static Node> {
    NODES.into_iter().find(|node| node.path == path)
}

/// What a path the client named stands for.
pub enum Target {
    /// A device node (directly, or through a link in the tree).
    Node(&'static Node),
    /// A path in the tree.
    Redirected(CString),
    /// Not the device's: the path as given.
    Real,
}

/// What `path` stands for, following links in the tree when `follow`.
pub fn resolve(path: &str, follow: bool) -> Target {
    if let Some(node) = node_at(path) {
        return Target::Node(node);
    }
    if !is_faked(path) {
        return Target::Real;
    }
    let Some(tree) = Tree::get() else {
        // No tree: the faked paths do not exist (rather than showing the
        // host's).
        return Target::Redirected(c"/proc/agx-sim-tree-unavailable".into());
    };
    let redirected = tree.redirect(path);
    if follow {
        if let Some(node) = std::fs::canonicalize(&redirected)
            .ok()
            .and_then(|real| tree.unredirect(&real))
            .and_then(|stood_for| node_at(&stood_for))
        {
            return Target::Node(node);
        }
    }
    match CString::new(redirected.into_os_string().into_encoded_bytes()) {
        Ok(c) => Target::Redirected(c),
        Err(_) => Target::Real,
    }
}

/// The path the directory open at `dirfd` stands for, if it is one of
/// the tree's.
pub fn stands_for(dirfd: i32) -> Option<String> {
    let tree = TREE.get()?.as_ref().ok()?;
    let real = std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()?;
    tree.unredirect(&real)
}

/// `realpath` of a path in a faked namespace: resolved in the tree and
/// mapped back (`None` for a path outside them, or one that does not
/// resolve, with the `errno` of the failure set).
pub fn realpath(path: &str) -> Option<Result<String, i32>> {
    if node_at(path).is_some() {
        return Some(Ok(path.to_string()));
    }
    if !is_faked(path) {
        return None;
    }
    let tree = Tree::get()?;
    Some(
        std::fs::canonicalize(tree.redirect(path))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOENT))
            .and_then(|real| tree.unredirect(&real).ok_or(libc::ENOENT)),
    )
}
