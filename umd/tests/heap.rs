//! Descriptor heaps: allocation against a model, growth that keeps the
//! base, recycling after the GPU is done, sampler deduplication, and
//! bindless sampling through both heaps on the simulated GPU.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agx_hw::formats::{BorderColour, CustomBorder, Filter, Sampler, Wrap};
use agx_umd::heap::{DescriptorIndex, CHUNK_BYTES, DESCRIPTORS_PER_CHUNK, NULL_PBE};
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
    let queue = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
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
    // uv from -1 to 2 across the target: the texture in the middle third,
    // the border around it.
    let mut vertices = Vec::new();
    for [x, y] in [
        [-1.0f32, 1.0],
        [1.0, 1.0],
        [-1.0, -1.0],
        [1.0, 1.0],
        [1.0, -1.0],
        [-1.0, -1.0],
    ] {
        let (u, v) = ((x + 1.0) * 1.5 - 1.0, (1.0 - y) * 1.5 - 1.0);
        for w in [x, y, 0.5, 1.0, u, v, 0.0, 0.0] {
            vertices.extend(w.to_le_bytes());
        }
    }
    let vb = device.upload(&vertices, false).unwrap();
    let image = Image::new(&device, 48, 48, Format::Rgba8Unorm).unwrap();
    let mut cb = CommandBuffer::new(&device, &programs);
    cb.bind_heaps(&images, &samplers).unwrap();
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
    pass.set_fragment_uniforms(&[slot.byte_offset(), u32::from(index.0)]);
    pass.draw(6, 1, 0).unwrap();
    pass.end().unwrap();
    cb.finish().unwrap();
    queue
        .submit(vec![cb], &[], &[])
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    let pixels = image.read_pixels().unwrap();
    let at = |x: usize, y: usize| &pixels[4 * (y * 48 + x)..4 * (y * 48 + x) + 4];
    assert_eq!(
        at(24, 24),
        [255, 255, 255, 255],
        "the texture in the middle"
    );
    assert_eq!(at(2, 2), [0, 255, 0, 255], "the custom border outside");
    assert_eq!(at(45, 30), [0, 255, 0, 255]);
}
