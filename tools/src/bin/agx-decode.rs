//! `agx-decode CAPTURE`: every submission of a capture decoded as text
//! (`--json` for machine-readable output, `--submit N` for one); with
//! `--lint`, only the findings of the linter, exiting 1 when there are
//! any. Captures come from `AGX_KMD_CAPTURE=FILE` (every submission the
//! simulated kernel sees) or `AGX_UMD_CAPTURE=FILE`
//! (`Documentation/capture-format.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "agx-decode",
    version,
    about = "Decode and lint an AGX submission capture",
    after_help = "Exit status: 0 on success; 1 with --lint when there are findings; 2 for a bad \
        command line, a file that cannot be read or is not a capture, or a --submit past its end."
)]
struct Args {
    /// The capture file.
    capture: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Only submission N (from 0).
    #[arg(long)]
    submit: Option<usize>,
    /// Only the linter's findings; exit 1 if there are any.
    #[arg(long)]
    lint: bool,
}

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-decode");
    let args = Args::parse();
    let capture = match agx_tools::decode::open_capture(&args.capture) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agx-decode: {}: {e}", args.capture.display());
            return ExitCode::from(2);
        }
    };
    if args.submit.is_some_and(|n| n >= capture.submissions.len()) {
        eprintln!(
            "agx-decode: {}: the capture has {}",
            args.capture.display(),
            agx_tools::count(capture.submissions.len(), "submission")
        );
        return ExitCode::from(2);
    }
    let decoded = agx_tools::decode::decode_all(&capture, args.submit);
    let lints: usize = decoded.iter().map(|d| d.lints.len()).sum();
    if args.json {
        agx_tools::out!(
            "agx-decode",
            "{}",
            agx_tools::decode::to_json(&capture, &decoded)
        );
    } else if args.lint {
        for d in &decoded {
            for l in &d.lints {
                agx_tools::outln!(
                    "agx-decode",
                    "submission {}: {} at {:#x}: {}",
                    d.index,
                    l.rule,
                    l.address,
                    l.message
                );
            }
        }
        if lints == 0 {
            agx_tools::outln!(
                "agx-decode",
                "no findings in {}",
                agx_tools::count(decoded.len(), "submission")
            );
        }
    } else {
        if let Some(p) = &capture.params {
            agx_tools::outln!(
                "agx-decode",
                "device: G{}{} revision {:#x}, {} clusters",
                p.gpu_generation,
                char::from_u32(p.gpu_variant).unwrap_or('?'),
                p.gpu_revision,
                p.num_clusters_total
            );
        }
        for d in &decoded {
            agx_tools::out!("agx-decode", "{}", d.text);
        }
    }
    if args.lint && lints > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
