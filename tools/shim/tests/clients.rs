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

/// Where the shim keeps DRM files (`AGX_SHIM_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// In a device process shared by every client (the default).
    DeviceProcess,
    /// In the client's own process.
    InProcess,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::DeviceProcess => "device",
            Mode::InProcess => "in-process",
        }
    }
}

/// A device directory of one test's own, so that tests running at once
/// do not share a device process; the device the shim starts there exits
/// shortly after its last client, and the directory goes with the guard.
struct DeviceDir(PathBuf);

impl DeviceDir {
    fn new() -> DeviceDir {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Short: a socket's path has at most 107 bytes.
        let dir = std::env::temp_dir().join(format!(
            "agx-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .expect("device directory");
        DeviceDir(dir)
    }

    /// The device's log (where a device process writes its kernel log).
    fn log(&self) -> String {
        std::fs::read_to_string(self.0.join("log")).unwrap_or_default()
    }
}

impl Drop for DeviceDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `program` under the shim in `mode`, with the device in `dir`.
fn shim_command(program: &PathBuf, mode: Mode, dir: &DeviceDir) -> Command {
    let mut command = Command::new(program);
    command
        .env("LD_PRELOAD", shim_library())
        .env("AGX_SHIM_MODE", mode.name())
        .env("AGX_SIM_DEVICE_DIR", &dir.0)
        .env("AGX_SIM_IDLE_EXIT_MS", "300");
    command
}

/// Runs `program` under the shim in both modes; it must print "ok".
fn run_under_shim(program: &PathBuf) {
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        run_under_shim_in(mode, program);
    }
}

/// Runs `program` under the shim in `mode`; it must print "ok".
fn run_under_shim_in(mode: Mode, program: &PathBuf) {
    let dir = DeviceDir::new();
    let out = shim_command(program, mode, &dir)
        .output()
        .expect("client runs");
    assert_printed_ok(
        &out,
        &format!("{} in the {mode:?} mode", program.display()),
        &dir,
    );
}

/// `out` is a client's that succeeded and printed "ok" (else the failure
/// names `what`, with the client's output and the device's log).
fn assert_printed_ok(out: &std::process::Output, what: &str, dir: &DeviceDir) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "{what}: {}\n{stdout}{stderr}\ndevice log: {}",
        out.status,
        dir.log()
    );
}

/// `status` is an exit with `code`, not a death by a signal: a program
/// killed by one (an abort among them) is a crash to its harness, never
/// the failure a test expects.
fn assert_exited_with(status: std::process::ExitStatus, code: i32, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(code),
        "{what}: expected exit status {code}, got {status} (signal {:?})",
        status.signal()
    );
}

fn run_under_shim_with(program: &PathBuf, env: &[(&str, &str)]) -> std::process::Output {
    run_under_shim_with_in(Mode::DeviceProcess, program, env)
}

fn run_under_shim_with_in(
    mode: Mode,
    program: &PathBuf,
    env: &[(&str, &str)],
) -> std::process::Output {
    let dir = DeviceDir::new();
    shim_command(program, mode, &dir)
        .envs(env.iter().copied())
        .output()
        .expect("client runs")
}

/// Builds a C client from `tests/c/<name>.c` against libdrm.
fn build_c_client(name: &str) -> PathBuf {
    // Each client is built once per run: two tests of one client would
    // otherwise rewrite the binary while the other executes it (ETXTBSY).
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let binary = target_dir().join(format!("agx-shim-{name}"));
    if built.iter().any(|done| done == name) {
        return binary;
    }
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
    built.push(name.to_string());
    binary
}

#[test]
fn libdrm_c_client_runs_against_the_simulated_gpu() {
    run_under_shim(&build_c_client("libdrm_client"));
}

/// A child that inherits the card node's file and changes its user keeps
/// making calls on it, and SET_MASTER is the kernel's EACCES for it (it
/// was ENODEV: the child could not reach the device's private directory).
/// Needs root to change users: CI runs as root; elsewhere the test says
/// so and checks nothing.
#[test]
fn a_child_that_changes_its_user_keeps_the_file() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: cannot change users, nothing checked");
        return;
    }
    run_under_shim_in(Mode::DeviceProcess, &build_c_client("setuid_client"));
}

/// The process id of the device serving `dir`, found by its command line.
fn device_pid(dir: &DeviceDir) -> u32 {
    let dir_text = dir.0.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                text.contains("agx-simd") && text.contains(&dir_text)
            })
        })
        .expect("the device process still runs")
}

/// The device a client starts does not run with the soft resource limits
/// of that client: a client that lowered its address space or file size
/// (a test harness's `ulimit -S`) must not shrink the device every client
/// shares. Each soft limit the client lowered is raised to the hard one
/// (which an unprivileged process cannot raise).
#[test]
fn the_device_runs_with_its_own_soft_limits() {
    let dir = DeviceDir::new();
    let client = build_c_client("libdrm_client");
    // 60 GiB of address space and 512 MB of file size, both soft.
    let mut command = shim_command(&PathBuf::from("/bin/sh"), Mode::DeviceProcess, &dir);
    command
        .args([
            "-c",
            "ulimit -S -v 62914560 && ulimit -S -f 1000000 && exec \"$0\"",
        ])
        .arg(&client)
        .env("AGX_SIM_IDLE_EXIT_MS", "20000");
    let out = command.output().expect("client runs");
    assert_printed_ok(&out, "libdrm_client", &dir);
    let device = device_pid(&dir);
    let limits = std::fs::read_to_string(format!("/proc/{device}/limits")).expect("its limits");
    for name in ["Max address space", "Max file size", "Max open files"] {
        let line = limits
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {limits}"));
        let fields: Vec<&str> = line[name.len()..].split_whitespace().collect();
        assert_eq!(fields[0], fields[1], "{name}: soft and hard: {line}");
    }
    let _ = std::process::Command::new("kill")
        .arg(device.to_string())
        .status();
}

/// The device a client starts takes only the device's own settings from
/// the client's environment (`AGX_*`, `RUST_LOG`, and where things go):
/// another client's variables must not shape the device every client
/// shares. The device is found by its command line, and its environment
/// read from /proc.
#[test]
fn the_device_takes_only_its_own_settings_from_the_client_that_starts_it() {
    let dir = DeviceDir::new();
    let out = shim_command(&build_c_client("libdrm_client"), Mode::DeviceProcess, &dir)
        .env("AGX_SIM_IDLE_EXIT_MS", "20000")
        .env("CANARY_NOT_FOR_THE_DEVICE", "1")
        .env("MALLOC_PERTURB_", "165")
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "libdrm_client", &dir);
    let device = device_pid(&dir);
    let environ = std::fs::read(format!("/proc/{device}/environ")).expect("its environment");
    let names: Vec<String> = environ
        .split(|&b| b == 0)
        .filter_map(|var| {
            let text = String::from_utf8_lossy(var);
            text.split_once('=').map(|(name, _)| name.to_owned())
        })
        .collect();
    assert!(
        names.iter().any(|n| n == "AGX_SIM_IDLE_EXIT_MS"),
        "{names:?}"
    );
    for foreign in ["CANARY_NOT_FOR_THE_DEVICE", "MALLOC_PERTURB_", "LD_PRELOAD"] {
        assert!(
            !names.iter().any(|n| n == foreign),
            "{foreign} in {names:?}"
        );
    }
    // Without a client it would wait 20 s before it exits: stop it now.
    let _ = std::process::Command::new("kill")
        .arg(device.to_string())
        .status();
}

/// The first program to use the shim on a fresh machine opens a node
/// before anything made the user's directory (`agx-sim-<uid>` in
/// `$XDG_RUNTIME_DIR`): the device it starts makes it (that open failed
/// with ENODEV when the device made only its own directory).
#[test]
fn the_first_open_on_a_fresh_machine_starts_the_device() {
    let runtime = DeviceDir::new();
    let program = build_c_client("libdrm_client");
    let out = Command::new(&program)
        .env("LD_PRELOAD", shim_library())
        .env("AGX_SHIM_MODE", "device")
        .env_remove("AGX_SIM_DEVICE_DIR")
        .env("XDG_RUNTIME_DIR", &runtime.0)
        .env("AGX_SIM_IDLE_EXIT_MS", "300")
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "libdrm_client with a fresh XDG_RUNTIME_DIR", &runtime);
    let uid = rustix::process::getuid().as_raw();
    let user_dir = runtime.0.join(format!("agx-sim-{uid}"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&user_dir)
        .expect("the user's directory")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "private");
    assert!(user_dir.join("device").is_dir());
}

/// 100,000 live objects cost the client no descriptors (and small private
/// ones cost the device none each: they share their file's slabs), and a client
/// closing every descriptor it did not open cannot make the device map or
/// export the wrong file.
#[test]
fn the_device_keeps_out_of_the_clients_descriptors() {
    run_under_shim(&build_c_client("descriptors_client"));
}

/// An open DRM file costs the device process no thread (one thread waits
/// for every file's close): 600 open files grow its thread count by less
/// than 60, where each had a thread of its own before, and closed files
/// are released.
#[test]
fn open_files_cost_the_device_no_thread() {
    run_under_shim(&build_c_client("open_files_client"));
}

/// A client's call channels (a device thread each) are capped per process
/// (`AGX_CLIENT_CHANNEL_LIMIT`, here 16): 64 threads waiting on a syncobj
/// at once all get their timeout (`ETIME`; past the cap a call waits for a
/// channel another call gives back), and the device grows by at most the
/// cap's threads, where it grew by one per waiter before.
#[test]
fn a_clients_call_channels_are_capped_and_calls_past_the_cap_still_run() {
    let client = build_c_client("channels_client");
    let dir = DeviceDir::new();
    let out = shim_command(&client, Mode::DeviceProcess, &dir)
        .env("AGX_CLIENT_CHANNEL_LIMIT", "16")
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "channels_client with 16 channels", &dir);
    assert!(
        dir.log().contains("refused a call channel"),
        "the cap was reached: {}",
        dir.log()
    );
}

/// read/poll/write on the DRM file, signals during blocking calls (EINTR
/// or a restart, by SA_RESTART), and SYNCOBJ_EVENTFD, as Linux gives them.
#[test]
fn file_operations_signals_and_eventfds_behave_as_linux() {
    run_under_shim(&build_c_client("file_ops_client"));
}

/// The device serves calls from every point of a process's life: exit
/// handlers, thread-local and pthread_key destructors, library
/// destructors, signal handlers, and a thread still calling while main
/// returns. Each point in a process of its own, and all of them in one;
/// every one must exit 0 having printed "ok" (a panic in the shim aborts
/// the client: status 134, as piglit's runner saw every GL program end).
#[test]
fn calls_are_served_at_every_point_of_a_process_life() {
    let client = build_c_client("exit_paths_client");
    let points = [
        "atexit",
        "thread-destructor",
        "thread-destructor-in-thread",
        "pthread-key",
        "library-destructor",
        "signal-handler",
        "thread-running-at-exit",
        "all",
    ];
    let mut failures = Vec::new();
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        for point in points {
            let dir = DeviceDir::new();
            let out = shim_command(&client, mode, &dir)
                .arg(point)
                .output()
                .expect("client runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || stdout.trim() != "ok" {
                failures.push(format!(
                    "{point} in the {mode:?} mode: {}\n{stdout}{}\ndevice log: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr),
                    dir.log()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// GPU work submitted and waited for where Mesa's GL driver does it at
/// exit (a thread-local destructor, an atexit handler after the thread's
/// own thread-locals are gone) computes what it should, and the process
/// exits 0.
#[test]
fn a_client_submits_and_waits_from_its_exit_handlers() {
    let binary = target_dir().join("examples/exit_submit_client");
    assert!(binary.exists(), "cargo test builds the examples");
    run_under_shim(&binary);
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_exited_with(out.status, 1, &stderr);
    assert!(
        stderr.contains("cannot open /dev/dri/renderD128"),
        "{stderr}"
    );
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
/// kernel log (`AGX_LOG_FILE`, which a device process it starts writes
/// too) says why.
#[test]
fn the_work_budget_comes_from_the_environment() {
    let binary = target_dir().join("examples/scene_client");
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        let dir = DeviceDir::new();
        let log = dir.0.join("kernel.log");
        let out = shim_command(&binary, mode, &dir)
            .env("AGX_WORK_BUDGET_UNITS", "1000")
            .env("AGX_LOG_FILE", &log)
            .output()
            .expect("client runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_exited_with(out.status, 1, &format!("{mode:?}: {stderr}"));
        assert!(
            stderr.contains(
                &std::io::Error::from_raw_os_error(rustix::io::Errno::TIMEDOUT.raw_os_error())
                    .to_string()
            ),
            "{mode:?}: {stderr}"
        );
        let kernel_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            kernel_log.contains("GPU timeout: the submission used up its work budget"),
            "{mode:?}: {kernel_log}"
        );
        assert!(
            kernel_log.contains("budget_units=1000"),
            "{mode:?}: {kernel_log}"
        );
    }
}

/// The ioctl fuzzer through the shim's real descriptors (seeded, so the
/// same calls every run), in both modes: the client survives, holds no
/// more descriptors once its DRM files are closed, and a known job still
/// renders exactly.
#[test]
fn fuzzed_ioctls_through_the_shim_leave_the_device_working() {
    let binary = target_dir().join("examples/ioctl_fuzz_client");
    assert!(binary.exists(), "cargo test builds the examples");
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        for seed in ["1", "2"] {
            let dir = DeviceDir::new();
            let out = shim_command(&binary, mode, &dir)
                .args([seed, "10000"])
                .env("AGX_WORK_BUDGET_UNITS", "1048576")
                .env("AGX_LOG", "error")
                .output()
                .expect("client runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{mode:?} seed {seed}: {stderr}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "ok",
                "{mode:?}: {stderr}"
            );
        }
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
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        the_card_node_behaves_as_a_primary_node_in(mode);
    }
}

fn the_card_node_behaves_as_a_primary_node_in(mode: Mode) {
    let out = run_under_shim_with_in(mode, &build_c_client("primary_node_client"), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{mode:?}: {stdout}{stderr}");
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
    assert_eq!(stdout.trim(), expected, "{mode:?}: {stderr}");
}

/// In the in-process mode a forked child gets ENODEV (and a log line
/// naming the way out) from every use of the device, never a hang; the
/// parent keeps its device.
#[test]
fn a_forked_child_gets_enodev_in_the_in_process_mode() {
    let out = run_under_shim_with_in(
        Mode::InProcess,
        &build_c_client("fork_in_process_client"),
        &[],
    );
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
    for mode in [Mode::DeviceProcess, Mode::InProcess] {
        a_bad_configuration_variable_stops_the_device_in(mode);
    }
}

fn a_bad_configuration_variable_stops_the_device_in(mode: Mode) {
    let client = build_c_client("libdrm_client");
    let out = run_under_shim_with_in(mode, &client, &[("AGX_TVB_POLICY", "bogus")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_exited_with(out.status, 1, &format!("{mode:?}: {stderr}"));
    assert!(
        stderr.contains("AGX_TVB_POLICY=\"bogus\" is not one of asahi, demand, sync"),
        "{mode:?}: {stderr}"
    );
    assert!(stderr.contains("(errno 19)"), "{mode:?}: {stderr}");
    // A good one is taken.
    let out = run_under_shim_with_in(
        mode,
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

/// The multi-process checks, in the device-process mode.
///
/// A forked child shares the parent's file (handles, objects, syncobj
/// waits across the processes), and a file inherited across exec keeps
/// working: two exec'd processes render the README's scene through it at
/// once, each bit for bit as an in-process device renders it.
#[test]
fn forked_and_execd_processes_share_the_file() {
    let client = build_c_client("shared_file_client");
    let scene = target_dir().join("examples/scene_client");
    let dir = DeviceDir::new();
    let out = shim_command(&client, Mode::DeviceProcess, &dir)
        .arg(&scene)
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "shared_file_client", &dir);
}

/// A client that forks after opening the render node submits from both
/// sides of the fork through the shared file at once, and both frames are
/// exact.
#[test]
fn a_forked_client_submits_from_both_sides() {
    let client = target_dir().join("examples/fork_submit_client");
    assert!(client.exists(), "cargo test builds the examples");
    let dir = DeviceDir::new();
    let out = shim_command(&client, Mode::DeviceProcess, &dir)
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "fork_submit_client", &dir);
}

/// Two processes with files of their own share a buffer and a fence: a
/// PRIME fd and a sync file sent over a Unix socket. A third process, on
/// another simulated GPU, imports the sync file as another driver's.
#[test]
fn two_processes_share_a_buffer_and_a_fence() {
    let (dir, other) = (DeviceDir::new(), DeviceDir::new());
    let program = build_c_client("prime_sync_client");
    let out = shim_command(&program, Mode::DeviceProcess, &dir)
        .env("OTHER_DEVICE_DIR", &other.0)
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "prime_sync_client", &dir);
}

/// A PRIME fd answers the dma-buf sync-file ioctls (Mesa's implicit sync
/// on shared buffers) in both modes, with Linux's errno values.
#[test]
fn a_prime_buffer_answers_the_dma_buf_ioctls_in_both_modes() {
    let program = build_c_client("prime_sync_client");
    for mode in [Mode::InProcess, Mode::DeviceProcess] {
        let dir = DeviceDir::new();
        let out = shim_command(&program, mode, &dir)
            .arg("--buffer-fences")
            .output()
            .expect("client runs");
        assert_printed_ok(&out, "prime_sync_client --buffer-fences", &dir);
    }
}

/// The README's scene rendered by two processes at once on one simulated
/// GPU, each bit for bit as an in-process device renders it.
#[test]
fn the_readme_scene_renders_in_two_processes_at_once() {
    let scene = target_dir().join("examples/scene_client");
    let dir = DeviceDir::new();
    let children: Vec<_> = (0..2)
        .map(|_| {
            shim_command(&scene, Mode::DeviceProcess, &dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("client runs")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("client runs");
        assert_printed_ok(&out, "scene_client", &dir);
    }
}

/// A client killed in the middle of its work (files open, submissions in
/// flight) does not disturb another client of the same device, whose
/// frame is still exact, and the device goes on serving new clients.
#[test]
fn a_killed_client_does_not_disturb_another() {
    let scene = target_dir().join("examples/scene_client");
    let dir = DeviceDir::new();
    // The victim draws frames for far longer than the test waits, so that
    // it is killed mid-work however fast the machine.
    let mut victim = shim_command(&scene, Mode::DeviceProcess, &dir)
        .args(["--frames", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("client runs");
    let survivor = shim_command(&scene, Mode::DeviceProcess, &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("client runs");
    // Into its render (the device has started and both have files).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    victim.kill().expect("kill");
    let status = victim.wait().expect("wait");
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "the victim: {status}");
    }
    let out = survivor.wait_with_output().expect("client runs");
    assert_printed_ok(&out, "the surviving scene_client", &dir);
    // A new client of the same device still finds it working.
    let out = shim_command(&build_c_client("libdrm_client"), Mode::DeviceProcess, &dir)
        .output()
        .expect("client runs");
    assert_printed_ok(&out, "a client after the kill", &dir);
}

/// An `AGX_SHIM_MODE` that is neither mode: opening a node fails with
/// ENODEV and one line says why (the shim's log never goes through its
/// own `write`, which consults the mode).
#[test]
fn an_unknown_shim_mode_is_refused_with_a_reason() {
    let dir = DeviceDir::new();
    let out = shim_command(&build_c_client("libdrm_client"), Mode::DeviceProcess, &dir)
        .env("AGX_SHIM_MODE", "bogus")
        .output()
        .expect("client runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_exited_with(out.status, 1, &stderr);
    assert!(
        stderr.contains("AGX_SHIM_MODE=bogus is neither `device` nor `in-process`"),
        "{stderr}"
    );
    assert!(stderr.contains("(errno 19)"), "{stderr}");
}
