//! The ioctl fuzzer (`agx_tools::fuzz`) through the shim's real
//! descriptors, `open(2)` and `ioctl(2)`, as an unmodified client makes
//! them (run under `LD_PRELOAD=libagx_shim.so`). Argument: seed and ioctl
//! count. Afterwards, with every DRM file closed, the process holds no
//! more descriptors than before, and a known job (a small scene through
//! the userspace driver's real-device path) renders exactly as on an
//! in-process simulated device. Prints "ok" and the totals on success.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use agx_tools::fuzz::{IoctlFuzzer, IoctlTarget};
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::{Device, Errno};

/// The render node, through libc (which the shim interposes).
struct Node;

impl IoctlTarget for Node {
    type File = OwnedFd;

    fn open(&self) -> Result<OwnedFd, Errno> {
        // SAFETY: open with a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/dev/dri/renderD128".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: `fd` was just opened for us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn ioctl(&self, file: &OwnedFd, request: u32, arg: u64) -> Result<i32, Errno> {
        // SAFETY: the fuzzer passes a pointer to a buffer at least as large
        // as the request's size field says, or a deliberately bad one (the
        // device checks those, as the kernel does).
        let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::c_ulong::from(request), arg) };
        if r < 0 {
            Err(Errno::last())
        } else {
            Ok(r)
        }
    }
}

/// Descriptors the shim keeps for the device in the in-process mode (its
/// sync thread's, the device's end of each sync file, which it closes
/// once the sync thread sees the file closed) sit at or above the
/// process's original descriptor limit, or half of it, and so at 512 or
/// above; the client's own take the lowest free numbers.
const DEVICE_DESCRIPTORS_FROM: usize = 512;

/// The client's open descriptors.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<usize>().ok())
            .filter(|&fd| fd < DEVICE_DESCRIPTORS_FROM)
            .count()
    })
}

fn render(device: &Device) -> Result<Vec<u8>, agx_umd::Error> {
    let renderer = Renderer::new(device, &Mesh::torus(24, 12), 64, 48)?;
    renderer.frame(0)?;
    renderer.pixels()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    // The device's own descriptors (the first open builds it) are not the
    // client's: count from after the first open.
    drop(Node.open().expect("open the render node"));
    let before = open_descriptors();
    let mut fuzzer = IoctlFuzzer::new(&Node, seed);
    if let Err(e) = fuzzer.run(count) {
        eprintln!("open failed: {e}");
        std::process::exit(1);
    }
    fuzzer.close_all();
    let after = open_descriptors();
    if after != before {
        eprintln!("{before} descriptors before the fuzzing, {after} after");
        for entry in std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
        {
            eprintln!(
                "  {:?} -> {:?}",
                entry.file_name(),
                std::fs::read_link(entry.path())
            );
        }
        std::process::exit(1);
    }
    let through_shim = match Device::open("/dev/dri/renderD128").and_then(|d| render(&d)) {
        Ok(pixels) => pixels,
        Err(e) => {
            eprintln!("the known job failed after fuzzing: {e}");
            std::process::exit(1);
        }
    };
    let reference = Device::open_simulated(agx_sim::SystemConfig::default())
        .and_then(|d| render(&d))
        .expect("in-process render");
    if through_shim != reference {
        eprintln!("the known job's frame changed after fuzzing");
        std::process::exit(1);
    }
    println!("ok");
    eprintln!(
        "{} ioctls, {} succeeded, {} files; errnos {:?}",
        fuzzer.totals.ioctls,
        fuzzer.totals.succeeded,
        fuzzer.totals.files_opened,
        fuzzer.totals.errnos
    );
}
