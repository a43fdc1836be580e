//! Every tool follows the same command-line conventions: `--help` and
//! `--version` print to standard output and exit 0, and a command line
//! the tool cannot act on exits 2 with a message on standard error.

use std::process::{Command, Output};

const TOOLS: [(&str, &str); 8] = [
    ("agx-render", env!("CARGO_BIN_EXE_agx-render")),
    ("agx-decode", env!("CARGO_BIN_EXE_agx-decode")),
    ("agx-replay", env!("CARGO_BIN_EXE_agx-replay")),
    ("agx-debug", env!("CARGO_BIN_EXE_agx-debug")),
    ("agx-format", env!("CARGO_BIN_EXE_agx-format")),
    ("agx-asm", env!("CARGO_BIN_EXE_agx-asm")),
    ("agx-disasm", env!("CARGO_BIN_EXE_agx-disasm")),
    ("agx-fuzz", env!("CARGO_BIN_EXE_agx-fuzz")),
];

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("tool runs")
}

#[test]
fn help_and_version_go_to_stdout_and_exit_0() {
    for (name, bin) in TOOLS {
        let help = run(bin, &["--help"]);
        assert_eq!(help.status.code(), Some(0), "{name} --help");
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.contains(&format!("Usage: {name}")), "{name}: {text}");
        assert!(help.stderr.is_empty(), "{name} --help wrote to stderr");
        assert!(
            text.contains("Exit status: 0 "),
            "{name} documents its exit codes"
        );

        let version = run(bin, &["--version"]);
        assert_eq!(version.status.code(), Some(0), "{name} --version");
        let text = String::from_utf8_lossy(&version.stdout);
        assert_eq!(
            text.trim(),
            format!("{name} {}", env!("CARGO_PKG_VERSION")),
            "{name}"
        );
    }
}

#[test]
fn an_unknown_option_or_a_stray_word_exits_2_with_a_message() {
    for (name, bin) in TOOLS {
        let out = run(bin, &["--frobnicate"]);
        assert_eq!(out.status.code(), Some(2), "{name} --frobnicate");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--frobnicate"),
            "{name}"
        );
        assert!(out.stdout.is_empty(), "{name}");
    }
    // Extra words are refused, not ignored.
    let out = run(env!("CARGO_BIN_EXE_agx-format"), &["list", "extra"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(env!("CARGO_BIN_EXE_agx-render"), &["stray"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn agx_format_encodes_what_it_decodes() {
    let out = run(
        env!("CARGO_BIN_EXE_agx-format"),
        &[
            "encode",
            "UscUniform",
            "start_halfs=4",
            "size_halfs=8",
            "buffer=0x10000",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let words = String::from_utf8(out.stdout).unwrap();
    assert_eq!(words.trim(), "0x0080041d 0x00000100");
    let mut args = vec!["decode", "UscUniform"];
    args.extend(words.split_whitespace());
    let out = run(env!("CARGO_BIN_EXE_agx-format"), &args);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("start_halfs: 4") && text.contains("buffer: 0x10000"),
        "{text}"
    );

    let out = run(
        env!("CARGO_BIN_EXE_agx-format"),
        &["encode", "UscUniform", "size_halfs=1000"],
    );
    assert_eq!(out.status.code(), Some(2));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("size_halfs"), "{message}");
}

/// A tool whose standard output has no reader any more (`agx-decode
/// capture | head` once `head` has its lines) exits quietly with status 0,
/// as Unix tools do, instead of panicking with status 101. Standard output
/// here is a pipe whose read end is closed before the tool starts, so its
/// first write fails with `EPIPE`.
#[test]
fn a_tool_whose_reader_is_gone_exits_quietly() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("closed-stdout");
    std::fs::create_dir_all(&dir).unwrap();
    let capture = dir.join("run.cap");
    let _ = std::fs::remove_file(&capture);
    let code = dir.join("all_forms.bin");
    let all_forms = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/all_forms.s");
    let made = run(
        env!("CARGO_BIN_EXE_agx-asm"),
        &[all_forms, "-o", code.to_str().unwrap()],
    );
    assert_eq!(made.status.code(), Some(0));
    let closed_stdout = |name: &str, bin: &str, args: &[&str], env: Option<(&str, &str)>| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut command = Command::new(bin);
        command.args(args).env("AGX_LOG", "off").stdout(writer);
        if let Some((key, value)) = env {
            command.env(key, value);
        }
        let out = command.output().expect("tool runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        assert!(stderr.is_empty(), "{name}: {stderr}");
    };
    let png = dir.join("frame.png");
    closed_stdout(
        "agx-render",
        env!("CARGO_BIN_EXE_agx-render"),
        &["--size", "32x32", "--out", png.to_str().unwrap()],
        Some(("AGX_KMD_CAPTURE", capture.to_str().unwrap())),
    );
    // (agx-render above stopped at its first line, before it submitted:
    // the debugger gets a capture with a frame in it.)
    let frame = dir.join("frame.cap");
    let _ = std::fs::remove_file(&frame);
    let rendered = Command::new(env!("CARGO_BIN_EXE_agx-render"))
        .args(["--size", "32x32", "--out", png.to_str().unwrap()])
        .env("AGX_KMD_CAPTURE", &frame)
        .output()
        .unwrap();
    assert_eq!(rendered.status.code(), Some(0));
    let frame = frame.to_str().unwrap();
    let capture = capture.to_str().unwrap();
    let steps: [(&str, &str, &[&str]); 7] = [
        ("agx-decode", env!("CARGO_BIN_EXE_agx-decode"), &[capture]),
        (
            "agx-decode --json",
            env!("CARGO_BIN_EXE_agx-decode"),
            &["--json", capture],
        ),
        ("agx-replay", env!("CARGO_BIN_EXE_agx-replay"), &[capture]),
        (
            "agx-debug trace",
            env!("CARGO_BIN_EXE_agx-debug"),
            &["trace", frame, "--pixel", "0,0", "--stage", "background"],
        ),
        ("agx-asm", env!("CARGO_BIN_EXE_agx-asm"), &[all_forms]),
        (
            "agx-disasm",
            env!("CARGO_BIN_EXE_agx-disasm"),
            &[code.to_str().unwrap()],
        ),
        ("agx-format", env!("CARGO_BIN_EXE_agx-format"), &["list"]),
    ];
    for (name, bin, args) in steps {
        closed_stdout(name, bin, args, None);
    }
}
