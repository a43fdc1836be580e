//! The kernel log: a GPU fault reaches the log installed by
//! `agx_sim::log` as one dmesg-like line naming the address, the unit,
//! the access, the fault type, the queue and the submission; work a unit
//! refuses is logged before it, with what was refused. (Its own test
//! binary: a process has one log.)

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use agx_hw::formats::{
    CdmBlock, CdmIndirect, CdmLaunch, CdmLaunchWord0, CdmLaunchWord1, CdmMode, CdmStreamTerminate,
};
use agx_kmd::Errno;
use agx_sim::log::{install, LogConfig, LogError};
use agx_uapi::asahi::{CmdRender, CmdType};
use common::machine::*;
use zerocopy::{FromZeros, IntoBytes};

/// Tests that write to the log file: the last of them to pass removes it.
const LOGGING_TESTS: usize = 2;

/// The process's log file, installed by the first caller. Tests that
/// make faults hold the guard, so the lines a test reads are its own.
fn log_file() -> MutexGuard<'static, PathBuf> {
    static LOG: OnceLock<Mutex<PathBuf>> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("agx-kernel-log-{}.txt", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = LogConfig {
            filter: "warn".into(),
            file: Some(path.clone()),
        };
        install(&config).unwrap();
        // One log per process.
        assert!(matches!(install(&config), Err(LogError::AlreadyInstalled)));
        Mutex::new(path)
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

/// Runs `work`; returns the lines it added to the log at `path`.
fn logged(path: &Path, work: impl FnOnce()) -> String {
    let before = std::fs::metadata(path).map_or(0, |m| m.len()) as usize;
    work();
    let log = std::fs::read(path).unwrap();
    String::from_utf8_lossy(&log[before..]).into_owned()
}

/// A logging test is done: the last one removes the file.
fn done(path: &Path) {
    static DONE: AtomicUsize = AtomicUsize::new(0);
    if DONE.fetch_add(1, Ordering::SeqCst) + 1 == LOGGING_TESTS {
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn a_gpu_fault_is_one_line_in_the_log_file() {
    let path = log_file();
    let m = Machine::new(5000);
    // A compute launch whose pipeline is zero words: no valid USC
    // control word at its address.
    let mut stream = launch(0x3_0000, [32, 1, 1], [32, 1, 1]);
    stream.extend(CdmStreamTerminate::default().pack().unwrap());
    m.poke(m.data, 0x9_0000, &stream);
    let log = logged(&path, || assert_eq!(m.run(0x9_0000), Some(Errno::EIO)));
    let faults: Vec<&str> = log.lines().filter(|l| l.contains("GPU fault")).collect();
    assert_eq!(faults.len(), 1, "{log}");
    let line = faults[0];
    for wanted in [
        "WARN",
        &format!("{:#x}", USC_BASE + 0x3_0000),
        "read",
        "by the Usc",
        "work the GPU cannot run",
        "queue=",
        "submission=1",
    ] {
        assert!(line.contains(wanted), "{wanted:?} in {line:?}");
    }
    done(&path);
}

/// The `refused:` line with `reason` in `log`, checked for its unit and
/// address, and followed by the kmd's fault line for the same address
/// and unit.
fn assert_refused(log: &str, unit: &str, address: u64, reason: &str) {
    let lines: Vec<&str> = log.lines().collect();
    let address = format!("{address:#x}");
    let at = lines
        .iter()
        .position(|l| l.contains("refused:") && l.contains(reason))
        .unwrap_or_else(|| panic!("no refusal {reason:?} in:\n{log}"));
    let refused = lines[at];
    for wanted in [
        "WARN",
        "agx_firmware_sim::fault",
        &format!("refused: {reason}"),
        &format!("unit={unit}"),
        &format!("address={address}"),
    ] {
        assert!(refused.contains(wanted), "{wanted:?} in {refused:?}");
    }
    let fault = lines[at + 1..]
        .iter()
        .find(|l| l.contains("GPU fault"))
        .unwrap_or_else(|| panic!("no GPU fault after the refusal in:\n{log}"));
    for wanted in [
        &format!("GPU fault: read at {address} by the {unit}"),
        "work the GPU cannot run",
    ] {
        assert!(fault.contains(wanted), "{wanted:?} in {fault:?}");
    }
    // Refused once.
    assert_eq!(log.matches("refused:").count(), 1, "{log}");
}

#[test]
fn every_unit_logs_what_it_refused_before_the_fault() {
    let path = log_file();
    let m = Machine::new(5000);

    // The VDM: a control word of block type 7, which no block has.
    const STREAM: u64 = 0x9_0000;
    m.poke(m.data, STREAM, &(7u32 << 29).to_le_bytes());
    let render = CmdRender {
        vdm_ctrl_stream_base: DATA_VA + STREAM,
        width_px: 32,
        height_px: 32,
        layers: 1,
        samples: 1,
        utile_width_px: 32,
        utile_height_px: 32,
        sample_size_B: 4,
        ..CmdRender::new_zeroed()
    };
    let log = logged(&path, || {
        assert_eq!(
            m.submit(CmdType::Render, render.as_bytes()),
            Some(Errno::EIO)
        );
    });
    assert_refused(
        &log,
        "Vdm",
        DATA_VA + STREAM,
        "VdmBlock word 0xe0000000 of unknown type 7",
    );

    // The CDM: an indirect-local launch whose sizes in memory ask for an
    // empty threadgroup.
    const LAUNCH: u64 = 0xA_0000;
    let pipeline = m.kernel("    stop", 0x1000, 0x40, &[0], 0x8_0000, 0);
    m.poke_u32s(0xB_0000, &[32, 1, 1, 0, 1, 1]);
    let mut stream = Vec::new();
    CdmBlock::Launch(CdmLaunch {
        header: CdmLaunchWord0 {
            mode: CdmMode::IndirectLocal,
            ..CdmLaunchWord0::default()
        },
        word1: CdmLaunchWord1 { pipeline },
        global: None,
        indirect: Some(CdmIndirect {
            address: DATA_VA + 0xB_0000,
        }),
        local: None,
    })
    .build(&mut stream)
    .unwrap();
    stream.extend(CdmStreamTerminate::default().pack().unwrap());
    m.poke(m.data, LAUNCH, &stream);
    let log = logged(&path, || assert_eq!(m.run(LAUNCH), Some(Errno::EIO)));
    assert_refused(
        &log,
        "Cdm",
        DATA_VA + LAUNCH,
        "a threadgroup of 0x1x1 threads (1 to 1024 are modelled)",
    );
    done(&path);
}

#[test]
fn a_bad_filter_or_file_is_an_error_not_a_silent_default() {
    let bad_filter = LogConfig {
        filter: "agx_kmd=loud".into(),
        file: None,
    };
    assert!(matches!(
        install(&bad_filter),
        Err(LogError::BadFilter { .. })
    ));
    let bad_file = LogConfig {
        filter: "warn".into(),
        file: Some("/nonexistent-directory/agx.log".into()),
    };
    assert!(matches!(install(&bad_file), Err(LogError::File { .. })));
}
