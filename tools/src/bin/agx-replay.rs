//! `agx-replay CAPTURE [--out DIR]`: re-submits every submission of a
//! capture to a fresh simulated device and writes the render targets its
//! end-of-tile programs store to `DIR/submitS-cmdC-rtR.png`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "agx-replay",
    version,
    about = "Replay an AGX submission capture on the simulated device",
    after_help = "Exit status: 0 when every submission completed and every image was written; 1 \
        when a submission failed or an image could not be written; 2 for a bad command line, a \
        file that is not a capture, a --submit past its end or an output directory that cannot \
        be created."
)]
struct Args {
    /// The capture file.
    capture: PathBuf,
    /// Where to write the PNGs (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Only submission N (from 0).
    #[arg(long)]
    submit: Option<usize>,
}

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-replay");
    let args = Args::parse();
    let capture = match agx_tools::decode::open_capture(&args.capture) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agx-replay: {}: {e}", args.capture.display());
            return ExitCode::from(2);
        }
    };
    if args.submit.is_some_and(|n| n >= capture.submissions.len()) {
        eprintln!(
            "agx-replay: {}: the capture has {}",
            args.capture.display(),
            agx_tools::count(capture.submissions.len(), "submission")
        );
        return ExitCode::from(2);
    }
    // The output directory is made before anything is replayed.
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!(
            "agx-replay: cannot create the output directory {}: {e}",
            args.out.display()
        );
        return ExitCode::from(2);
    }
    let mut failed = false;
    for index in 0..capture.submissions.len() {
        if args.submit.is_some_and(|n| n != index) {
            continue;
        }
        match agx_tools::replay::replay_one(&capture, index) {
            Ok(r) => {
                agx_tools::outln!(
                    "agx-replay",
                    "submission {index}: {}",
                    r.error
                        .map_or("completed".to_owned(), |e| format!("failed: {e:?}"))
                );
                failed |= r.error.is_some();
                if let Some(failure) = &r.failure {
                    agx_tools::outln!("agx-replay", "  {failure}");
                }
                for t in &r.targets {
                    let path = args
                        .out
                        .join(format!("submit{index}-cmd{}-rt{}.png", t.command, t.index));
                    match agx_tools::render::encode_png(t.width, t.height, &t.rgba)
                        .map_err(|e| e.to_string())
                        .and_then(|png| std::fs::write(&path, png).map_err(|e| e.to_string()))
                    {
                        Ok(()) => agx_tools::outln!(
                            "agx-replay",
                            "  wrote {} ({}x{})",
                            path.display(),
                            t.width,
                            t.height
                        ),
                        Err(e) => {
                            eprintln!("agx-replay: {}: {e}", path.display());
                            failed = true;
                        }
                    }
                }
            }
            Err(e) => {
                eprintln!("agx-replay: submission {index}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
