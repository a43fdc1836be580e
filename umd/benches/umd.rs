//! Descriptor heaps and draw recording. Results are recorded in
//! Documentation/performance.md.

use std::hint::black_box;
use std::sync::Arc;

use agx_hw::formats::{Filter, Sampler, Wrap};
use agx_umd::heap::{DescriptorIndex, DEFAULT_IMAGE_CAPACITY, DEFAULT_SAMPLER_CAPACITY};
use agx_umd::*;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn device() -> Device {
    Device::open_simulated(agx_sim::SystemConfig {
        ram_bytes: 2 << 30,
        ..agx_sim::SystemConfig::default()
    })
    .unwrap()
}

/// Allocate + free (+ reclaim) of one descriptor with `live` others
/// allocated: the cost must not depend on `live`.
fn image_heap(c: &mut Criterion) {
    let device = device();
    let mut group = c.benchmark_group("image_heap");
    for live in [1_000u32, 1_000_000, 16_000_000] {
        let mut heap = ImageHeap::new(&device, DEFAULT_IMAGE_CAPACITY).unwrap();
        for _ in 2..live {
            heap.alloc().unwrap();
        }
        let mut point = 0u64;
        group.bench_function(format!("alloc+free at {live} live"), |b| {
            b.iter(|| {
                let index: DescriptorIndex = heap.alloc().unwrap();
                point += 1;
                heap.free(black_box(index), heap::RetirePoint { queue: 1, point })
                    .unwrap();
                heap.reclaim(1, point).unwrap();
            })
        });
        eprintln!(
            "{live} live: {} MiB bound of {} MiB reserved",
            heap.committed_bytes() >> 20,
            (u64::from(heap.capacity()) * 24) >> 20
        );
    }
    group.finish();
}

fn sampler(i: u32) -> Sampler {
    Sampler {
        min_lod: agx_hw::Lod::from_raw((i % 896) as u16).unwrap_or_default(),
        wrap_s: if (i / 896).is_multiple_of(2) {
            Wrap::Repeat
        } else {
            Wrap::ClampToEdge
        },
        magnify: if (i / 1792).is_multiple_of(2) {
            Filter::Nearest
        } else {
            Filter::Linear
        },
        ..Sampler::default()
    }
}

fn sampler_heap(c: &mut Criterion) {
    let device = device();
    let mut heap = SamplerHeap::new(&device, DEFAULT_SAMPLER_CAPACITY).unwrap();
    for i in 0..2000 {
        heap.acquire(&sampler(i), None).unwrap();
    }
    let mut group = c.benchmark_group("sampler_heap");
    group.bench_function("create, dedup hit", |b| {
        b.iter(|| {
            let index = heap.acquire(black_box(&sampler(1234)), None).unwrap();
            heap.release(index, heap::RetirePoint { queue: 1, point: 0 })
                .unwrap();
        })
    });
    group.bench_function("create, miss (new slot)", |b| {
        b.iter(|| {
            let index = heap.acquire(black_box(&sampler(3000)), None).unwrap();
            heap.release(index, heap::RetirePoint { queue: 1, point: 0 })
                .unwrap();
            heap.reclaim(1, 0);
        })
    });
    group.finish();
}

const VS: &str = "
    device_load 0, i32, xyzw, r8_r9_r10_r11, u0_u1, r5, unsigned, lsl 2
    wait 0
    st_var 1, r8, 0
    st_var 1, r9, 1
    st_var 1, r10, 2
    st_var 1, r11, 3
    stop";

const FS: &str = "
    mov r4, u0
    mov r5, u1
    mov r6, u2
    mov r7, u3
    st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0
    stop";

/// Recording 1000 draws into a pass, without and with a state change
/// (new fragment uniforms) per draw.
fn draw_recording(c: &mut Criterion) {
    let device = device();
    let programs = Arc::new(ProgramCache::new(&device));
    let image = Image::new(&device, 64, 64, Format::Rgba8Unorm).unwrap();
    let pipeline = Arc::new(
        GraphicsPipeline::new(
            &device,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: VS,
                fragment: FS,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 4,
                varyings: Vec::new(),
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::ShaderStores,
            },
        )
        .unwrap(),
    );
    let mut group = c.benchmark_group("draw_recording");
    // A pass of 10 000 draws next to one of 1 000: the difference over
    // 9 000 is the cost of a draw without the pass's own (command buffer,
    // its memory, the pass's records).
    for (draws, changing) in [(1000u32, false), (10_000, false), (1000, true)] {
        group.throughput(Throughput::Elements(u64::from(draws)));
        let name = if changing {
            format!("{draws} draws, new fragment uniforms each")
        } else {
            format!("{draws} draws, no state change")
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut cb = CommandBuffer::new(&device, &programs);
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
                pass.set_vertex_uniforms(&[0, 1]);
                for i in 0..draws {
                    if changing {
                        pass.set_fragment_uniforms(&[i, 0, 0, 0]);
                    }
                    pass.draw(3, 1, 3 * i).unwrap();
                }
                pass.end().unwrap();
                black_box(cb.stats())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, image_heap, sampler_heap, draw_recording);
criterion_main!(benches);
