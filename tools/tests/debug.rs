//! `agx-debug trace` on captures of our own work, checked against Rust
//! models of the programs traced.

use std::sync::Arc;
use std::time::Duration;

use agx_capture::Capture;
use agx_sim::PixelEvent;
use agx_tools::debug::{
    history_listing, map, map_image, pixel_history, trace, Invocation, MapKind, PixelHistory,
    PixelStep, TraceStage, Traced, LEGEND_ROWS,
};
use agx_umd::*;

mod common {
    pub(crate) mod capture;
}

use common::capture::{captured, device, run_to_completion, VS};

fn pair(va: u64) -> [u32; 2] {
    [va as u32, (va >> 32) as u32]
}

/// Collatz step counts: thread i counts the steps from n = i + 1 down to
/// 1 and stores them at word i of the buffer at u0_u1. Divergent nested
/// branches in a loop whose trip count differs per lane.
const COLLATZ: &str = "
    get_sr r1, sr80
    iadd r1, r1, 1
    mov_imm r2, 0
    if_icmp r0l, nueq, r1, 1, 1
    jmp_exec_none done
loop:
    and r3, r1, 1
    if_icmp r0l, ueq, r3, 1, 1
        imadd r1, r1, 3, 1
    else_icmp r0l, ueq, 0, 0, 1
        bfeil r1, 0, r1, 1
    pop_exec r0l, 1
    iadd r2, r2, 1
    while_icmp r0l, nueq, r1, 1, 1
    jmp_exec_any loop
done:
    pop_exec r0l, 1
    get_sr r4, sr80
    device_store 0, i32, x, r2, u0_u1, r4, unsigned, 0
    stop";

/// A capture of one dispatch of `source` over `threads` threads in one
/// threadgroup, its u0_u1 a zeroed buffer of 64 words, and the buffer's
/// first `words` words afterwards.
fn dispatch_capture(
    name: &str,
    source: &str,
    threads: u32,
    words: usize,
) -> (Capture, Vec<u32>, u64) {
    let device = device();
    let queue = Queue::new(&device).unwrap();
    let programs = Arc::new(ProgramCache::new(&device));
    let out = device.upload(&[0u8; 4 * 64], true).unwrap();
    let capture = captured(&device, name, || {
        let mut cb = CommandBuffer::new(&device, &programs);
        let shader = Shader::new(&device, source).unwrap();
        let bindings = Bindings::default()
            .with_uniform_words(cb.arena(), &pair(out.va()))
            .unwrap();
        cb.dispatch(&shader, &bindings, [threads, 1, 1], [threads, 1, 1])
            .unwrap();
        cb.finish().unwrap();
        queue
            .submit(vec![cb], &[], &[])
            .unwrap()
            .wait(Duration::from_secs(60))
            .unwrap();
    });
    let values = out
        .read_all()
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take(words)
        .collect();
    (capture, values, out.va())
}

/// A capture of COLLATZ over 64 threads in threadgroups of 64.
fn collatz_capture(name: &str) -> (Capture, Vec<u32>) {
    let (capture, words, _) = dispatch_capture(name, COLLATZ, 64, 64);
    (capture, words)
}

/// One step of the model: the instruction's mnemonic, the execution mask
/// it runs with, and, where the traced lane runs it, the lane's (r1, r2)
/// after it.
type ModelStep = (&'static str, u32, Option<(u32, u32)>);

/// COLLATZ run by the 32 lanes of the SIMD-group holding threads
/// `first`.., as the hardware's exec-mask stack runs it, seen from `lane`.
fn collatz_model(first: u32, lane: usize) -> Vec<ModelStep> {
    let mut n: [u32; 32] = std::array::from_fn(|l| first + l as u32 + 1);
    let mut count = [0u32; 32];
    let all = u32::MAX;
    let mask = |f: &dyn Fn(usize) -> bool| (0..32).filter(|&l| f(l)).fold(0u32, |m, l| m | 1 << l);
    let mut steps: Vec<ModelStep> = Vec::new();
    let mut push = |name, exec: u32, n: &[u32; 32], count: &[u32; 32]| {
        let mine = (exec & (1 << lane) != 0).then_some((n[lane], count[lane]));
        steps.push((name, exec, mine));
    };
    let zero = [0u32; 32];
    push(
        "get_sr",
        all,
        &std::array::from_fn(|l| first + l as u32),
        &zero,
    );
    push("iadd", all, &n, &zero);
    push("mov_imm", all, &n, &count);
    push("if_icmp", all, &n, &count);
    let mut active = mask(&|l| n[l] != 1);
    push("jmp_exec_none", active, &n, &count);
    if active != 0 {
        loop {
            push("and", active, &n, &count);
            let odd = active & mask(&|l| n[l] % 2 == 1);
            let even = active & !odd;
            push("if_icmp", active, &n, &count);
            for (l, n) in n.iter_mut().enumerate() {
                if odd & (1 << l) != 0 {
                    *n = 3 * *n + 1;
                }
            }
            push("imadd", odd, &n, &count);
            push("else_icmp", odd, &n, &count);
            for (l, n) in n.iter_mut().enumerate() {
                if even & (1 << l) != 0 {
                    *n /= 2;
                }
            }
            push("bfeil", even, &n, &count);
            push("pop_exec", even, &n, &count);
            for (l, count) in count.iter_mut().enumerate() {
                if active & (1 << l) != 0 {
                    *count += 1;
                }
            }
            push("iadd", active, &n, &count);
            push("while_icmp", active, &n, &count);
            active &= mask(&|l| n[l] != 1);
            push("jmp_exec_any", active, &n, &count);
            if active == 0 {
                break;
            }
        }
    }
    push("pop_exec", active, &n, &count);
    push("get_sr", all, &n, &count);
    push("device_store", all, &n, &count);
    push("stop", all, &n, &count);
    steps
}

fn value(traced: &Traced, step: usize, name: &str) -> Option<u64> {
    traced.steps[step]
        .operands
        .iter()
        .find(|o| o.name == name)
        .map(|o| o.after)
}

fn collatz_steps(mut n: u32) -> u32 {
    let mut steps = 0;
    while n != 1 {
        n = if n % 2 == 1 { 3 * n + 1 } else { n / 2 };
        steps += 1;
    }
    steps
}

#[test]
fn a_compute_threads_trace_follows_the_programs_model_step_by_step() {
    let (capture, words) = collatz_capture("debug-collatz.cap");
    // The kernel ran right (and its model is the right model).
    for (i, &w) in words.iter().enumerate() {
        assert_eq!(w, collatz_steps(i as u32 + 1), "thread {i}");
    }
    // Thread 6 (n = 7, 16 steps) in the first SIMD-group, whose longest
    // lane (n = 27) loops 111 times; thread 40 (n = 41) in the second;
    // thread 0 (n = 1) never enters the loop.
    for (thread, first) in [(6u32, 0u32), (40, 32), (0, 0)] {
        let report = trace(
            &capture,
            0,
            Invocation::Thread {
                id: [thread, 0, 0],
                dispatch: None,
            },
            TraceStage::Fragment,
        )
        .unwrap();
        assert_eq!(report.failure, None);
        assert_eq!(report.invocations.len(), 1, "thread {thread}");
        let traced = &report.invocations[0];
        let lane = (thread - first) as usize;
        assert_eq!(traced.stage, "compute");
        assert_eq!(traced.lane, lane);
        assert_eq!(traced.present, u32::MAX);
        assert!(traced.control_block.is_some());
        let model = collatz_model(first, lane);
        let names: Vec<&str> = traced
            .steps
            .iter()
            .map(|s| s.text.split_whitespace().next().unwrap_or(""))
            .collect();
        let expected: Vec<&str> = model.iter().map(|m| m.0).collect();
        assert_eq!(
            names, expected,
            "thread {thread}: the instructions executed"
        );
        for (i, ((_, exec, mine), step)) in model.iter().zip(&traced.steps).enumerate() {
            let at = format!("thread {thread}, step {i}: {}", step.text);
            assert_eq!(step.exec_mask, *exec, "{at}: the execution mask");
            assert_eq!(step.active, mine.is_some(), "{at}: the lane runs it");
            assert_eq!(step.error, None, "{at}");
            let Some((n, count)) = *mine else {
                // An inactive lane's registers do not change, but for
                // the nesting count (r0l) the exec-mask instructions keep
                // in every lane.
                assert!(
                    step.operands
                        .iter()
                        .all(|o| o.before == o.after || o.name == "r0l"),
                    "{at}: {:?}",
                    step.operands
                );
                continue;
            };
            match expected[i] {
                "get_sr" if i == 0 => {
                    assert_eq!(value(traced, i, "r1"), Some(u64::from(thread)), "{at}")
                }
                "iadd" if i == 1 => assert_eq!(value(traced, i, "r1"), Some(u64::from(n)), "{at}"),
                "imadd" | "bfeil" => {
                    assert_eq!(value(traced, i, "r1"), Some(u64::from(n)), "{at}");
                    let before = traced.steps[i].operands.iter().find(|o| o.name == "r1");
                    assert!(before.is_some_and(|o| o.destination), "{at}: r1 written");
                }
                "and" => assert_eq!(value(traced, i, "r3"), Some(u64::from(n & 1)), "{at}"),
                "iadd" => assert_eq!(value(traced, i, "r2"), Some(u64::from(count)), "{at}"),
                "device_store" => {
                    // The store reads the count and the thread's index.
                    assert_eq!(value(traced, i, "r2"), Some(u64::from(count)), "{at}");
                    assert_eq!(value(traced, i, "r4"), Some(u64::from(thread)), "{at}");
                }
                _ => {}
            }
        }
        assert_eq!(
            model.iter().rev().find_map(|m| m.2).map(|(_, c)| c),
            Some(collatz_steps(thread + 1))
        );
    }
}

#[test]
fn a_thread_no_dispatch_ran_traces_nothing() {
    let (capture, _) = collatz_capture("debug-none.cap");
    let report = trace(
        &capture,
        0,
        Invocation::Thread {
            id: [64, 0, 0],
            dispatch: None,
        },
        TraceStage::Fragment,
    )
    .unwrap();
    assert!(report.invocations.is_empty());
    for (dispatch, found) in [(Some(0), 1), (Some(1), 0), (None, 1)] {
        let report = trace(
            &capture,
            0,
            Invocation::Thread {
                id: [3, 0, 0],
                dispatch,
            },
            TraceStage::Fragment,
        )
        .unwrap();
        assert_eq!(report.invocations.len(), found, "dispatch {dispatch:?}");
    }
    let report = trace(
        &capture,
        0,
        Invocation::Pixel { x: 0, y: 0 },
        TraceStage::Fragment,
    )
    .unwrap();
    assert!(
        report.invocations.is_empty(),
        "a compute capture has no fragments"
    );
}

/// Fragment shader: red, with the pixel's position read into r8 and r9.
const POSITION_FS: &str = "
    get_sr r8, sr80
    get_sr r9, sr81
    mov_imm r4, 0x3f800000
    mov_imm r5, 0
    mov_imm r6, 0
    mov_imm r7, 0x3f800000";

/// One draw of a test pass: its fragment shader and blend, and a
/// triangle (clip-space corners) at depth `z`.
#[derive(Clone, Copy)]
struct TestDraw<'a> {
    fs: &'a str,
    blend: Blend,
    corners: [[f32; 2]; 3],
    z: f32,
}

/// The triangle over a target's top-left half.
const TOP_LEFT: [[f32; 2]; 3] = [[-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]];

/// A capture of one pass over a 32x32 RGBA8 target cleared to 0, with a
/// depth buffer cleared to 1.0 and tested `less` (writes on) when
/// `depth_test`, drawing `draws` in order.
fn pass_capture(name: &str, depth_test: bool, draws: &[TestDraw<'_>]) -> Capture {
    let d = device();
    let programs = Arc::new(ProgramCache::new(&d));
    let image = Image::new(&d, 32, 32, Format::Rgba8Unorm).unwrap();
    let depth = depth_test.then(|| DepthImage::new(&d, 32, 32).unwrap());
    let mut pipelines: Vec<((&str, Blend), Arc<GraphicsPipeline>)> = Vec::new();
    let mut recorded = Vec::new();
    for draw in draws {
        let mut bytes = Vec::new();
        for [x, y] in draw.corners {
            for v in [x, y, draw.z, 1.0] {
                bytes.extend(v.to_le_bytes());
            }
        }
        let key = (draw.fs, draw.blend);
        let at = match pipelines.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                let desc = GraphicsPipelineDesc {
                    vertex_stack_bytes: 0,
                    fragment_stack_bytes: 0,
                    vertex: VS,
                    fragment: draw.fs,
                    vertex_layout: None,
                    stencil: None,
                    vertex_outputs: 4,
                    varyings: Vec::new(),
                    depth: depth_test.then_some(DepthState {
                        function: agx_hw::formats::ZsFunc::Less,
                        write: true,
                    }),
                    cull: CullMode::None,
                    front_ccw: false,
                    topology: Topology::Triangles,
                    colour_output: ColourOutput::Registers {
                        format: Format::Rgba8Unorm,
                        blend: draw.blend,
                    },
                };
                pipelines.push((key, Arc::new(GraphicsPipeline::new(&d, &desc).unwrap())));
                pipelines.len() - 1
            }
        };
        recorded.push((at, d.upload(&bytes, false).unwrap()));
    }
    captured(&d, name, || {
        let mut cb = CommandBuffer::new(&d, &programs);
        let mut pass = cb
            .begin_render_pass(&RenderPassDesc {
                colour: vec![ColourAttachment {
                    image: &image,
                    load: LoadOp::Clear([0.0; 4]),
                    store: StoreOp::Store,
                }],
                depth: depth.as_ref().map(|image| DepthAttachment {
                    image,
                    load: LoadOp::Clear(1.0),
                    store: StoreOp::DontCare,
                    stencil: None,
                }),
            })
            .unwrap();
        for (at, vertices) in &recorded {
            pass.set_pipeline(&pipelines[*at].1);
            pass.set_vertex_uniforms(&pair(vertices.va()));
            pass.draw(3, 1, 0).unwrap();
        }
        pass.end().unwrap();
        run_to_completion(&d, cb);
    })
}

/// A capture of one pass over a 32x32 target drawing the triangle over
/// its top-left half `draws` times with the fragment shader `fs`, blended
/// by `blend`.
fn triangle_capture(name: &str, draws: usize, blend: Blend, fs: &str) -> Capture {
    let draw = TestDraw {
        fs,
        blend,
        corners: TOP_LEFT,
        z: 0.5,
    };
    pass_capture(name, false, &vec![draw; draws])
}

#[test]
fn a_pixels_fragments_and_tile_programs_are_traced_where_they_ran() {
    // Two opaque draws of one triangle: hidden-surface removal shades the
    // pixel once (the later draw hides the earlier). Blended, each draw
    // reads the tilebuffer and is shaded in turn.
    let opaque = triangle_capture("debug-opaque.cap", 2, Blend::Replace, POSITION_FS);
    let report = trace(
        &opaque,
        0,
        Invocation::Pixel { x: 3, y: 5 },
        TraceStage::Fragment,
    )
    .unwrap();
    assert_eq!(report.invocations.len(), 1, "hidden-surface removal");
    let capture = triangle_capture("debug-blended.cap", 2, Blend::Alpha, POSITION_FS);
    let pixel = |x, y, stage| trace(&capture, 0, Invocation::Pixel { x, y }, stage).unwrap();
    // Inside the triangle: one fragment per draw, in the lane of its
    // quad the pixel's position gives (bit 0 x, bit 1 y), reading its
    // own position.
    let report = pixel(3, 5, TraceStage::Fragment);
    assert_eq!(report.invocations.len(), 2, "two draws shade the pixel");
    for traced in &report.invocations {
        assert_eq!(traced.stage, "fragment");
        assert_eq!(traced.lane % 4, 1 + 2);
        assert!(traced.steps[0].text.starts_with("get_sr r8, sr80"));
        assert_eq!(value(traced, 0, "r8"), Some(3));
        assert_eq!(value(traced, 1, "r9"), Some(5));
        assert!(traced.steps.iter().all(|s| s.active && s.error.is_none()));
        let last = traced.steps.last().unwrap();
        assert!(last.text.starts_with("stop"), "{}", last.text);
        // The colour stored is what the shader set, blended over what
        // the tilebuffer held.
        let store = traced
            .steps
            .iter()
            .position(|s| s.text.starts_with("st_tile"))
            .expect("the colour is stored");
        let read = |step: usize, name: &str| {
            traced.steps[step]
                .operands
                .iter()
                .find(|o| o.name == name)
                .map(|o| o.before)
        };
        assert_eq!(read(store, "r4"), Some(0x3f80_0000));
        assert_eq!(read(store, "r5"), Some(0));
        assert_eq!(read(store, "r7"), Some(0x3f80_0000));
    }
    // What each blended fragment loaded from the tilebuffer: the clear
    // colour's red (0), then the first draw's (1.0).
    let loaded: Vec<Option<u64>> = report
        .invocations
        .iter()
        .map(|t| {
            let at = t.steps.iter().position(|s| s.text.starts_with("ld_tile"))?;
            value(t, at, "r8")
        })
        .collect();
    assert_eq!(loaded, [Some(0), Some(0x3f80_0000)]);
    // On either side of its long edge (x + y = 32 at pixel centres), in
    // one quad: (14, 16) is covered; (15, 17) runs only as a helper lane
    // for its quad's derivatives, and is no fragment of the pixel.
    assert_eq!(pixel(14, 16, TraceStage::Fragment).invocations.len(), 2);
    assert!(pixel(15, 17, TraceStage::Fragment).invocations.is_empty());
    // Outside it: no fragment, but the tile's background and end-of-tile
    // programs ran there.
    assert!(pixel(30, 30, TraceStage::Fragment).invocations.is_empty());
    let background = pixel(30, 30, TraceStage::Background);
    assert_eq!(background.invocations.len(), 1);
    assert_eq!(background.invocations[0].stage, "background");
    assert_eq!(value(&background.invocations[0], 0, "r8"), None);
    let end = pixel(30, 30, TraceStage::EndOfTile);
    assert_eq!(end.invocations.len(), 1);
    assert_eq!(end.invocations[0].stage, "end-of-tile");
    assert_eq!(end.invocations[0].lane, 0);
    assert!(end.invocations[0]
        .steps
        .iter()
        .any(|s| s.text.starts_with("image_write_block")));
    // A vertex: the shader starts with its id in r5.
    let vertex = trace(
        &capture,
        0,
        Invocation::Vertex {
            index: 2,
            draw: None,
        },
        TraceStage::Fragment,
    )
    .unwrap();
    assert_eq!(vertex.invocations.len(), 2, "one per draw");
    let numbers: Vec<_> = vertex.invocations.iter().map(|t| t.number).collect();
    assert_eq!(numbers, [Some(0), Some(1)]);
    let second = trace(
        &capture,
        0,
        Invocation::Vertex {
            index: 2,
            draw: Some(1),
        },
        TraceStage::Fragment,
    )
    .unwrap();
    assert_eq!(second.invocations.len(), 1);
    assert_eq!(
        second.invocations[0].control_block,
        vertex.invocations[1].control_block
    );
    assert!(vertex.invocations.iter().all(|t| t.stage == "vertex"));
    let load = &vertex.invocations[0].steps[0];
    assert!(load.text.starts_with("device_load"), "{}", load.text);
    assert_eq!(
        load.operands
            .iter()
            .find(|o| o.name == "r5")
            .map(|o| o.before),
        Some(2)
    );
}

/// Atomic adds: thread i adds i + 1 to word 0 of the buffer at u0_u1 and
/// keeps what it found; then stores it to word i + 1.
const ATOMICS: &str = "
    get_sr r1, sr80
    iadd r2, r1, 1
    mov_imm r3, 0
    atomic add, 0, r4, u0_u1, r3, unsigned, r2, 1, 1, 1, 1
    wait 0
    device_store 0, i32, x, r4, u0_u1, r2, unsigned, 0
    stop";

#[test]
fn a_traced_threads_memory_accesses_and_atomics_are_listed_by_address() {
    let (capture, words, out) = dispatch_capture("debug-atomics.cap", ATOMICS, 32, 33);
    // The lanes run the atomic in lane order: lane i finds the sum of
    // 1..=i.
    assert_eq!(words[0], (1..=32).sum::<u32>());
    for i in 0..32u32 {
        assert_eq!(words[i as usize + 1], (1..=i).sum::<u32>(), "thread {i}");
    }
    let report = trace(
        &capture,
        0,
        Invocation::Thread {
            id: [5, 0, 0],
            dispatch: None,
        },
        TraceStage::Fragment,
    )
    .unwrap();
    assert_eq!(report.invocations.len(), 1);
    let steps = &report.invocations[0].steps;
    let atomic = steps.iter().find(|s| s.text.starts_with("atomic")).unwrap();
    assert_eq!(atomic.accesses.len(), 1, "{atomic:?}");
    assert_eq!(atomic.accesses[0].kind, "atomic");
    assert_eq!(atomic.accesses[0].address, Some(out));
    assert_eq!(atomic.accesses[0].size_bytes, 4);
    assert!(
        atomic.accesses[0]
            .detail
            .ends_with(&format!("found {:#x}", 1 + 2 + 3 + 4 + 5)),
        "{}",
        atomic.accesses[0].detail
    );
    let store = steps
        .iter()
        .find(|s| s.text.starts_with("device_store"))
        .unwrap();
    assert_eq!(store.accesses.len(), 1);
    assert_eq!(store.accesses[0].kind, "store");
    assert_eq!(store.accesses[0].address, Some(out + 4 * 6));
    // Instructions that reach no memory list none.
    assert!(steps
        .iter()
        .filter(|s| !s.text.starts_with("atomic") && !s.text.starts_with("device_store"))
        .all(|s| s.accesses.is_empty()));
}

/// Red, with four more instructions run where x < 8 (three moves and the
/// `pop_exec` closing them; lanes out of the `if` run neither).
const BRANCHY_FS: &str = "
    get_sr r8, sr80
    if_icmp r0l, ult, r8, 8, 1
    mov_imm r9, 1
    mov_imm r9, 2
    mov_imm r9, 3
    pop_exec r0l, 1
    mov_imm r4, 0x3f800000
    mov_imm r5, 0
    mov_imm r6, 0
    mov_imm r7, 0x3f800000";

/// Whether the triangle over the top-left half covers pixel (x, y), by
/// its pixel centre (x + 0.5) + (y + 0.5) < 32; the pixels whose centres
/// lie on the edge (x + y = 31) are left out of the checks.
fn inside(x: u32, y: u32) -> Option<bool> {
    (x + y != 31).then_some(x + y < 31)
}

#[test]
fn maps_count_each_pixels_fragments_and_instructions_as_the_programs_ran() {
    // Overdraw: three blended draws shade every covered pixel three
    // times; three opaque ones once (hidden-surface removal).
    for (blend, name, expected) in [
        (Blend::Alpha, "map-blended.cap", 3),
        (Blend::Replace, "map-opaque.cap", 1),
    ] {
        let capture = triangle_capture(name, 3, blend, POSITION_FS);
        let overdraw = map(&capture, 0, MapKind::Overdraw).unwrap();
        assert_eq!(overdraw.failure, None);
        for y in 0..32 {
            for x in 0..32 {
                if let Some(covered) = inside(x, y) {
                    let want = if covered { expected } else { 0 };
                    assert_eq!(overdraw.at(x, y), want, "{name}: pixel ({x}, {y})");
                }
            }
        }
        // No partial render: nothing reloaded.
        let reloads = map(&capture, 0, MapKind::Reloads).unwrap();
        assert!(reloads.values.iter().all(|&v| v == 0));
    }
    // Instructions: the branch's four more where x < 8, the same count
    // everywhere else.
    let capture = triangle_capture("map-branchy.cap", 1, Blend::Replace, BRANCHY_FS);
    let instructions = map(&capture, 0, MapKind::Instructions).unwrap();
    // Where x >= 8: get_sr, if_icmp, the colour's four moves, and the
    // st_tile and stop the umd appends.
    let base = instructions.at(20, 2);
    assert_eq!(base, 8);
    for y in 0..32 {
        for x in 0..32 {
            if let Some(covered) = inside(x, y) {
                let want = match (covered, x < 8) {
                    (false, _) => 0,
                    (true, true) => base + 4,
                    (true, false) => base,
                };
                assert_eq!(instructions.at(x, y), want, "pixel ({x}, {y})");
            }
        }
    }
    // The picture: black where nothing ran, the ramp's ends at 1 and at
    // the largest count, the legend's bar under the map.
    let (width, height, rgba) = map_image(&instructions);
    assert_eq!(height, instructions.height + LEGEND_ROWS);
    assert!(width >= instructions.width);
    let pixel = |x: u32, y: u32| {
        let at = ((y * width + x) * 4) as usize;
        [rgba[at], rgba[at + 1], rgba[at + 2]]
    };
    assert_eq!(pixel(30, 30), [0, 0, 0], "nothing shaded");
    assert_eq!(pixel(2, 2), [230, 20, 20], "the largest count, red");
    assert_ne!(pixel(20, 2), pixel(2, 2));
    assert_eq!(
        pixel(0, instructions.height + 4),
        [20, 20, 140],
        "the bar starts dark blue"
    );
}

#[test]
fn the_reload_map_counts_the_tiles_partial_renders_stored_and_loaded_again() {
    // The renderer's torus at 64x64 (four 32x32 tiles, all inside the
    // render area) overflows the default parameter buffer: partial
    // renders store tiles, and each later visit of a tile reloads it.
    let d = device();
    let renderer =
        agx_tools::render::Renderer::new(&d, &agx_tools::mesh::Mesh::torus(300, 100), 64, 64)
            .unwrap();
    let mut partial_tiles = 0;
    let capture = captured(&d, "map-partials.cap", || {
        let report = renderer.frame(0).unwrap();
        partial_tiles = report.tvb.unwrap().partial_render_tiles;
    });
    assert!(partial_tiles > 0, "the frame needs partial renders");
    let reloads = map(&capture, 0, MapKind::Reloads).unwrap();
    assert_eq!(reloads.failure, None);
    // Each segment after a partial render reloads the tiles it visits,
    // all 1,024 pixels of each. The first segment and the last visit every
    // tile (the pass asks for all four; the segments between only those
    // they binned geometry into), so the reloads are the partial renders'
    // tile visits less the first segment's four plus the last's four.
    let total: u64 = reloads.values.iter().sum();
    assert_eq!(total, partial_tiles * 32 * 32);
    // Per tile, every pixel alike.
    for (tx, ty) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let first = reloads.at(tx * 32, ty * 32);
        for y in ty * 32..ty * 32 + 32 {
            for x in tx * 32..tx * 32 + 32 {
                assert_eq!(reloads.at(x, y), first, "pixel ({x}, {y})");
            }
        }
    }
}

/// A constant-colour fragment shader.
fn constant_fs(rgba: [f32; 4]) -> String {
    format!(
        "mov_imm r4, {:#x}\nmov_imm r5, {:#x}\nmov_imm r6, {:#x}\nmov_imm r7, {:#x}",
        rgba[0].to_bits(),
        rgba[1].to_bits(),
        rgba[2].to_bits(),
        rgba[3].to_bits()
    )
}

/// A capture of one pass over a 32x32 target with depth (cleared to 1.0,
/// test `less`, writes on): a red triangle over the top-left half at
/// z = 0.5, then a green one over the whole target at z = 0.75.
fn depth_capture(name: &str) -> Capture {
    let (red, green) = (
        constant_fs([1.0, 0.0, 0.0, 1.0]),
        constant_fs([0.0, 1.0, 0.0, 1.0]),
    );
    let draw = |fs, corners, z| TestDraw {
        fs,
        blend: Blend::Replace,
        corners,
        z,
    };
    pass_capture(
        name,
        true,
        &[
            draw(&red, TOP_LEFT, 0.5),
            draw(&green, [[-1.0, 1.0], [3.0, 1.0], [-1.0, -3.0]], 0.75),
        ],
    )
}

/// The kinds of a history's steps, in order.
fn kinds(history: &PixelHistory) -> Vec<String> {
    history
        .steps
        .iter()
        .map(|step| match step {
            PixelStep::Event(PixelEvent::TileStart { .. }) => "tile".to_owned(),
            PixelStep::Event(PixelEvent::Primitive { .. }) => "primitive".to_owned(),
            PixelStep::Event(PixelEvent::DepthTest { passed, .. }) => {
                format!("depth {}", if *passed { "pass" } else { "fail" })
            }
            PixelStep::Shader(t) => t.stage.to_owned(),
            PixelStep::Event(PixelEvent::TileEnd { .. }) => "stored".to_owned(),
            PixelStep::Event(PixelEvent::Stored { .. }) => "written".to_owned(),
        })
        .collect()
}

#[test]
fn a_pixels_history_shows_two_draws_and_the_depth_test_between_them() {
    let capture = depth_capture("debug-depth.cap");
    // Under both triangles: the near red one passes against the clear
    // (0.5 < 1), writes 0.5, and the far green one fails against that
    // (0.75 < 0.5 is false); only red is shaded (hidden-surface removal
    // shades what stayed visible) and stored.
    let both = pixel_history(&capture, 0, (3, 5)).unwrap();
    assert_eq!(both.failure, None);
    assert_eq!(
        kinds(&both),
        [
            "tile",
            "background",
            "primitive",
            "depth pass",
            "primitive",
            "depth fail",
            "fragment",
            "stored",
            "written",
            "end-of-tile"
        ],
        "{}",
        history_listing(&both)
    );
    let tests: Vec<(f32, f32, &str, bool)> = both
        .steps
        .iter()
        .filter_map(|s| match s {
            PixelStep::Event(PixelEvent::DepthTest {
                sample: 0,
                depth,
                stored,
                function,
                writes,
                ..
            }) => Some((*depth, *stored, *function, *writes)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tests,
        [(0.5, 1.0, "less", true), (0.75, 0.5, "less", false)]
    );
    // The fragment shaded covers the pixel's one sample.
    let PixelStep::Shader(fragment) = &both.steps[6] else {
        panic!("{:?}", both.steps[6]);
    };
    assert_eq!((fragment.stage, fragment.coverage), ("fragment", Some(1)));
    let PixelStep::Event(PixelEvent::TileStart {
        depth,
        segment: 0,
        last: true,
        tile: (0, 0),
        ..
    }) = &both.steps[0]
    else {
        panic!("{:?}", both.steps[0]);
    };
    assert_eq!(depth, &[1.0], "the clear depth, loaded");
    let PixelStep::Event(PixelEvent::TileEnd { colour, depth, .. }) = &both.steps[7] else {
        panic!("{:?}", both.steps[7]);
    };
    assert_eq!(colour, &[255, 0, 0, 255], "red in the tilebuffer");
    assert_eq!(depth, &[0.5]);
    // The block store wrote the texel: nothing there before, red after,
    // at the address the read-back names.
    let PixelStep::Event(PixelEvent::Stored {
        address,
        before,
        after,
        compressed: false,
        ..
    }) = &both.steps[8]
    else {
        panic!("{:?}", both.steps[8]);
    };
    assert_eq!(
        (before.as_slice(), after.as_slice()),
        (&[0u8; 4][..], &[255u8, 0, 0, 255][..])
    );
    assert_eq!(both.memory.len(), 1);
    assert_eq!(*address, both.memory[0].address);
    assert_eq!(both.memory[0].before, [0, 0, 0, 0]);
    assert_eq!(both.memory[0].after, [255, 0, 0, 255]);
    // Under the far triangle alone: it passes against the clear, is
    // shaded, and green is stored.
    let far = pixel_history(&capture, 0, (30, 30)).unwrap();
    assert_eq!(
        kinds(&far),
        [
            "tile",
            "background",
            "primitive",
            "depth pass",
            "fragment",
            "stored",
            "written",
            "end-of-tile"
        ]
    );
    assert_eq!(far.memory[0].after, [0, 255, 0, 255]);
    let listing = history_listing(&far);
    assert!(
        listing.contains("depth 0.75 less 1: pass, writes its depth"),
        "{listing}"
    );
}

#[test]
fn a_branchy_fragment_shaders_trace_follows_its_model_step_by_step() {
    let capture = triangle_capture("debug-branchy.cap", 1, Blend::Replace, BRANCHY_FS);
    // The program as its model runs it: every instruction reached by the
    // SIMD-group, the three moves and the pop_exec only by lanes with
    // x < 8 active; r9 ends 3 there and stays 0 elsewhere.
    let names = [
        "get_sr", "if_icmp", "mov_imm", "mov_imm", "mov_imm", "pop_exec", "mov_imm", "mov_imm",
        "mov_imm", "mov_imm", "st_tile", "stop",
    ];
    for (x, y) in [(3u32, 5u32), (20, 2), (7, 7), (8, 7)] {
        let report = trace(
            &capture,
            0,
            Invocation::Pixel { x, y },
            TraceStage::Fragment,
        )
        .unwrap();
        assert_eq!(report.invocations.len(), 1, "({x}, {y})");
        let traced = &report.invocations[0];
        let got: Vec<&str> = traced
            .steps
            .iter()
            .map(|s| s.text.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(got, names, "({x}, {y})");
        let inside_if = x < 8;
        for (i, step) in traced.steps.iter().enumerate() {
            let branch = (2..=5).contains(&i);
            assert_eq!(
                step.active,
                !branch || inside_if,
                "({x}, {y}) step {i}: {}",
                step.text
            );
        }
        assert_eq!(value(traced, 0, "r8"), Some(u64::from(x)));
        let r9 = traced.steps[4]
            .operands
            .iter()
            .find(|o| o.name == "r9")
            .map(|o| o.after);
        assert_eq!(r9, Some(if inside_if { 3 } else { 0 }), "({x}, {y})");
    }
    // Vertices by draw: this capture has one draw, vertex 2 in it.
    let vertex = |draw| {
        trace(
            &capture,
            0,
            Invocation::Vertex { index: 2, draw },
            TraceStage::Fragment,
        )
        .unwrap()
    };
    assert_eq!(vertex(Some(0)).invocations.len(), 1);
    assert_eq!(vertex(Some(0)).invocations[0].number, Some(0));
    assert!(vertex(Some(1)).invocations.is_empty());
}
