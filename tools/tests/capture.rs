//! Capture, decode, lint and replay, on scenes the umd renders.

use std::sync::Arc;
use std::time::Duration;

use agx_capture::Capture;
use agx_tools::decode::{decode_capture, Lint};
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;
use agx_umd::*;

mod common {
    pub(crate) mod capture;
}

use common::capture::{capture_path, captured, device, run_to_completion, VS};

fn lints(capture: &Capture) -> Vec<Lint> {
    decode_capture(capture, None)
        .into_iter()
        .flat_map(|(_, _, l)| l)
        .collect()
}

#[test]
fn a_rendered_frame_decodes_cleanly_and_replays_bit_for_bit() {
    let d = device();
    let renderer = Renderer::new(&d, &Mesh::torus(40, 16), 96, 64).unwrap();
    let capture = captured(&d, "torus.cap", || {
        renderer.frame(0).unwrap();
    });
    assert_eq!(capture.submissions.len(), 1);
    let decoded = decode_capture(&capture, None);
    let (_, text, lints) = &decoded[0];
    assert!(lints.is_empty(), "{lints:?}");
    assert!(!text.contains("XXX"), "no unknown bits:\n{text}");
    assert!(!text.contains("undecodable") && !text.contains("unknown VDM"));
    for needle in [
        "CmdRender {",
        "UscShader",
        "texture_sample",
        "image_write_block",
        "PppHeader",
        "IndexList",
        "VdmStreamTerminate",
        "ZlsControl",
    ] {
        assert!(text.contains(needle), "the decode shows {needle}");
    }
    let replayed = agx_tools::replay::replay_one(&capture, 0).unwrap();
    assert_eq!(replayed.error, None);
    assert_eq!(replayed.targets.len(), 1);
    assert_eq!(
        replayed.targets[0].rgba,
        renderer.pixels().unwrap(),
        "the replay draws the same frame"
    );
    assert_eq!(replayed.failure, None);
    // Replayed with its shaders' base moved where nothing is mapped, it
    // faults reading the first pipeline there, and the replay says where,
    // as dmesg would.
    let mut broken = capture.clone();
    broken.submissions[0].usc_exec_base += 1 << 36;
    let replayed = agx_tools::replay::replay_one(&broken, 0).unwrap();
    assert_eq!(replayed.error, Some(Errno::EIO));
    let failure = replayed.failure.unwrap();
    assert!(
        failure.starts_with("GPU fault: read at 0x11")
            && failure.contains("by the Usc: Unmapped (queue 1, submission 1)"),
        "{failure}"
    );
}

/// A quad pass with `fs` (colour left in r4-r7), its texture bound
/// without samplers, and `debug`'s mistakes.
#[test]
fn a_compute_dispatch_decodes_cleanly_and_replays() {
    let d = device();
    let buffer = d.upload(&[0u8; 4096], true).unwrap();
    let capture = captured(&d, "fill.cap", || {
        let programs = Arc::new(ProgramCache::new(&d));
        let mut cb = CommandBuffer::new(&d, &programs);
        cb.fill(buffer.va(), 100, 7).unwrap();
        run_to_completion(&d, cb);
    });
    assert_eq!(capture.submissions.len(), 1);
    let decoded = decode_capture(&capture, None);
    let (_, text, lints) = &decoded[0];
    assert!(lints.is_empty(), "{lints:?}");
    assert!(
        !text.contains("XXX") && !text.contains("undecodable"),
        "{text}"
    );
    for needle in ["CdmLaunchWord0", "device_store", "CdmStreamTerminate"] {
        assert!(text.contains(needle), "the decode shows {needle}:\n{text}");
    }
    let replayed = agx_tools::replay::replay_one(&capture, 0).unwrap();
    assert_eq!(replayed.error, None);
    assert_eq!(replayed.failure, None);
}

fn quad_pass(d: &Device, fs: &str, debug: PassDebug) -> Result<(), Error> {
    let programs = Arc::new(ProgramCache::new(d));
    let image = Image::new(d, 32, 32, Format::Rgba8Unorm)?;
    let texture = Image::new(d, 4, 4, Format::Rgba8Unorm)?;
    let depth = DepthImage::new(d, 32, 32)?;
    let mut vertices = Vec::new();
    for [x, y] in [[-1.0f32, 1.0], [1.0, 1.0], [-1.0, -1.0]] {
        for v in [x, y, 0.5, 1.0] {
            vertices.extend(v.to_le_bytes());
        }
    }
    let vb = d.upload(&vertices, false)?;
    let pipeline = Arc::new(GraphicsPipeline::new(
        d,
        &GraphicsPipelineDesc {
            vertex_stack_bytes: 0,
            fragment_stack_bytes: 0,
            vertex: VS,
            fragment: fs,
            vertex_layout: None,
            stencil: None,
            vertex_outputs: 4,
            varyings: Vec::new(),
            depth: None,
            cull: CullMode::None,
            front_ccw: false,
            topology: Topology::Triangles,
            colour_output: ColourOutput::Registers {
                format: Format::Rgba8Unorm,
                blend: Blend::Replace,
            },
        },
    )?);
    let mut cb = CommandBuffer::new(d, &programs);
    cb.set_debug(debug);
    let mut pass = cb.begin_render_pass(&RenderPassDesc {
        colour: vec![ColourAttachment {
            image: &image,
            load: LoadOp::Clear([0.0; 4]),
            store: StoreOp::Store,
        }],
        depth: Some(DepthAttachment {
            image: &depth,
            load: LoadOp::Clear(1.0),
            store: StoreOp::DontCare,
            stencil: None,
        }),
    })?;
    pass.set_pipeline(&pipeline);
    let va = vb.va();
    pass.set_vertex_uniforms(&[va as u32, (va >> 32) as u32]);
    pass.set_fragment_textures(&[&texture], &[])?;
    pass.draw(3, 1, 0)?;
    pass.end()?;
    cb.finish()?;
    let queue = Queue::new(d)?;
    queue
        .submit(vec![cb], &[], &[])?
        .wait(Duration::from_secs(30))
}

const PLAIN_FS: &str = "
    mov_imm r4, 0x3f800000
    mov_imm r5, 0
    mov_imm r6, 0
    mov_imm r7, 0x3f800000";

fn rules(capture: &Capture) -> Vec<&'static str> {
    let mut r: Vec<_> = lints(capture).iter().map(|l| l.rule).collect();
    r.sort_unstable();
    r.dedup();
    r
}

#[test]
fn each_lint_fires_on_its_mistake_and_not_on_good_work() {
    let d = device();
    let good = captured(&d, "good.cap", || {
        quad_pass(&d, PLAIN_FS, PassDebug::default()).unwrap()
    });
    assert!(rules(&good).is_empty(), "{:?}", lints(&good));
    let cases = [
        (
            PassDebug {
                no_partial_bg: true,
                ..PassDebug::default()
            },
            "partial-missing",
        ),
        (
            PassDebug {
                clearing_partial_bg: true,
                ..PassDebug::default()
            },
            "partial-bg-no-load",
        ),
        (
            PassDebug {
                no_partial_zls: true,
                ..PassDebug::default()
            },
            "zls-partial",
        ),
    ];
    for (debug, rule) in cases {
        let c = captured(&d, "debug.cap", || {
            let _ = quad_pass(&d, PLAIN_FS, debug);
        });
        assert_eq!(rules(&c), [rule], "{debug:?}");
    }
    // A shader sampling sampler 5 from a heap that has none.
    let sampling = "
    mov_imm r2, 0
    mov_imm r3, 0
    texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r4_r5_r6_r7, None, ts0, ss5, tex_2d, r2_r3, lod_min, r2l, 0, r0
    wait 0";
    let c = captured(&d, "sampler.cap", || {
        let _ = quad_pass(&d, sampling, PassDebug::default());
    });
    assert_eq!(rules(&c), ["sampler-index"]);
    // Edits of the good capture: a barrier naming a later command...
    let mut bad = good.clone();
    bad.submissions[0].cmdbuf[4..6].copy_from_slice(&5u16.to_le_bytes());
    assert!(rules(&bad).contains(&"barrier"));
    // ...the descriptors' memory missing...
    let mut bad = good.clone();
    let text = decode_capture(&good, None).remove(0).1;
    let descriptor = text
        .lines()
        .find_map(|l| l.trim().strip_suffix(": Texture"))
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .expect("a texture descriptor in the decode");
    bad.submissions[0]
        .memory
        .retain(|r| !r.contains(descriptor, 24));
    assert!(rules(&bad).contains(&"unmapped"));
    // ...and a VDM stream whose terminate became a link to itself.
    let mut bad = good.clone();
    let terminate = text
        .lines()
        .find_map(|l| l.trim().strip_suffix(": VdmStreamTerminate"))
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .expect("a terminate in the decode");
    let link = agx_hw::formats::VdmStreamLink {
        target: terminate,
        with_return: false,
    }
    .pack()
    .unwrap();
    let s = &mut bad.submissions[0];
    let range = s
        .memory
        .iter_mut()
        .find(|r| r.contains(terminate, 8))
        .unwrap();
    let at = (terminate - range.va) as usize;
    range.bytes[at..at + 8].copy_from_slice(&link);
    assert_eq!(rules(&bad), ["unterminated"]);
}

#[test]
fn a_small_capture_decodes_to_the_golden_text() {
    let d = device();
    let c = captured(&d, "golden.cap", || {
        quad_pass(&d, PLAIN_FS, PassDebug::default()).unwrap()
    });
    let text: String = decode_capture(&c, None)
        .into_iter()
        .map(|(_, t, _)| t)
        .collect();
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quad.decode");
    if std::env::var_os("AGX_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    let expected =
        std::fs::read_to_string(&golden).expect("tests/data/quad.decode (AGX_BLESS=1 writes it)");
    assert!(
        text == expected,
        "the decode changed; if that is intended, rerun with AGX_BLESS=1\n{text}"
    );
}

#[test]
fn descriptors_are_found_through_the_heaps_programs_use() {
    let d = device();
    let programs = Arc::new(ProgramCache::new(&d));
    let mut images = ImageHeap::new(&d, 1024).unwrap();
    let samplers = SamplerHeap::new(&d, 16).unwrap();
    let texture = Image::new(&d, 8, 8, Format::Rgba8Unorm).unwrap();
    let slot = images.alloc().unwrap();
    images
        .set_texture(slot, &texture.texture_descriptor())
        .unwrap();
    let image = Image::new(&d, 32, 32, Format::Rgba8Unorm).unwrap();
    let vb = d.upload(&[0u8; 48], false).unwrap();
    let pipeline = Arc::new(
        GraphicsPipeline::new(
            &d,
            &GraphicsPipelineDesc {
                vertex_stack_bytes: 0,
                fragment_stack_bytes: 0,
                vertex: VS,
                fragment: PLAIN_FS,
                vertex_layout: None,
                stencil: None,
                vertex_outputs: 4,
                varyings: Vec::new(),
                depth: None,
                cull: CullMode::None,
                front_ccw: false,
                topology: Topology::Triangles,
                colour_output: ColourOutput::Registers {
                    format: Format::Rgba8Unorm,
                    blend: Blend::Replace,
                },
            },
        )
        .unwrap(),
    );
    let c = captured(&d, "heaps.cap", || {
        let mut cb = CommandBuffer::new(&d, &programs);
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
        pass.set_vertex_uniforms(&[va as u32, (va >> 32) as u32]);
        pass.draw(3, 1, 0).unwrap();
        pass.end().unwrap();
        run_to_completion(&d, cb);
    });
    let text = decode_capture(&c, None).remove(0).1;
    assert!(
        text.contains(&format!("image heap base (u60_u61): {:#x}", images.base())),
        "{text}"
    );
    assert!(text.contains(&format!(
        "slot {} (byte offset {:#x}):",
        slot.0,
        slot.byte_offset()
    )));
    assert_eq!(
        text.matches("(resident descriptors)").count(),
        1,
        "each heap once"
    );
}

#[test]
fn the_umd_captures_what_it_submits_as_the_kernel_would() {
    let d = device();
    let renderer = Renderer::new(&d, &Mesh::torus(30, 12), 64, 48).unwrap();
    let path = capture_path("umd.cap");
    d.capture_to(&path).unwrap();
    renderer.frame(0).unwrap();
    d.stop_capture();
    let c = agx_capture::read(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(c.submissions.len(), 1);
    assert_eq!(c.params.map(|p| p.gpu_generation), Some(13));
    let (_, text, lints) = decode_capture(&c, None).remove(0);
    assert!(lints.is_empty(), "{lints:?}");
    assert!(!text.contains("XXX"));
    let replayed = agx_tools::replay::replay_one(&c, 0).unwrap();
    assert_eq!(replayed.error, None);
    assert_eq!(replayed.targets[0].rgba, renderer.pixels().unwrap());
}

#[test]
fn decoding_corrupted_memory_never_panics() {
    let d = device();
    let good = captured(&d, "fuzz.cap", || {
        quad_pass(&d, PLAIN_FS, PassDebug::default()).unwrap()
    });
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    for round in 0..300 {
        let mut bad = good.clone();
        let s = &mut bad.submissions[0];
        // Corrupt some bytes of the small ranges (streams, words,
        // descriptors, code) and sometimes the command buffer.
        for _ in 0..1 + round % 8 {
            let r = (next() % s.memory.len() as u64) as usize;
            let range = &mut s.memory[r];
            if range.bytes.is_empty() {
                continue;
            }
            let at = (next() % range.bytes.len().min(4096) as u64) as usize;
            range.bytes[at] ^= 1 << (next() % 8);
        }
        if round % 5 == 0 {
            let at = (next() % s.cmdbuf.len() as u64) as usize;
            s.cmdbuf[at] = next() as u8;
        }
        let decoded = decode_capture(&bad, None);
        assert_eq!(decoded.len(), 1);
    }
}

#[test]
fn the_json_output_is_a_tree_of_decoded_items() {
    let d = device();
    let c = captured(&d, "json.cap", || {
        quad_pass(&d, PLAIN_FS, PassDebug::default()).unwrap()
    });
    let decoded = agx_tools::decode::decode_all(&c, None);
    let json: serde_json::Value =
        serde_json::from_str(&agx_tools::decode::to_json(&c, &decoded)).expect("valid JSON");
    let submission = &json[0];
    assert_eq!(submission["usc_exec_base"], d.usc_base());
    let commands = submission["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "the pass (its depth clear is the ZLS's)");
    let items = commands[0]["items"].as_array().unwrap();
    let zls = items
        .iter()
        .find(|i| i["kind"] == "ZlsControl")
        .expect("the ZLS control");
    // Values are typed: bits as booleans, numbers as numbers, enum
    // values by variant name.
    assert_eq!(zls["fields"]["z_store_enable"], true);
    let texture = items
        .iter()
        .find(|i| i["kind"] == "Texture" && i["fields"]["width"].as_u64().is_some_and(|w| w > 1))
        .expect("a texture with its width as a number");
    assert!(texture["fields"]["dimension"].is_string(), "{texture}");
    // A single-sampled texture has no sample count (the field's only
    // encodings are 2 and 4, for multisampled dimensions).
    assert!(texture["fields"].get("samples").is_none(), "{texture}");
    assert!(texture.get("issues").is_none(), "{texture}");
    assert!(items
        .iter()
        .any(|i| i["kind"] == "instruction" && i["fields"]["text"] == "stop"));
    assert!(submission["lints"].as_array().unwrap().is_empty());
}

/// A capture whose client never submits is still a capture: header and
/// device parameters are on disk while the capture is open, so a process
/// that exits without closing it leaves a file the tools read as zero
/// submissions (it was 0 bytes, "not a capture"). Both capture points.
#[test]
fn a_capture_without_submissions_is_readable_while_still_open() {
    let d = device();
    let kmd_path = capture_path("idle-kmd.cap");
    let system = d.simulated().unwrap().system();
    system.capture_to(&kmd_path).unwrap();
    let umd_path = capture_path("idle-umd.cap");
    d.capture_to(&umd_path).unwrap();
    for path in [&kmd_path, &umd_path] {
        let capture = agx_capture::read(std::fs::File::open(path).unwrap()).unwrap();
        assert!(capture.params.is_some(), "{}", path.display());
        assert!(capture.submissions.is_empty());
        // agx-decode reads it and says so.
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agx-decode"))
            .args(["--lint"])
            .arg(path)
            .output()
            .unwrap();
        assert!(output.status.success());
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "no findings in 0 submissions"
        );
    }
    system.stop_capture();
    d.stop_capture();
}

/// agx-replay makes its output directory (it used to replay everything and
/// then fail on each image), and agx-decode and agx-replay count
/// submissions in English.
#[test]
fn replay_makes_its_output_directory() {
    let d = device();
    let renderer = Renderer::new(&d, &Mesh::torus(8, 4), 16, 16).unwrap();
    let path = capture_path("replay-dir.cap");
    captured(&d, "replay-dir.cap", || {
        renderer.frame(0).unwrap();
    });
    let out = capture_path("replay-dir-out").join("nested");
    let _ = std::fs::remove_dir_all(&out);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agx-replay"))
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .env("AGX_LOG", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.join("submit0-cmd0-rt0.png").exists(), "{stdout}");
    for bin in [
        env!("CARGO_BIN_EXE_agx-replay"),
        env!("CARGO_BIN_EXE_agx-decode"),
    ] {
        let output = std::process::Command::new(bin)
            .arg(&path)
            .args(["--submit", "3"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("replay-dir.cap: the capture has 1 submission\n"),
            "{stderr}"
        );
    }
}
