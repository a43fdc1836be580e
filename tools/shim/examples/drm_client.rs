//! A Rust client using the `drm` crate, unmodified: run under
//! `LD_PRELOAD=libagx_shim.so` it talks to the simulated GPU (rustix's
//! `use-libc` feature routes the drm crate's ioctls through libc). Prints
//! "ok" on success.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use agx_uapi::asahi::{
    GemCreate, GemMmapOffset, DRM_IOCTL_ASAHI_GEM_CREATE, DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
};
use drm::control::Device as ControlDevice;
use drm::Device;

struct Card(File);

impl AsFd for Card {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Device for Card {}
impl ControlDevice for Card {}

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("check failed: {what}");
        std::process::exit(1);
    }
}

fn asahi_ioctl<T>(card: &Card, request: u32, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: `arg` is the argument struct the request number encodes.
    let r = unsafe { libc::ioctl(card.0.as_raw_fd(), request as libc::c_ulong, arg as *mut T) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn main() {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/dri/renderD128")
    {
        Ok(file) => file,
        Err(e) => {
            eprintln!("cannot open /dev/dri/renderD128: {e}");
            std::process::exit(1);
        }
    };
    let node = drm::node::DrmNode::from_file(&file).expect("a DRM node");
    check(node.ty() == drm::node::NodeType::Render, "render node");
    let card = Card(file);

    let driver = card.get_driver().expect("VERSION");
    check(driver.name().to_str() == Some("asahi"), "driver name");
    check(
        card.get_driver_capability(drm::DriverCapability::SyncObj)
            .ok()
            == Some(1),
        "syncobj cap",
    );
    check(
        card.get_driver_capability(drm::DriverCapability::Prime)
            .ok()
            == Some(3),
        "prime cap",
    );

    let syncobj = card.create_syncobj(false).expect("SYNCOBJ_CREATE");
    let err = card
        .syncobj_wait(&[syncobj], 0, true, false)
        .expect_err("no fence yet");
    check(
        err.raw_os_error() == Some(libc::EINVAL),
        "EINVAL without a fence",
    );
    card.syncobj_signal(&[syncobj]).expect("SYNCOBJ_SIGNAL");
    check(
        card.syncobj_wait(&[syncobj], 0, true, false).ok() == Some(0),
        "signalled",
    );
    card.destroy_syncobj(syncobj).expect("SYNCOBJ_DESTROY");

    let mut create = GemCreate {
        size: 16384,
        ..GemCreate::default()
    };
    asahi_ioctl(&card, DRM_IOCTL_ASAHI_GEM_CREATE, &mut create).expect("GEM_CREATE");
    let mut offset = GemMmapOffset {
        handle: create.handle,
        ..GemMmapOffset::default()
    };
    asahi_ioctl(&card, DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET, &mut offset).expect("GEM_MMAP_OFFSET");
    // SAFETY: mapping 16 KiB of the DRM file at the object's offset.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            16384,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            card.0.as_raw_fd(),
            offset.offset as libc::off_t,
        )
    };
    check(map != libc::MAP_FAILED, "mmap");
    // SAFETY: the mapping is 16 KiB and writable.
    unsafe { std::ptr::copy_nonoverlapping(b"from rust".as_ptr(), map.cast::<u8>(), 9) };

    let handle = drm::buffer::Handle::from(
        std::num::NonZeroU32::new(create.handle).expect("non-zero handle"),
    );
    let prime = card
        .buffer_to_prime_fd(handle, libc::O_CLOEXEC as u32)
        .expect("PRIME export");
    let mut buf = [0u8; 9];
    // SAFETY: reading 9 bytes from the start of the exported buffer.
    let n = unsafe { libc::pread(prime.as_raw_fd(), buf.as_mut_ptr().cast(), 9, 0) };
    check(
        n == 9 && &buf == b"from rust",
        "the PRIME fd shows the same pages",
    );
    let imported = card
        .prime_fd_to_buffer(prime.as_fd())
        .expect("PRIME import");
    check(imported == handle, "re-import gives the same handle");
    card.close_buffer(handle).expect("GEM_CLOSE");
    let err = card.close_buffer(handle).expect_err("already closed");
    check(
        err.raw_os_error() == Some(libc::EINVAL),
        "EINVAL for an unknown handle",
    );
    println!("ok");
}
