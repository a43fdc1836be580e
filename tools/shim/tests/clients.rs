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
    let out = run_under_shim_with(program, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed: {stdout}{stderr}",
        program.display()
    );
    assert_eq!(stdout.trim(), "ok", "{stderr}");
}

fn run_under_shim_with(program: &PathBuf, env: &[(&str, &str)]) -> std::process::Output {
    Command::new(program)
        .env("LD_PRELOAD", shim_library())
        .envs(env.iter().copied())
        .output()
        .expect("client runs")
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
        .args(["-ldrm", "-lpthread"])
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

/// read/poll/write on the DRM file, signals during blocking calls (EINTR
/// or a restart, by SA_RESTART), and SYNCOBJ_EVENTFD, as Linux gives them.
#[test]
fn file_operations_signals_and_eventfds_behave_as_linux() {
    run_under_shim(&build_c_client("file_ops_client"));
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

/// The README's scene renders under the shim, bit for bit as on an
/// in-process device, while every core is busy with other work: the
/// watchdog counts GPU work, so host load cannot make it time out.
#[test]
fn the_readme_scene_renders_under_the_shim_on_a_loaded_machine() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let load: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let binary = target_dir().join("examples/scene_client");
    assert!(binary.exists(), "cargo test builds the examples");
    run_under_shim(&binary);
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        thread.join().unwrap();
    }
}

/// `AGX_WORK_BUDGET_UNITS` sets the watchdog's budget: with a tiny one
/// the scene's submission is stopped, the client sees ETIMEDOUT, and the
/// kernel log says why.
#[test]
fn the_work_budget_comes_from_the_environment() {
    let binary = target_dir().join("examples/scene_client");
    let out = run_under_shim_with(&binary, &[("AGX_WORK_BUDGET_UNITS", "1000")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("GPU timeout: the submission used up its work budget"),
        "{stderr}"
    );
    assert!(stderr.contains("budget_units=1000"), "{stderr}");
    assert!(
        stderr.contains(
            &std::io::Error::from_raw_os_error(rustix::io::Errno::TIMEDOUT.raw_os_error())
                .to_string()
        ),
        "{stderr}"
    );
}

/// The ioctl fuzzer through the shim's real descriptors (seeded, so the
/// same calls every run): the client survives, holds no more descriptors
/// once its DRM files are closed, and a known job still renders exactly.
#[test]
fn fuzzed_ioctls_through_the_shim_leave_the_device_working() {
    let binary = target_dir().join("examples/ioctl_fuzz_client");
    assert!(binary.exists(), "cargo test builds the examples");
    for seed in ["1", "2"] {
        let out = Command::new(&binary)
            .args([seed, "10000"])
            .env("LD_PRELOAD", shim_library())
            .env("AGX_WORK_BUDGET_UNITS", "1048576")
            .env("AGX_LOG", "error")
            .output()
            .expect("client runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "seed {seed}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok",
            "{stderr}"
        );
    }
}

/// libdrm's enumeration and name lookups, the /dev/dri listing, sysfs,
/// and the /proc/self/fd and fdinfo entries of a DRM file.
#[test]
fn clients_find_the_device_as_on_linux() {
    run_under_shim(&build_c_client("enumerate_client"));
}

/// An unmodified program from a distribution package: `program` as
/// installed, or a failure saying what to install (`.ci/run` installs it).
fn packaged_program(program: &str, package: &str) -> PathBuf {
    let path = PathBuf::from("/usr/bin").join(program);
    assert!(
        path.exists(),
        "{} is missing: install Debian's {package} (.ci/run does)",
        path.display()
    );
    path
}

/// libdrm's own `drmdevice` (Debian libdrm-tests) lists the device with
/// both nodes on the platform bus, by enumeration and by descriptor.
#[test]
fn drmdevice_lists_the_device() {
    let out = run_under_shim_with(&packaged_program("drmdevice", "libdrm-tests"), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("--- Devices reported 1 ---"), "{stdout}");
    for expected in [
        "nodes[0] /dev/dri/card0",
        "nodes[2] /dev/dri/renderD128",
        "fullname\t/soc/gpu@206400000",
        "apple,agx-t8103",
        "--- Retrieving device info, for node /dev/dri/card0 ---",
        "--- Retrieving device info, for node /dev/dri/renderD128 ---",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in {stdout}");
    }
    assert!(!stdout.contains("failed"), "{stdout}");
}

/// `drm_info` (Debian drm-info) finds the card node by enumeration,
/// opens it, reads the driver's version and capabilities, and stops where
/// it stops on a real asahi machine: the driver has no mode setting, so
/// MODE_GETRESOURCES fails with EOPNOTSUPP.
#[test]
fn drm_info_finds_the_card_node_and_stops_where_it_does_on_asahi() {
    let out = run_under_shim_with(
        &packaged_program("drm_info", "drm-info"),
        &[("AGX_LOG", "error"), ("RUST_LOG", "error")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stderr.trim(),
        "drmModeGetResources: Operation not supported\n\
         Failed to retrieve information from /dev/dri/card0",
        "{stdout}"
    );
}

/// The card node: DRM master, authentication, GET_CLIENT/GET_STATS,
/// GET_UNIQUE and SET_VERSION, flink names, and mode setting refused as
/// a render-only driver refuses it (IGT's core_auth, core_getclient,
/// core_getstats and core_setmaster checks among them).
#[test]
fn the_card_node_behaves_as_a_primary_node() {
    let out = run_under_shim_with(&build_c_client("primary_node_client"), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    // The client needs root with CAP_SYS_ADMIN (as IGT's core tests do);
    // it may skip only where this test runs without them too.
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .map(str::split_whitespace)
            .expect("status field")
            .collect::<Vec<_>>()
    };
    // Effective uid 0, and CAP_SYS_ADMIN (bit 21) in the effective set.
    let privileged = field("Uid:")[1] == "0"
        && u64::from_str_radix(field("CapEff:")[0], 16).is_ok_and(|bits| bits & (1 << 21) != 0);
    let expected = if privileged { "ok" } else { "skip" };
    assert_eq!(stdout.trim(), expected, "{stderr}");
}

/// In the in-process mode a forked child gets ENODEV (and a log line
/// naming the way out) from every use of the device, never a hang; the
/// parent keeps its device.
#[test]
fn a_forked_child_gets_enodev_in_the_in_process_mode() {
    let out = run_under_shim_with(&build_c_client("fork_in_process_client"), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "ok", "{stderr}");
    assert!(
        stderr.contains("was forked from process") && stderr.contains("gets ENODEV"),
        "{stderr}"
    );
    // Once per process.
    assert_eq!(
        stderr.matches("was forked from process").count(),
        1,
        "{stderr}"
    );
}

/// Every `SystemConfig` field has its variable; one that does not parse
/// keeps the device from probing: opening a node fails with ENODEV and
/// the log names the variable.
#[test]
fn a_bad_configuration_variable_stops_the_device_with_a_reason() {
    let client = build_c_client("libdrm_client");
    let out = run_under_shim_with(&client, &[("AGX_TVB_POLICY", "bogus")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("AGX_TVB_POLICY=\"bogus\" is not one of asahi, demand, sync"),
        "{stderr}"
    );
    assert!(stderr.contains("(errno 19)"), "{stderr}");
    // A good one is taken.
    let out = run_under_shim_with(
        &client,
        &[
            ("AGX_TVB_POLICY", "sync"),
            ("AGX_RAM_BYTES", "1073741824"),
            ("AGX_GPU_THREADS", "1"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
