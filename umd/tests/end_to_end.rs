//! The userspace driver end to end on the simulated device: passes,
//! draws, textures, compute and semaphores, with images checked against
//! references computed here.

use std::sync::Arc;
use std::time::Duration;

use agx_umd::*;

const WAIT: Duration = Duration::from_secs(60);

fn device() -> Device {
    Device::open_simulated(agx_kmd::SystemConfig {
        ram_bytes: 1 << 30,
        ..agx_kmd::SystemConfig::default()
    })
    .unwrap()
}

fn run(device: &Device, queue: &Queue, cb: CommandBuffer) -> Result<(), Error> {
    let _ = device;
    let mut cb = cb;
    cb.finish()?;
    queue.submit(vec![cb], &[], &[])?.wait(WAIT)
}

#[test_log::test]
fn a_cleared_pass_stores_the_clear_colour_everywhere() {
    let device = device();
    let queue = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
    let image = Image::new(&device, 70, 40, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    let pass = cb
        .begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Clear([1.0, 0.5, 0.0, 1.0]),
                store: StoreOp::Store,
            }],
            depth: None,
        })
        .unwrap();
    pass.end().unwrap();
    run(&device, &queue, cb).unwrap();
    let pixels = image.read_pixels().unwrap();
    assert_eq!(pixels.len(), 70 * 40 * 4);
    assert!(pixels.chunks_exact(4).all(|p| p == [255, 128, 0, 255]));
}
