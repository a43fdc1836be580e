//! `agx-fuzz [--seed N] [--seconds S]`: fuzzes the simulated device with
//! structure-aware ioctl sequences and mutated GPU work, in rounds, and
//! checks after each that the device kept its promises (no panic, no
//! firmware crash, no hang, nothing leaked, the known job unchanged).
//! Prints the totals; exits non-zero at the first broken promise, naming
//! the seed and round to reproduce it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use agx_tools::fuzz::{self, GpuFuzzer, IoctlFuzzer, KmdTarget};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "agx-fuzz",
    version,
    about = "Fuzz the simulated AGX device",
    after_help = "Exit status: 0 when every round kept the device's promises; 1 at the first \
        broken promise (the message names the seed and round) or if the GPU fuzzer cannot start; \
        2 for a bad command line or when the base frame or device cannot be set up."
)]
struct Args {
    /// The seed (the same seed gives the same cases).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run for this long.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Ioctls per round.
    #[arg(long, default_value_t = 5000)]
    ioctls_per_round: u64,
    /// Mutated GPU jobs per round.
    #[arg(long, default_value_t = 50)]
    jobs_per_round: u64,
}

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-fuzz");
    let args = Args::parse();
    let base = match fuzz::base_capture() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agx-fuzz: cannot capture the base frame: {e}");
            return ExitCode::from(2);
        }
    };
    let system = match fuzz::fuzz_system() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agx-fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let baseline = fuzz::baseline(&system);
    let target = KmdTarget(&system);
    let mut ioctl = IoctlFuzzer::new(&target, args.seed);
    let mut gpu = match GpuFuzzer::new(&system, base, args.seed ^ 0x5eed) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("agx-fuzz: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut rounds = 0u64;
    let mut result = Ok(());
    while started.elapsed() < Duration::from_secs(args.seconds) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fuzz::round(
                &mut ioctl,
                &mut gpu,
                &system,
                &baseline,
                args.ioctls_per_round,
                args.jobs_per_round,
            )
        }));
        rounds += 1;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(broken)) => {
                result = Err(broken.to_string());
                break;
            }
            Err(_) => {
                result = Err("a panic".into());
                break;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    agx_tools::outln!("agx-fuzz", 
        "seed {}: {rounds} rounds in {seconds:.0} s: {} ioctls ({} succeeded, {} files), {} GPU jobs, {} known-job checks",
        args.seed,
        ioctl.totals.ioctls,
        ioctl.totals.succeeded,
        ioctl.totals.files_opened,
        gpu.totals.jobs,
        gpu.totals.known_job_checks,
    );
    agx_tools::outln!("agx-fuzz", "ioctl errnos: {:?}", ioctl.totals.errnos);
    agx_tools::outln!("agx-fuzz", "GPU job outcomes: {:?}", gpu.totals.outcomes);
    match result {
        Ok(()) => {
            agx_tools::outln!("agx-fuzz", "0 crashes, 0 hangs, 0 leaks");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agx-fuzz: seed {} round {rounds}: {e}", args.seed);
            ExitCode::FAILURE
        }
    }
}
