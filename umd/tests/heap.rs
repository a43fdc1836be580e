//! Descriptor heaps: allocation against a model, growth that keeps the
//! base, recycling after the GPU is done, sampler deduplication, and
//! bindless sampling through both heaps on the simulated GPU.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agx_hw::block::BlockFormat;
use agx_hw::formats::{BorderColour, CustomBorder, Filter, MipFilter, Sampler, Wrap};
use agx_hw::Lod;
use agx_umd::heap::{DescriptorIndex, SamplerIndex, CHUNK_BYTES, DESCRIPTORS_PER_CHUNK, NULL_PBE};
use agx_umd::*;

fn device() -> Device {
    Device::open_simulated(agx_sim::SystemConfig {
        ram_bytes: 1 << 30,
        ..agx_sim::SystemConfig::default()
    })
    .unwrap()
}

/// xorshift64*.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test_log::test]
fn image_heap_allocation_follows_a_model_and_recycles_only_after_retirement() {
    let device = device();
    let capacity = 3000;
    let mut heap = ImageHeap::new(&device, capacity).unwrap();
    let null = heap.read(DescriptorIndex(0)).unwrap();
    let mut live: HashSet<u32> = HashSet::new();
    // Freed at a retire point the GPU has not passed: must not come back.
    // Retire points come from a queue timeline, so they never decrease.
    let mut retiring: HashMap<u32, u64> = HashMap::new();
    let (mut completed, mut last_retire) = (0u64, 0u64);
    let mut state = 0x1234_5678_9ABC_DEF1u64;
    for step in 0..20_000u64 {
        match next(&mut state) % 10 {
            0..=5 => match heap.alloc() {
                Ok(index) => {
                    assert!(index.0 > NULL_PBE, "the null slots are never handed out");
                    assert!(
                        live.insert(index.0),
                        "step {step}: {index:?} handed out twice"
                    );
                    assert!(
                        !retiring.contains_key(&index.0),
                        "step {step}: {index:?} reused before the GPU was done"
                    );
                    assert_eq!(heap.read(index).unwrap(), null, "a fresh slot is null");
                }
                Err(Error::HeapFull { capacity: c, .. }) => {
                    assert_eq!(c, u64::from(capacity));
                    assert_eq!(live.len() + retiring.len() + 2, capacity as usize);
                }
                Err(e) => panic!("{e}"),
            },
            6..=8 => {
                if let Some(&index) = live.iter().next() {
                    live.remove(&index);
                    last_retire = last_retire.max(completed + 1 + next(&mut state) % 5);
                    let retire = heap::RetirePoint {
                        queue: 1,
                        point: last_retire,
                    };
                    heap.free(DescriptorIndex(index), retire).unwrap();
                    retiring.insert(index, last_retire);
                    // A double free is refused.
                    assert!(heap.free(DescriptorIndex(index), retire).is_err());
                    // Another queue's progress does not free it.
                    assert_eq!(heap.reclaim(2, u64::MAX).unwrap(), 0);
                }
            }
            _ => {
                completed += 1;
                let expected = retiring.values().filter(|&&r| r <= completed).count();
                assert_eq!(heap.reclaim(1, completed).unwrap(), expected, "step {step}");
                retiring.retain(|_, r| *r > completed);
                assert_eq!(heap.pending(), retiring.len());
            }
        }
        assert_eq!(heap.live() as usize, live.len() + 2);
    }
    let now = heap::RetirePoint { queue: 1, point: 0 };
    assert!(heap.free(DescriptorIndex(NULL_PBE), now).is_err());
    assert!(heap.free(DescriptorIndex(capacity + 5), now).is_err());
}

#[test_log::test]
fn growth_binds_chunks_behind_a_base_that_never_moves() {
    let device = device();
    let mut heap = ImageHeap::new(&device, heap::DEFAULT_IMAGE_CAPACITY).unwrap();
    let base = heap.base();
    assert_eq!(heap.committed_bytes(), CHUNK_BYTES);
    let mut last = DescriptorIndex(0);
    for _ in 2..DESCRIPTORS_PER_CHUNK + 10 {
        last = heap.alloc().unwrap();
    }
    assert_eq!(last.0, DESCRIPTORS_PER_CHUNK + 9);
    assert_eq!(heap.base(), base, "the base never moves");
    assert_eq!(heap.committed_bytes(), 2 * CHUNK_BYTES);
    // The kernel's view: two chunk objects bound back to back at the
    // base, and nothing after them in the reserved range.
    let sim = device.simulated().unwrap();
    let mappings = sim.file().vm_mappings(device.vm_id()).unwrap();
    let in_heap: Vec<_> = mappings
        .iter()
        .filter(|m| m.va >= base && m.va < base + 16 * CHUNK_BYTES)
        .collect();
    assert_eq!(in_heap.len(), 2, "{in_heap:?}");
    assert_eq!((in_heap[0].va, in_heap[0].len_bytes), (base, CHUNK_BYTES));
    assert_eq!(
        (in_heap[1].va, in_heap[1].len_bytes),
        (base + CHUNK_BYTES, CHUNK_BYTES)
    );
    assert!(in_heap
        .iter()
        .all(|m| m.permissions.gpu_read && !m.permissions.gpu_write));
    drop(heap);
    let after = sim.file().vm_mappings(device.vm_id()).unwrap();
    assert!(after
        .iter()
        .all(|m| m.va < base || m.va >= base + 16 * CHUNK_BYTES));
}

fn sampler(i: u32) -> Sampler {
    let wraps = [
        Wrap::ClampToEdge,
        Wrap::Repeat,
        Wrap::MirroredRepeat,
        Wrap::ClampToBorder,
    ];
    Sampler {
        min_lod: agx_hw::Lod::from_f32((i % 64) as f32 * 0.125),
        max_lod: agx_hw::Lod::from_f32(15.0),
        wrap_s: wraps[(i / 64 % 4) as usize],
        wrap_t: wraps[(i / 256 % 4) as usize],
        magnify: if (i / 1024).is_multiple_of(2) {
            Filter::Nearest
        } else {
            Filter::Linear
        },
        minify: if (i / 2048).is_multiple_of(2) {
            Filter::Nearest
        } else {
            Filter::Linear
        },
        ..Sampler::default()
    }
}

#[test_log::test]
fn identical_samplers_share_a_slot_and_four_thousand_distinct_ones_fit() {
    let device = device();
    let mut heap = SamplerHeap::new(&device, heap::DEFAULT_SAMPLER_CAPACITY).unwrap();
    let first = heap.acquire(&sampler(7), None).unwrap();
    for _ in 0..99 {
        assert_eq!(heap.acquire(&sampler(7), None).unwrap(), first);
    }
    assert_eq!((heap.unique(), heap.count()), (1, 1));
    let indices: Vec<SamplerIndex> = (0..4096)
        .map(|i| heap.acquire(&sampler(i), None).unwrap())
        .collect();
    assert_eq!(heap.unique(), 4096, "4096 distinct samplers");
    assert_eq!(indices[7], first, "a hit on the first");
    assert_eq!(heap.count(), 4096);
    // Custom borders take three slots and dedup on the border too.
    let bordered = Sampler {
        border_colour: BorderColour::Custom,
        wrap_s: Wrap::ClampToBorder,
        ..sampler(1)
    };
    let red = CustomBorder {
        channel_0: 1.0f32.to_bits(),
        channel_3: 1.0f32.to_bits(),
        ..CustomBorder::default()
    };
    let blue = CustomBorder {
        channel_2: 1.0f32.to_bits(),
        channel_3: 1.0f32.to_bits(),
        ..CustomBorder::default()
    };
    let a = heap.acquire(&bordered, Some(&red)).unwrap();
    let b = heap.acquire(&bordered, Some(&blue)).unwrap();
    assert_eq!(heap.acquire(&bordered, Some(&red)).unwrap(), a);
    assert_eq!(b.0, a.0 + 3);
    assert!(
        heap.acquire(&bordered, None).is_err(),
        "a custom border needs its colour"
    );
    // Releasing every reference frees the slot after retirement only.
    let retire = heap::RetirePoint { queue: 1, point: 9 };
    for _ in 0..101 {
        heap.release(first, retire).unwrap();
    }
    assert!(heap.release(first, retire).is_err(), "no references left");
    let fresh = Sampler {
        max_lod: agx_hw::Lod::from_f32(3.0),
        ..Sampler::default()
    };
    let taken = heap.acquire(&fresh, None).unwrap();
    assert_ne!(taken, first, "not reused before retirement");
    assert_eq!(heap.reclaim(1, 8), 0);
    assert_eq!(heap.reclaim(2, 9), 0, "another queue's point");
    assert_eq!(heap.reclaim(1, 9), 1);
    let other = Sampler {
        max_lod: agx_hw::Lod::from_f32(4.0),
        ..Sampler::default()
    };
    assert_eq!(heap.acquire(&other, None).unwrap(), first, "reused after");
    // A small heap reports when it is full.
    let mut small = SamplerHeap::new(&device, 4).unwrap();
    for i in 0..4 {
        small.acquire(&sampler(i), None).unwrap();
    }
    assert!(matches!(
        small.acquire(&sampler(4), None),
        Err(Error::HeapFull { capacity: 4, .. })
    ));
}

#[test_log::test]
fn a_shared_sampler_waits_for_every_user_queue() {
    let device = device();
    let mut heap = SamplerHeap::new(&device, 16).unwrap();
    // Two users on two queues share one slot.
    let a = heap.acquire(&sampler(3), None).unwrap();
    let b = heap.acquire(&sampler(3), None).unwrap();
    assert_eq!(a, b);
    heap.release(
        a,
        heap::RetirePoint {
            queue: 1,
            point: 10,
        },
    )
    .unwrap();
    heap.release(b, heap::RetirePoint { queue: 2, point: 3 })
        .unwrap();
    // Queue 2 is done, but queue 1's work may still read the slot.
    assert_eq!(heap.reclaim(2, 3), 0);
    let other = heap.acquire(&sampler(4), None).unwrap();
    assert_ne!(other, a, "not reused while queue 1 may read it");
    assert_eq!(heap.reclaim(1, 9), 0);
    assert_eq!(heap.reclaim(1, 10), 1);
    assert_eq!(
        heap.acquire(&sampler(5), None).unwrap(),
        a,
        "reused after both"
    );
}

/// Vertex shader: position (xyzw) and uv (2 words) from 8-word vertices
/// at u0_u1.
const VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 3
    device_load 0, i32, xy, r12_r13, u2_u3, r5, unsigned, lsl 3
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    st_var 1, r12, 4
    st_var 1, r13, 5
    stop";

/// Fragment shader: samples the descriptor at byte offset u0 of the
/// image heap (base in u60_u61) with sampler-heap entry u1.
const BINDLESS_FS: &str = "
    iter r2_r3, cf0, center, 0, 0, 0, 0, 0
    mov r13, u0
    mov r14, u1
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, u60_u61, r13, r14l, tex_2d, r2_r3, auto_lod, 0, 0, r0
    wait 0
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

#[test_log::test]
fn a_quad_samples_through_both_heaps_and_a_non_resident_handle_reads_zero() {
    let device = device();
    let queue = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
    let mut images = ImageHeap::new(&device, heap::DEFAULT_IMAGE_CAPACITY).unwrap();
    let mut samplers = SamplerHeap::new(&device, heap::DEFAULT_SAMPLER_CAPACITY).unwrap();
    // Push the texture's slot into the second chunk.
    for _ in 2..DESCRIPTORS_PER_CHUNK + 3 {
        images.alloc().unwrap();
    }
    let slot = images.alloc().unwrap();
    assert!(slot.0 > DESCRIPTORS_PER_CHUNK);
    let texture = Image::new(&device, 8, 8, Format::Rgba8Unorm).unwrap();
    let texels: Vec<u8> = (0..64u32)
        .flat_map(|i| [(i * 4) as u8, 255 - (i * 4) as u8, 7, 255])
        .collect();
    texture.write_pixels(&texels).unwrap();
    images
        .set_texture(slot, &texture.texture_descriptor())
        .unwrap();
    // Some samplers first, so the one used is not slot 0.
    for i in 0..40 {
        samplers.acquire(&sampler(i), None).unwrap();
    }
    let nearest = samplers.acquire(&Sampler::default(), None).unwrap();
    let pipeline = Arc::new(
        GraphicsPipeline::new(
            &device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: VS,
                fragment: BINDLESS_FS,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 6,
                varyings: vec![Varying {
                    slot: 4,
                    components: 2,
                    interpolation: Interpolation::Linear,
                }],
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    );
    let mut vertices = Vec::new();
    for [x, y] in [
        [-1.0f32, 1.0],
        [1.0, 1.0],
        [-1.0, -1.0],
        [1.0, 1.0],
        [1.0, -1.0],
        [-1.0, -1.0],
    ] {
        let (u, v) = ((x + 1.0) / 2.0, (1.0 - y) / 2.0);
        for w in [x, y, 0.5, 1.0, u, v, 0.0, 0.0] {
            vertices.extend(w.to_le_bytes());
        }
    }
    let vb = device.upload(&vertices, false).unwrap();
    let image = Image::new(&device, 8, 8, Format::Rgba8Unorm).unwrap();
    let frame = |images: &ImageHeap| {
        let mut cb = CommandBuffer::new(&device, &programs);
        cb.bind_heaps(images, &samplers).unwrap();
        let mut pass = cb
            .begin_render_pass(&RenderPassDesc {
                colour: vec![ColourAttachment {
                    image: &image,
                    load: LoadOp::Clear([0.5, 0.5, 0.5, 0.5]),
                    store: StoreOp::Store,
                }],
                depth: None,
            })
            .unwrap();
        pass.set_pipeline(&pipeline);
        let va = vb.va();
        pass.set_vertex_uniforms(&[
            va as u32,
            (va >> 32) as u32,
            (va + 16) as u32,
            ((va + 16) >> 32) as u32,
        ]);
        let mut set = DescriptorSet::new();
        assert_eq!(set.push_image(slot), 0);
        assert_eq!(set.push_sampler(nearest), 1);
        pass.set_fragment_uniforms(set.words());
        pass.draw(6, 1, 0).unwrap();
        pass.end().unwrap();
        cb.finish().unwrap();
        queue
            .submit(vec![cb], &[], &[])
            .unwrap()
            .wait(Duration::from_secs(60))
            .unwrap();
        image.read_pixels().unwrap()
    };
    assert_eq!(frame(&images), texels, "every texel through the heaps");
    images.make_non_resident(slot).unwrap();
    assert!(
        frame(&images).iter().all(|&b| b == 0),
        "a non-resident handle reads zero"
    );
}

#[test_log::test]
fn a_custom_border_colour_comes_from_the_sampler_heap() {
    let device = device();
    let mut images = ImageHeap::new(&device, 64).unwrap();
    let mut samplers = SamplerHeap::new(&device, 64).unwrap();
    let texture = Image::new(&device, 4, 4, Format::Rgba8Unorm).unwrap();
    texture.write_pixels(&[255u8; 64]).unwrap();
    let slot = images.alloc().unwrap();
    images
        .set_texture(slot, &texture.texture_descriptor())
        .unwrap();
    // Green, in the sampled image's encoding: 8-bit unorm channels.
    let border = Format::Rgba8Unorm.border([0.0, 1.0, 0.0, 1.0]);
    assert_eq!(
        [
            border.channel_0,
            border.channel_1,
            border.channel_2,
            border.channel_3
        ],
        [0, 255, 0, 255]
    );
    let index = samplers
        .acquire(
            &Sampler {
                wrap_s: Wrap::ClampToBorder,
                wrap_t: Wrap::ClampToBorder,
                border_colour: BorderColour::Custom,
                ..Sampler::default()
            },
            Some(&border),
        )
        .unwrap();
    // uv from -1 to 2 across the target: the texture in the middle third,
    // the border around it.
    let pixels = sample_quad(
        &device,
        (&images, &samplers),
        (slot, index),
        (48, 48),
        (-1.0, 2.0),
    );
    let at = |x: usize, y: usize| &pixels[4 * (y * 48 + x)..4 * (y * 48 + x) + 4];
    assert_eq!(
        at(24, 24),
        [255, 255, 255, 255],
        "the texture in the middle"
    );
    assert_eq!(at(2, 2), [0, 255, 0, 255], "the custom border outside");
    assert_eq!(at(45, 30), [0, 255, 0, 255]);
}

/// Draws a quad over a `width` x `height` Rgba8Unorm target whose
/// fragments sample image-heap `slot` with sampler `sampler` (through
/// [`BINDLESS_FS`]), uv running from `uv.0` at the target's left and top
/// edges to `uv.1` at its right and bottom; returns the target's pixels.
fn sample_quad(
    device: &Device,
    (images, samplers): (&ImageHeap, &SamplerHeap),
    (slot, sampler): (DescriptorIndex, SamplerIndex),
    (width, height): (u32, u32),
    uv: (f32, f32),
) -> Vec<u8> {
    let queue = Queue::new(device).unwrap();
    let programs = Arc::new(ProgramCache::new(device));
    let pipeline = Arc::new(
        GraphicsPipeline::new(
            device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: VS,
                fragment: BINDLESS_FS,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 6,
                varyings: vec![Varying {
                    slot: 4,
                    components: 2,
                    interpolation: Interpolation::Linear,
                }],
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    );
    let mut vertices = Vec::new();
    for [x, y] in [
        [-1.0f32, 1.0],
        [1.0, 1.0],
        [-1.0, -1.0],
        [1.0, 1.0],
        [1.0, -1.0],
        [-1.0, -1.0],
    ] {
        let (u, v) = (
            uv.0 + (x + 1.0) / 2.0 * (uv.1 - uv.0),
            uv.0 + (1.0 - y) / 2.0 * (uv.1 - uv.0),
        );
        for w in [x, y, 0.5, 1.0, u, v, 0.0, 0.0] {
            vertices.extend(w.to_le_bytes());
        }
    }
    let vb = device.upload(&vertices, false).unwrap();
    let image = Image::new(device, width, height, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(device, &programs);
    cb.bind_heaps(images, samplers).unwrap();
    let mut pass = cb
        .begin_render_pass(&RenderPassDesc {
            colour: vec![ColourAttachment {
                image: &image,
                load: LoadOp::Clear([0.0; 4]),
                store: StoreOp::Store,
            }],
            depth: None,
        })
        .unwrap();
    pass.set_pipeline(&pipeline);
    let va = vb.va();
    pass.set_vertex_uniforms(&[
        va as u32,
        (va >> 32) as u32,
        (va + 16) as u32,
        ((va + 16) >> 32) as u32,
    ]);
    pass.set_fragment_uniforms(&[slot.byte_offset(), u32::from(sampler.0)]);
    pass.draw(6, 1, 0).unwrap();
    pass.end().unwrap();
    cb.finish().unwrap();
    queue
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    image.read_pixels().unwrap()
}

/// Four BC1 blocks worked out from the format's definition (the Khronos
/// Data Format Specification, S3TC): RGB565 endpoints c0 and c1, 2-bit
/// indices, texel i of a block at bits 2i..2i+2, rows of four.
/// Returns the blocks (2 x 2, row by row) and the 8 x 8 texels they hold.
fn bc1_blocks() -> (Vec<u8>, Vec<[u8; 4]>) {
    // Top left: white and black, c0 > c1 so four colours (white, black,
    // 2/3 white, 1/3 white); each texel's index is its column.
    let grey = [0xFF, 0xFF, 0x00, 0x00, 0xE4, 0xE4, 0xE4, 0xE4];
    // Top right: red (0xF800) over black, index 0 throughout.
    let red = [0x00, 0xF8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
    // Bottom left: c0 = black <= c1 = blue selects three colours and
    // transparent black (index 3); columns alternate blue (index 1) and
    // transparent.
    let holes = [0x00, 0x00, 0x1F, 0x00, 0xDD, 0xDD, 0xDD, 0xDD];
    // Bottom right: green (0x07E0) over blue, four colours; each row's
    // index is its row.
    let ramp = [0xE0, 0x07, 0x1F, 0x00, 0x00, 0x55, 0xAA, 0xFF];
    let blocks = [grey, red, holes, ramp].concat();
    let texel = |x: usize, y: usize| -> [u8; 4] {
        match (x / 4, y / 4) {
            (0, 0) => {
                let v = [255, 0, 170, 85][x % 4];
                [v, v, v, 255]
            }
            (1, 0) => [255, 0, 0, 255],
            (0, 1) if x.is_multiple_of(2) => [0, 0, 255, 255],
            (0, 1) => [0, 0, 0, 0],
            _ => [
                [0, 255, 0, 255],
                [0, 0, 255, 255],
                [0, 170, 85, 255],
                [0, 85, 170, 255],
            ][y % 4],
        }
    };
    let texels = (0..64).map(|i| texel(i % 8, i / 8)).collect();
    (blocks, texels)
}

#[test_log::test]
fn block_compressed_images_sample_their_decoded_texels_linear_and_tiled() {
    let device = device();
    let mut images = ImageHeap::new(&device, 64).unwrap();
    let mut samplers = SamplerHeap::new(&device, 64).unwrap();
    let nearest = samplers
        .acquire(
            &Sampler {
                mip_filter: MipFilter::Nearest,
                max_lod: Lod::from_f32(15.0),
                ..Sampler::default()
            },
            None,
        )
        .unwrap();
    let bc1 = Format::Block {
        format: BlockFormat::Bc1,
        srgb: false,
    };
    let (blocks, texels) = bc1_blocks();
    let expected: Vec<u8> = texels.concat();
    // Binds `image` to a new image-heap slot and samples it over a
    // `size` target, uv 0 to 1.
    let mut sample = |image: &Image, size: (u32, u32)| {
        let slot = images.alloc().unwrap();
        images
            .set_texture(slot, &image.texture_descriptor())
            .unwrap();
        sample_quad(
            &device,
            (&images, &samplers),
            (slot, nearest),
            size,
            (0.0, 1.0),
        )
    };

    // Linear: rows of blocks, 16-byte aligned.
    let linear = Image::new(&device, 8, 8, bc1).unwrap();
    assert_eq!(linear.stride_bytes(), 16, "two 8-byte blocks a row");
    linear.write_pixels(&blocks).unwrap();
    let pixels = sample(&linear, (8, 8));
    assert_eq!(pixels, expected, "linear BC1");

    // GPU-tiled with a second level (one solid red block), which a 4 x 4
    // target reads (lod 1).
    let tiled = Image::new_tiled(&device, 8, 8, bc1, 2).unwrap();
    tiled.write_level(0, &blocks).unwrap();
    tiled.write_level(1, &blocks[8..16]).unwrap();
    assert!(
        tiled.write_level(1, &blocks[..16]).is_err(),
        "level 1 is one block"
    );
    let pixels = sample(&tiled, (8, 8));
    assert_eq!(pixels, expected, "tiled BC1, level 0");
    let pixels = sample(&tiled, (4, 4));
    assert_eq!(pixels, [255, 0, 0, 255].repeat(16), "tiled BC1, level 1");

    // ASTC 5x5 on a 10 x 5 image: two void-extent blocks (block mode
    // 0x1FC, LDR, no extent: every bit 10-63 set), each one RGBA colour
    // of four UNORM16 values at bits 64-127.
    let void_extent = |rgba: [u16; 4]| -> Vec<u8> {
        let mut block = 0xFFFF_FFFF_FFFF_FDFCu64.to_le_bytes().to_vec();
        block.extend(rgba.iter().flat_map(|c| c.to_le_bytes()));
        block
    };
    let astc = Format::Block {
        format: BlockFormat::Astc {
            width: 5,
            height: 5,
        },
        srgb: false,
    };
    let image = Image::new_tiled(&device, 10, 5, astc, 1).unwrap();
    image
        .write_level(
            0,
            &[
                void_extent([0xFFFF, 0, 0x8080, 0xFFFF]),
                void_extent([0x3333, 0x6666, 0xCCCC, 0xFFFF]),
            ]
            .concat(),
        )
        .unwrap();
    let pixels = sample(&image, (10, 5));
    let row = [[255, 0, 128, 255].repeat(5), [51, 102, 204, 255].repeat(5)].concat();
    assert_eq!(pixels, row.repeat(5), "ASTC 5x5 void-extent blocks");

    // What a block format cannot be or do here.
    assert!(Image::new_compressed(&device, 16, 16, bc1, 1).is_err());
    assert!(linear.read_pixels().is_err());
    assert!(linear.clear(&[0; 8]).is_err());
    let srgb_bc4 = Format::Block {
        format: BlockFormat::Bc4 { signed: false },
        srgb: true,
    };
    assert!(
        Image::new(&device, 4, 4, srgb_bc4).is_err(),
        "BC4 has no sRGB"
    );
    let odd_astc = Format::Block {
        format: BlockFormat::Astc {
            width: 7,
            height: 7,
        },
        srgb: false,
    };
    assert!(Image::new(&device, 7, 7, odd_astc).is_err(), "no 7x7 ASTC");
}

#[test]
fn block_format_borders_follow_mesas_channel_widths() {
    let border = |format: BlockFormat, srgb: bool, rgba: [f32; 4]| {
        let b = Format::Block { format, srgb }.border(rgba);
        [b.channel_0, b.channel_1, b.channel_2, b.channel_3]
    };
    // RGTC: 14-bit channels, signed ones in a two's complement word.
    assert_eq!(
        border(
            BlockFormat::Bc5 { signed: false },
            false,
            [1.0, 0.5, 0.0, 1.0]
        ),
        [16383, 8192, 0, 16383]
    );
    assert_eq!(
        border(
            BlockFormat::Bc4 { signed: true },
            false,
            [-1.0, 0.0, 0.0, 1.0]
        ),
        [(-8191i32) as u32, 0, 0, 8191]
    );
    // EAC: 11-bit.
    assert_eq!(
        border(
            BlockFormat::EacR11 { signed: false },
            false,
            [1.0, 0.0, 0.0, 1.0]
        ),
        [2047, 0, 0, 2047]
    );
    // BC6H: halves.
    assert_eq!(
        border(
            BlockFormat::Bc6h { signed: true },
            false,
            [2.0, -1.0, 0.5, 1.0]
        ),
        [0x4000, 0xBC00, 0x3800, 0x3C00]
    );
    // BC7 and sRGB BC1: 8-bit, colour channels 12-bit in sRGB.
    assert_eq!(
        border(BlockFormat::Bc7, false, [1.0, 0.0, 0.2, 1.0]),
        [255, 0, 51, 255]
    );
    assert_eq!(
        border(BlockFormat::Bc1, true, [1.0, 0.0, 0.2, 1.0]),
        [4095, 0, 819, 255]
    );
}
