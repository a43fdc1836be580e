//! Every tool follows the same command-line conventions: `--help` and
//! `--version` print to standard output and exit 0, and a command line
//! the tool cannot act on exits 2 with a message on standard error.

use std::process::{Command, Output};

const TOOLS: [(&str, &str); 7] = [
    ("agx-render", env!("CARGO_BIN_EXE_agx-render")),
    ("agx-decode", env!("CARGO_BIN_EXE_agx-decode")),
    ("agx-replay", env!("CARGO_BIN_EXE_agx-replay")),
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
