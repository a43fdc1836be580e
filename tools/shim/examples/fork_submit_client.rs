//! A client that opens the render node, forks, and submits GPU work from
//! both sides of the fork through the one DRM file they share, as a test
//! harness or a daemon that forks after opening the device does. Each side
//! makes its own VM and queue on the shared file (a VM's address space is
//! managed by the process that made it) and renders a small torus at the
//! same time as the other; each frame must match the same frame rendered
//! on an in-process simulated device bit for bit. Device-process mode (in
//! the in-process mode the child's first call fails with `ENODEV`).
//! Prints "ok" on success.

use std::os::fd::{AsFd, OwnedFd};

use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::Device;

fn render(device: &Device) -> Result<Vec<u8>, agx_umd::Error> {
    let renderer = Renderer::new(device, &Mesh::torus(48, 24), 160, 120)?;
    renderer.frame(0)?;
    renderer.pixels()
}

/// Renders through `file` (a copy of the shared DRM file) and compares
/// with the same frame rendered in-process: the exit status for this side.
fn render_through(file: OwnedFd, side: &str) -> i32 {
    let through_file = Device::from_fd(file).and_then(|device| render(&device));
    let reference = Device::open_simulated(agx_sim::SystemConfig::default())
        .and_then(|device| render(&device))
        .expect("in-process render");
    match through_file {
        Ok(pixels) if pixels == reference => 0,
        Ok(_) => {
            eprintln!("{side}: the frame differs from the in-process one");
            1
        }
        Err(error) => {
            eprintln!("{side}: render through the shared file failed: {error}");
            1
        }
    }
}

fn main() {
    let file: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/dri/renderD128")
        .expect("open the render node")
        .into();
    let for_child = file.as_fd().try_clone_to_owned().expect("dup");
    // SAFETY: the process runs one thread until here (the shim's
    // device-process mode starts none in the client), so the child may
    // do anything the parent could.
    let child = unsafe { libc::fork() };
    if child < 0 {
        eprintln!("fork: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if child == 0 {
        drop(file);
        std::process::exit(render_through(for_child, "child"));
    }
    drop(for_child);
    let parent = render_through(file, "parent");
    let mut status = 0;
    // SAFETY: waiting for the child this process made, with a valid
    // out-pointer.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    let child_ok = waited == child && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if parent != 0 || !child_ok {
        eprintln!("parent exit {parent}, child wait status {status:#x}");
        std::process::exit(1);
    }
    println!("ok");
}
