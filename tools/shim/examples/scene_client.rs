//! The README's scene (the textured torus, 800x600) rendered through the
//! userspace driver's real-device path under `LD_PRELOAD=libagx_shim.so`,
//! and compared bit for bit with the same scene rendered on an in-process
//! simulated device. Prints "ok" on success; on failure, the error (a GPU
//! timeout is `ETIMEDOUT`) and exit status 1.

use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::Device;
use std::os::fd::FromRawFd;

/// Frames to draw before the comparison: 1, or N with `--frames N` (a
/// client that must still be busy when a test kills it).
fn frames() -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--frames")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |n| n.parse().expect("--frames takes a number"))
}

fn render(device: &Device) -> Result<Vec<u8>, agx_umd::Error> {
    let renderer = Renderer::new(device, &Mesh::torus(300, 100), 800, 600)?;
    for _ in 0..frames() {
        renderer.frame(0)?;
    }
    renderer.pixels()
}

/// The device: `/dev/dri/renderD128`, or with `--fd N` the DRM file this
/// process inherited as descriptor `N` (which another process may be
/// using at the same time).
fn open_device() -> Result<Device, agx_umd::Error> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--fd") {
        Some(i) => {
            let fd: i32 = args
                .get(i + 1)
                .and_then(|n| n.parse().ok())
                .expect("--fd takes a descriptor number");
            // SAFETY: the caller passes a descriptor this process inherited
            // and nothing else here owns.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            Device::from_fd(fd)
        }
        None => Device::open("/dev/dri/renderD128"),
    }
}

fn main() {
    let through_shim = open_device().and_then(|device| render(&device));
    let through_shim = match through_shim {
        Ok(pixels) => pixels,
        Err(error) => {
            eprintln!("render through the shim failed: {error}");
            std::process::exit(1);
        }
    };
    let reference = Device::open_simulated(agx_sim::SystemConfig::default())
        .and_then(|device| render(&device))
        .expect("in-process render");
    if through_shim != reference {
        eprintln!("the shim's frame differs from the in-process one");
        std::process::exit(1);
    }
    println!("ok");
}
