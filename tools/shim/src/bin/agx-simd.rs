//! `agx-simd`: the simulated GPU's device process, which every client of
//! the shim in its device-process mode shares (`Documentation/shim.md`).
//!
//! Started by hand it serves in the foreground, logging to standard
//! error. The shim starts it on a client's first open when none runs
//! (`--spawned`): detached in a process group of its own, logging to
//! `log` in its directory (or `AGX_LOG_FILE`), and exiting once it has
//! had no client for a while.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::Parser;
use std::os::unix::process::CommandExt;

#[derive(Debug, Parser)]
#[command(
    name = "agx-simd",
    version,
    about = "The simulated AGX GPU's device process, shared by the shim's clients",
    after_help = "Exit status: 0 when it served until idle (or, with --spawned, once a device \
        accepts clients); 1 when the device cannot start (the message says why); 2 for a bad \
        command line."
)]
struct Args {
    /// The device directory (its sockets, lock and log); default
    /// `$AGX_SIM_DEVICE_DIR`, else `agx-sim-<uid>/device` in
    /// `$XDG_RUNTIME_DIR` or the temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Exit after this many milliseconds without a client (default:
    /// never; `AGX_SIM_IDLE_EXIT_MS` or 10000 with `--spawned`).
    #[arg(long)]
    idle_exit_ms: Option<u64>,
    /// Start a detached device and return once it accepts clients (what
    /// the shim runs).
    #[arg(long)]
    spawned: bool,
    /// Internal: the detached device `--spawned` starts, which reports
    /// readiness on standard output.
    #[arg(long, hide = true)]
    detached: bool,
}

/// The idle time of a device the shim started.
fn spawned_idle_exit_ms() -> u64 {
    std::env::var("AGX_SIM_IDLE_EXIT_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(10_000)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(agx_simd::protocol::device_dir);
    if args.spawned {
        return spawn(&dir, args.idle_exit_ms.unwrap_or_else(spawned_idle_exit_ms));
    }
    if args.detached {
        if let Err(e) = agx_simd::detach::detach() {
            return report(true, &format!("detaching from the client: {e}"));
        }
    }
    if let Err(e) = agx_sim::log::install(&agx_sim::log::LogConfig::from_env()) {
        eprintln!("agx-simd: kernel log: {e}");
    }
    let config = match agx_sim::SystemConfig::default().with_env() {
        Ok(config) => config,
        Err(e) => return report(args.detached, &format!("{e}")),
    };
    let client_channel_limit = match std::env::var("AGX_CLIENT_CHANNEL_LIMIT") {
        Err(_) => agx_simd::server::CLIENT_CHANNEL_LIMIT,
        Ok(value) => match value.parse::<usize>() {
            Ok(limit) if limit >= 1 => limit,
            _ => {
                return report(
                    args.detached,
                    &format!(
                        "AGX_CLIENT_CHANNEL_LIMIT={value}: expected a number of call channels \
                         from 1"
                    ),
                )
            }
        },
    };
    let options = agx_simd::server::Options {
        dir: dir.clone(),
        idle_exit: args.idle_exit_ms.map(Duration::from_millis),
        config,
        client_channel_limit,
    };
    let detached = args.detached;
    let result = agx_simd::server::serve(options, |ready| match ready {
        Ok(()) if detached => {
            println!("ready");
            let _ = std::io::stdout().flush();
        }
        Ok(()) => eprintln!("agx-simd: serving {}", dir.display()),
        Err(_) => {}
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Someone else serves the directory: what a client wanted.
        Err(agx_simd::server::ServeError::AlreadyRunning { .. }) if detached => {
            println!("ready");
            ExitCode::SUCCESS
        }
        Err(e) => report(detached, &e.to_string()),
    }
}

/// Says why the device did not start: on standard output for `--spawned`
/// to relay, on standard error otherwise.
fn report(detached: bool, reason: &str) -> ExitCode {
    if detached {
        println!("error: {reason}");
    } else {
        eprintln!("agx-simd: {reason}");
    }
    ExitCode::FAILURE
}

/// Starts the detached device and waits for its first line.
fn spawn(dir: &std::path::Path, idle_exit_ms: u64) -> ExitCode {
    if let Err(e) = agx_simd::protocol::ensure_private_dir(dir) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let log_path = dir.join("log");
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
    {
        Ok(log) => log,
        Err(e) => {
            eprintln!("opening {}: {e}", log_path.display());
            return ExitCode::FAILURE;
        }
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("finding agx-simd itself: {e}");
            return ExitCode::FAILURE;
        }
    };
    let child = Command::new(program)
        .arg("--detached")
        .arg("--dir")
        .arg(dir)
        .arg("--idle-exit-ms")
        .arg(idle_exit_ms.to_string())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("starting the device: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The device's first line, within the time a client waits for it.
    let first = child
        .stdout
        .take()
        .map(|stdout| agx_simd::client::read_within(stdout, agx_simd::client::START_TIMEOUT, true));
    let line = match first {
        Some(Ok(Some(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
        Some(Ok(None)) => {
            eprintln!(
                "the device was not ready within {} s (see {}); stopped it",
                agx_simd::client::START_TIMEOUT.as_secs(),
                log_path.display()
            );
            let _ = child.kill();
            let _ = child.wait();
            return ExitCode::FAILURE;
        }
        _ => String::new(),
    };
    match line.lines().next().unwrap_or("").trim_end() {
        "ready" => ExitCode::SUCCESS,
        other => {
            let reason = other.strip_prefix("error: ").unwrap_or(other);
            if reason.is_empty() {
                eprintln!(
                    "the device exited before it was ready (see {})",
                    log_path.display()
                );
            } else {
                eprintln!("{reason}");
            }
            let _ = child.wait();
            ExitCode::FAILURE
        }
    }
}
