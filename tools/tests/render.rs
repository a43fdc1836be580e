//! The renderer as people run it: the binary, end to end, to a PNG.

use std::process::Command;

fn decode(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgba);
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

fn render(args: &[&str], out: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "agx-render failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_built_in_scene_renders_to_a_png_of_the_asked_size() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join("scene.png");
    let stdout = render(&["--size", "160x120", "--frames", "2"], &out);
    let (w, h, pixels) = decode(&out);
    assert_eq!((w, h), (160, 120));
    let at = |x: u32, y: u32| &pixels[4 * (y * w + x) as usize..4 * (y * w + x) as usize + 4];
    // The clear colour in the corner, the lit torus in front of it.
    assert_eq!(at(1, 1), [15, 18, 26, 255]);
    let distinct: std::collections::HashSet<&[u8]> = pixels.chunks_exact(4).collect();
    assert!(
        distinct.len() > 100,
        "{} colours: blank or flat",
        distinct.len()
    );
    // Bit for bit what it was when last blessed (the computation is
    // deterministic, whatever the host thread count).
    let golden =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scene-160x120.png");
    if std::env::var_os("AGX_BLESS").is_some() {
        std::fs::copy(&out, &golden).unwrap();
    }
    let (gw, gh, expected) = decode(&golden);
    assert_eq!((gw, gh), (w, h));
    let differing: Vec<usize> = (0..(w * h) as usize)
        .filter(|&i| pixels[4 * i..4 * i + 4] != expected[4 * i..4 * i + 4])
        .collect();
    assert!(
        differing.is_empty(),
        "{} pixels differ from tests/data/scene-160x120.png, the first at ({}, {}); \
         if that is intended, rerun with AGX_BLESS=1",
        differing.len(),
        differing[0] as u32 % w,
        differing[0] as u32 / w
    );
    // The default scene overflows the first parameter buffer: the report
    // says so, and the second frame saw the grown buffer.
    assert!(
        stdout.contains("frame 0:") && stdout.contains("frame 1:"),
        "{stdout}"
    );
    assert!(stdout.contains("partial renders"), "{stdout}");
    assert!(stdout.contains("(grew)"), "{stdout}");
}

#[test]
fn an_obj_mesh_renders_and_bad_input_is_an_error_not_a_crash() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let cube = dir.join("cube.obj");
    std::fs::write(
        &cube,
        "v -1 -1 -1\nv 1 -1 -1\nv 1 1 -1\nv -1 1 -1\nv -1 -1 1\nv 1 -1 1\nv 1 1 1\nv -1 1 1\n\
         f 1 2 3 4\nf 5 8 7 6\nf 1 5 6 2\nf 2 6 7 3\nf 3 7 8 4\nf 5 1 4 8\n",
    )
    .unwrap();
    let out = dir.join("cube.png");
    let stdout = render(&["--mesh", cube.to_str().unwrap(), "--size", "64x64"], &out);
    assert!(stdout.contains("12 triangles"), "{stdout}");
    let (w, h, pixels) = decode(&out);
    assert_eq!((w, h), (64, 64));
    let centre = &pixels[4 * (32 * 64 + 32)..4 * (32 * 64 + 32) + 4];
    assert_ne!(centre, [15, 18, 26, 255], "the cube covers the centre");
    let bad = dir.join("bad.obj");
    std::fs::write(&bad, "v 0 0 0\nf 1 2 3\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(["--mesh", bad.to_str().unwrap(), "--out"])
        .arg(dir.join("bad.png"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("out of range"));
}

/// Work that fails says why, as dmesg would: with a budget too small for
/// the scene, agx-render fails and prints the timeout's line (the budget,
/// the queue and submission); a capture file that cannot be created stops
/// the device from being created, with the path in the error.
#[test]
fn failed_work_and_a_bad_capture_path_are_reported_not_silent() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    // A file already at the output path survives a failed run.
    std::fs::write(dir.join("budget.png"), b"an earlier frame").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(["--size", "64x64", "--work-budget-units", "1000", "--out"])
        .arg(dir.join("budget.png"))
        .env("AGX_LOG", "off")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("GPU work failed: ETIMEDOUT"), "{stderr}");
    assert!(
        stderr.contains("GPU timeout: the submission used up its work budget of 1000 units (queue 1, submission 1)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(dir.join("budget.png")).unwrap(),
        b"an earlier frame"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(["--size", "64x64", "--out"])
        .arg(dir.join("capture.png"))
        .env("AGX_LOG", "off")
        .env("AGX_KMD_CAPTURE", "/nonexistent-dir/run.cap")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent-dir/run.cap"), "{stderr}");
}

/// Arguments agx-render cannot honour are refused before any work, with
/// the limit or the path and the reason, never silently changed: an
/// initial parameter buffer outside 8..=6579 blocks, zero frames, an
/// output that is not a PNG or cannot be written, a device that is not a
/// DRM node or does not exist, simulator settings with a real device.
#[test]
fn arguments_it_cannot_honour_are_refused_with_the_reason() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join("refused.png");
    let out = out.to_str().unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
            .args(args)
            .env("AGX_LOG", "off")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), stderr)
    };
    for (args, code, says) in [
        (
            &["--tvb-initial-blocks", "0", "--out", out][..],
            2,
            "0 is not in 8..=6579",
        ),
        (
            &["--tvb-initial-blocks", "1", "--out", out],
            2,
            "1 is not in 8..=6579",
        ),
        (
            &["--tvb-initial-blocks", "6580", "--out", out],
            2,
            "6580 is not in 8..=6579",
        ),
        (&["--frames", "0", "--out", out], 2, "0 is not in 1.."),
        (
            &["--gpu-threads", "0", "--out", out],
            2,
            "0 is not in 1..=1024",
        ),
        (&["--out", "frame.jpg"], 2, "give a path ending in .png"),
        (
            &["--out", "/nonexistent-dir/x.png"],
            1,
            "cannot write /nonexistent-dir/x.png: No such file or directory",
        ),
        (
            &["--device", "/dev/null", "--out", out],
            1,
            "/dev/null is not a DRM device node (DRM_IOCTL_VERSION: ENOTTY",
        ),
        (
            &["--device", "/nonexistent-node", "--out", out],
            1,
            "cannot open /nonexistent-node: ENOENT",
        ),
        (
            &[
                "--device",
                "/dev/null",
                "--tvb-policy",
                "sync",
                "--out",
                out,
            ],
            2,
            "cannot be used with",
        ),
    ] {
        let (status, stderr) = run(args);
        assert_eq!(status, Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // No frame was drawn, and no empty file is left behind.
    assert!(!std::path::Path::new(out).exists());
}

/// The largest initial parameter buffer the kmd allows is one a queue can
/// be created with (the VM's kernel range holds it), and the output line
/// gives every size in blocks with MiB beside it.
#[test]
fn the_largest_initial_parameter_buffer_is_usable() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let output = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(["--size", "32x32", "--tvb-initial-blocks", "6579", "--out"])
        .arg(dir.join("largest.png"))
        .env("AGX_LOG", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("parameter buffer 6579 blocks (822.4 MiB), the scene wanted "),
        "{stdout}"
    );
    assert!(!stdout.contains("pages"), "{stdout}");
}
