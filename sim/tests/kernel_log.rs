//! The kernel log: a GPU fault reaches the log installed by
//! `agx_sim::log` as one dmesg-like line naming the address, the unit,
//! the access, the fault type, the queue and the submission. (Its own
//! test binary: a process has one log.)

mod common;

use agx_hw::formats::CdmStreamTerminate;
use agx_kmd::Errno;
use agx_sim::log::{install, LogConfig, LogError};
use common::machine::*;

#[test]
fn a_gpu_fault_is_one_line_in_the_log_file() {
    let path = std::env::temp_dir().join(format!("agx-kernel-log-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let config = LogConfig {
        filter: "warn".into(),
        file: Some(path.clone()),
    };
    install(&config).unwrap();
    // One log per process.
    assert!(matches!(install(&config), Err(LogError::AlreadyInstalled)));
    let m = Machine::new(5000);
    // A compute launch whose pipeline is zero words: no valid USC
    // control word at its address.
    let mut stream = launch(0x3_0000, [32, 1, 1], [32, 1, 1]);
    stream.extend(CdmStreamTerminate::default().pack().unwrap());
    m.poke(m.data, 0x9_0000, &stream);
    assert_eq!(m.run(0x9_0000), Some(Errno::EIO));
    let log = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
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
