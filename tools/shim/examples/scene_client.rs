//! The README's scene (the textured torus, 800x600) rendered through the
//! userspace driver's real-device path under `LD_PRELOAD=libagx_shim.so`,
//! and compared bit for bit with the same scene rendered on an in-process
//! simulated device. Prints "ok" on success; on failure, the error (a GPU
//! timeout is `ETIMEDOUT`) and exit status 1.

use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::Device;

fn render(device: &Device) -> Result<Vec<u8>, agx_umd::Error> {
    let renderer = Renderer::new(device, &Mesh::torus(300, 100), 800, 600)?;
    renderer.frame(0)?;
    renderer.pixels()
}

fn main() {
    let through_shim = Device::open("/dev/dri/renderD128").and_then(|device| render(&device));
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
