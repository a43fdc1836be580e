//! Unmodified clients run against the simulated GPU through the shim: a C
//! program using libdrm, and a Rust program using the drm crate.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>`, from this test's own path (`deps/` is below it).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target directory")
        .to_path_buf()
}

/// The shim, as `cargo test` leaves it (in `deps/`; `cargo build` also
/// copies it up to the profile directory).
fn shim_library() -> PathBuf {
    let candidates = [
        target_dir().join("deps/libagx_shim.so"),
        target_dir().join("libagx_shim.so"),
    ];
    let found = candidates.iter().find(|p| p.exists());
    found
        .cloned()
        .unwrap_or_else(|| panic!("libagx_shim.so is built with the tests: {candidates:?}"))
}

fn run_under_shim(program: &PathBuf) {
    let out = Command::new(program)
        .env("LD_PRELOAD", shim_library())
        .output()
        .expect("client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed: {stdout}{stderr}",
        program.display()
    );
    assert_eq!(stdout.trim(), "ok", "{stderr}");
}

/// Builds a C client from `tests/c/<name>.c` against libdrm.
fn build_c_client(name: &str) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let binary = target_dir().join(format!("agx-shim-{name}"));
    let cc = Command::new("gcc")
        .args([
            "-O1",
            "-Wall",
            "-Werror",
            "-D_FILE_OFFSET_BITS=64",
            "-I/usr/include/libdrm",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .arg("-ldrm")
        .output()
        .expect("gcc runs (install gcc and libdrm-dev)");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    binary
}

#[test]
fn libdrm_c_client_runs_against_the_simulated_gpu() {
    run_under_shim(&build_c_client("libdrm_client"));
}

/// Thousands of live objects cost the client no descriptors, and a client
/// closing every descriptor it did not open cannot make the device map or
/// export the wrong file.
#[test]
fn the_device_keeps_out_of_the_clients_descriptors() {
    run_under_shim(&build_c_client("descriptors_client"));
}

#[test]
fn drm_crate_client_runs_against_the_simulated_gpu() {
    let binary = target_dir().join("examples/drm_client");
    assert!(binary.exists(), "cargo test builds the examples");
    run_under_shim(&binary);
}

#[test]
fn without_the_shim_there_is_no_device() {
    let binary = target_dir().join("examples/drm_client");
    let out = Command::new(&binary)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("client runs");
    assert!(!out.status.success());
}

#[test]
fn the_umd_real_device_path_runs_against_the_simulated_gpu() {
    let binary = target_dir().join("examples/umd_client");
    assert!(binary.exists(), "cargo test builds the examples");
    run_under_shim(&binary);
}
