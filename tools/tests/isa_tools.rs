//! `agx-asm` and `agx-disasm` round-trip every instruction form.

use std::collections::BTreeSet;
use std::process::Command;

use agx_hw::isa::{decode, Op};

const ALL_FORMS: &str = include_str!("data/all_forms.s");

fn run(bin: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin).args(args).output().expect("tool runs")
}

#[test]
fn every_form_round_trips_through_both_binaries() {
    let dir = std::env::temp_dir().join(format!("agx-isa-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("all_forms.s");
    let binary = dir.join("all_forms.bin");
    std::fs::write(&source, ALL_FORMS).unwrap();

    let asm = run(
        env!("CARGO_BIN_EXE_agx-asm"),
        &[source.to_str().unwrap(), "-o", binary.to_str().unwrap()],
    );
    assert!(
        asm.status.success(),
        "{}",
        String::from_utf8_lossy(&asm.stderr)
    );
    let code = std::fs::read(&binary).unwrap();

    // The fixture holds every form of the table.
    let mut seen = BTreeSet::new();
    let mut offset = 0;
    while offset < code.len() {
        let decoded = decode(&code[offset..]).unwrap();
        seen.insert(decoded.instr.op);
        offset += decoded.length_bytes;
    }
    let missing: Vec<&Op> = Op::ALL.iter().filter(|op| !seen.contains(op)).collect();
    assert!(
        missing.is_empty(),
        "forms missing from all_forms.s: {missing:?}"
    );

    let disasm = run(
        env!("CARGO_BIN_EXE_agx-disasm"),
        &[binary.to_str().unwrap()],
    );
    assert!(
        disasm.status.success(),
        "{}",
        String::from_utf8_lossy(&disasm.stderr)
    );
    let listing = String::from_utf8(disasm.stdout).unwrap();
    let texts: Vec<&str> = listing
        .lines()
        .map(|l| l.splitn(3, char::is_whitespace).nth(2).unwrap().trim())
        .collect();
    let expected: Vec<&str> = ALL_FORMS.lines().collect();
    assert_eq!(texts, expected);

    // The listing is itself assembler input and gives the same bytes.
    let listing_file = dir.join("listing.s");
    std::fs::write(&listing_file, &listing).unwrap();
    let again = dir.join("again.bin");
    let asm = run(
        env!("CARGO_BIN_EXE_agx-asm"),
        &[
            listing_file.to_str().unwrap(),
            "-o",
            again.to_str().unwrap(),
        ],
    );
    assert!(
        asm.status.success(),
        "{}",
        String::from_utf8_lossy(&asm.stderr)
    );
    assert_eq!(std::fs::read(&again).unwrap(), code);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn base_address_moves_printed_targets() {
    let out = run(
        env!("CARGO_BIN_EXE_agx-disasm"),
        &["--hex", "--base", "0x10", "20c020000000"],
    );
    // --hex with a positional argument reads a file (here one that does
    // not exist: status 2, as --help says, not a crash); use stdin instead.
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_agx-disasm"))
        .args(["--hex", "--base", "0x10"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"20c020000000 8800")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "0x0010: 20c020000000             jmp_exec_none 0x30\n0x0016: 8800                     stop\n"
    );
}

#[test]
fn errors_exit_nonzero_with_a_message() {
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_agx-asm"), "agx-asm"),
        (env!("CARGO_BIN_EXE_agx-disasm"), "agx-disasm"),
    ] {
        let help = run(bin, &["--help"]);
        assert!(help.status.success());
        assert!(String::from_utf8_lossy(&help.stdout).contains(&format!("Usage: {name}")));
        assert!(String::from_utf8_lossy(&help.stdout).contains("Exit status"));
        let version = run(bin, &["--version"]);
        assert!(version.status.success());
        assert!(String::from_utf8_lossy(&version.stdout).starts_with(name));
        // Two inputs are a usage error, not the second silently ignored.
        let extra = run(bin, &["a", "b"]);
        assert_eq!(extra.status.code(), Some(2));
    }

    let dir = std::env::temp_dir().join(format!("agx-isa-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.s");
    std::fs::write(&bad, "stop\nfadd32 r0, r1, 0.1\n").unwrap();
    let out = run(env!("CARGO_BIN_EXE_agx-asm"), &[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("line 2"), "{message}");

    let junk = dir.join("junk.bin");
    std::fs::write(&junk, [0x88, 0x00, 0x01, 0x00]).unwrap();
    let out = run(env!("CARGO_BIN_EXE_agx-disasm"), &[junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(listing.contains("stop"));
    assert!(listing.contains("no instruction form matches"), "{listing}");
    let out = run(env!("CARGO_BIN_EXE_agx-asm"), &["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
