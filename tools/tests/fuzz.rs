//! The in-tree fuzzers, a bounded number of seeded cases (the same every
//! run): structure-aware ioctl sequences through the kmd's entry point and
//! mutated GPU work, with the device's promises checked after each round.
//! `agx-fuzz --seconds N` runs them for longer.

use std::time::Duration;

use agx_tools::fuzz::{self, Broken, GpuFuzzer, IoctlFuzzer, KmdTarget};

#[test]
fn fuzzed_ioctls_and_gpu_work_break_no_promise() {
    let base = fuzz::base_capture().expect("the base frame");
    let system = fuzz::fuzz_system().expect("system");
    let baseline = fuzz::baseline(&system);
    let target = KmdTarget(&system);
    for seed in [1, 2] {
        let mut ioctl = IoctlFuzzer::new(&target, seed);
        let mut gpu = GpuFuzzer::new(&system, base.clone(), seed).expect("the known job runs");
        for round in 0..2 {
            if let Err(broken) = fuzz::round(&mut ioctl, &mut gpu, &system, &baseline, 4000, 40) {
                panic!("seed {seed} round {round}: {broken}");
            }
        }
        assert!(ioctl.totals.ioctls >= 8000);
        assert!(ioctl.totals.succeeded > 1000, "{:?}", ioctl.totals);
        assert_eq!(gpu.totals.jobs, 80);
        // The mutations reach the GPU: some jobs fault, some still draw.
        assert!(
            gpu.totals.outcomes.get("EIO").copied().unwrap_or(0) > 0,
            "{:?}",
            gpu.totals
        );
        assert!(
            gpu.totals.outcomes.get("ok").copied().unwrap_or(0) > 0,
            "{:?}",
            gpu.totals
        );
    }
}

/// The checks can fail: a file left open is a leak, found within the
/// patience given.
#[test]
fn the_round_checks_see_what_is_left_behind() {
    let system = fuzz::fuzz_system().expect("system");
    let baseline = fuzz::baseline(&system);
    let target = KmdTarget(&system);
    let mut ioctl = IoctlFuzzer::new(&target, 7);
    ioctl.run(500).unwrap();
    assert!(matches!(
        fuzz::check_device(&system, &baseline, Duration::from_millis(100)),
        Err(Broken::Leak { .. })
    ));
    ioctl.close_all();
    fuzz::check_device(&system, &baseline, Duration::from_secs(60)).unwrap();
}
