//! `agx-debug trace CAPTURE (--pixel X,Y | --thread X,Y,Z | --vertex I)`:
//! replays a capture's submission with one invocation traced instruction
//! by instruction; `agx-debug pixel CAPTURE --pixel X,Y` gives a pixel's
//! history; `agx-debug map CAPTURE --kind K --out FILE.png` draws a
//! per-pixel count over it (see `agx_tools::debug`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agx_tools::debug::{Invocation, MapKind, TraceStage};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "agx-debug",
    version,
    about = "Debug a captured frame on the simulated GPU",
    after_help = "Exit status: 0 when the invocation asked for was found and traced, the pixel's \
        history found, or the map written; 1 when the replay failed, nothing matched or the PNG \
        could not be written; 2 for a bad command line, a file that is not a capture, or a --submission past \
        its end."
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

/// Which per-tile program a pixel is traced in.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum StageArg {
    /// The fragment shader of every draw that shades the pixel.
    Fragment,
    /// The background (tile load) program.
    Background,
    /// The end-of-tile (tile store) program.
    EndOfTile,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace one invocation: every instruction its SIMD-group executed,
    /// with the execution mask and the values the invocation's lane read
    /// and wrote, as the interpreter computed them.
    Trace {
        /// The capture file (`AGX_KMD_CAPTURE` or `AGX_UMD_CAPTURE`).
        capture: PathBuf,
        /// The submission to replay (from 0).
        #[arg(long, default_value_t = 0)]
        submission: usize,
        /// A fragment: the pixel X,Y of the render target.
        #[arg(long, value_parser = parse_pair, conflicts_with_all = ["thread", "vertex"])]
        pixel: Option<(u32, u32)>,
        /// Which program of the pixel's tile (with --pixel).
        #[arg(long, value_enum, default_value = "fragment", requires = "pixel")]
        stage: StageArg,
        /// A compute thread: its position in the grid, X,Y,Z.
        #[arg(long, value_parser = parse_triple, conflicts_with = "vertex")]
        thread: Option<[u32; 3]>,
        /// Only the launch of this number in the submission (with
        /// --thread; from 0, in the order the GPU ran them).
        #[arg(long, requires = "thread")]
        dispatch: Option<usize>,
        /// A vertex shader invocation: the vertex id.
        #[arg(long)]
        vertex: Option<u32>,
        /// Only the draw of this number in the submission (with --vertex;
        /// from 0, in the order the GPU ran them).
        #[arg(long, requires = "vertex")]
        draw: Option<usize>,
        /// Print the trace as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A pixel's history: every tile pass over it, the primitives that
    /// covered it with their depth and stencil tests, the programs that
    /// ran there, what the tilebuffer held when the tile was stored, and
    /// the pixel in memory before and after.
    Pixel {
        /// The capture file.
        capture: PathBuf,
        /// The submission to replay (from 0).
        #[arg(long, default_value_t = 0)]
        submission: usize,
        /// The pixel X,Y of the render target.
        #[arg(long, value_parser = parse_pair)]
        pixel: (u32, u32),
        /// Print the history as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Draw a per-pixel count over a submission as a PNG with a legend:
    /// fragment-shader instructions, fragments shaded (overdraw), or
    /// partial-render reloads.
    Map {
        /// The capture file.
        capture: PathBuf,
        /// The submission to replay (from 0).
        #[arg(long, default_value_t = 0)]
        submission: usize,
        /// What to count.
        #[arg(long, value_enum)]
        kind: KindArg,
        /// The PNG to write.
        #[arg(long)]
        out: PathBuf,
        /// Print the counts as JSON (width, height, row-major values).
        #[arg(long)]
        json: bool,
    },
}

/// What a map counts.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum KindArg {
    /// Fragment-shader instructions executed per pixel.
    Instructions,
    /// Fragments shaded per pixel.
    Overdraw,
    /// Partial-render reloads per pixel.
    Reloads,
}

fn numbers(text: &str, n: usize) -> Result<Vec<u32>, String> {
    let parts: Vec<_> = text.split(',').map(str::trim).collect();
    if parts.len() != n {
        return Err(format!("expected {n} numbers separated by commas"));
    }
    parts
        .iter()
        .map(|p| p.parse::<u32>().map_err(|e| format!("{p:?}: {e}")))
        .collect()
}

fn parse_pair(text: &str) -> Result<(u32, u32), String> {
    let v = numbers(text, 2)?;
    Ok((v[0], v[1]))
}

fn parse_triple(text: &str) -> Result<[u32; 3], String> {
    let v = numbers(text, 3)?;
    Ok([v[0], v[1], v[2]])
}

const TOOL: &str = "agx-debug";

/// Opens the capture and checks the submission, or says why not (exit 2).
fn open(path: &Path, submission: usize) -> Result<agx_capture::Capture, ExitCode> {
    let capture = match agx_tools::decode::open_capture(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{TOOL}: {}: {e}", path.display());
            return Err(ExitCode::from(2));
        }
    };
    if submission >= capture.submissions.len() {
        eprintln!(
            "{TOOL}: {}: the capture has {}",
            path.display(),
            agx_tools::count(capture.submissions.len(), "submission")
        );
        return Err(ExitCode::from(2));
    }
    Ok(capture)
}

/// A replay that could not run: said, exit 1.
fn replay_failed(submission: usize, error: &agx_tools::replay::ReplayError) -> ExitCode {
    eprintln!("{TOOL}: submission {submission}: {error}");
    ExitCode::FAILURE
}

/// Prints `value` as JSON, or as `text` makes it.
fn print<T: serde::Serialize>(
    json: bool,
    value: &T,
    text: fn(&T) -> String,
) -> Result<(), ExitCode> {
    if !json {
        agx_tools::out!(TOOL, "{}", text(value));
        return Ok(());
    }
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            agx_tools::outln!(TOOL, "{text}");
            Ok(())
        }
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

fn main() -> ExitCode {
    agx_tools::install_kernel_log(TOOL);
    match Args::parse().command {
        Command::Trace {
            capture,
            submission,
            pixel,
            stage,
            thread,
            dispatch,
            vertex,
            draw,
            json,
        } => trace(
            &capture,
            submission,
            (
                pixel,
                stage,
                thread.map(|id| (id, dispatch)),
                vertex.map(|i| (i, draw)),
            ),
            json,
        ),
        Command::Pixel {
            capture,
            submission,
            pixel,
            json,
        } => history(&capture, submission, pixel, json),
        Command::Map {
            capture,
            submission,
            kind,
            out,
            json,
        } => map(&capture, submission, kind, &out, json),
    }
}

type Wanted = (
    Option<(u32, u32)>,
    StageArg,
    Option<([u32; 3], Option<usize>)>,
    Option<(u32, Option<usize>)>,
);

fn trace(path: &Path, submission: usize, wanted: Wanted, json: bool) -> ExitCode {
    let (pixel, stage, thread, vertex) = wanted;
    let want = match (pixel, thread, vertex) {
        (Some((x, y)), None, None) => Invocation::Pixel { x, y },
        (None, Some((id, dispatch)), None) => Invocation::Thread { id, dispatch },
        (None, None, Some((index, draw))) => Invocation::Vertex { index, draw },
        _ => {
            eprintln!("{TOOL}: trace: give one of --pixel, --thread and --vertex");
            return ExitCode::from(2);
        }
    };
    let stage = match stage {
        StageArg::Fragment => TraceStage::Fragment,
        StageArg::Background => TraceStage::Background,
        StageArg::EndOfTile => TraceStage::EndOfTile,
    };
    let capture = match open(path, submission) {
        Ok(capture) => capture,
        Err(code) => return code,
    };
    let report = match agx_tools::debug::trace(&capture, submission, want, stage) {
        Ok(report) => report,
        Err(e) => return replay_failed(submission, &e),
    };
    if let Err(code) = print(json, &report, agx_tools::debug::listing) {
        return code;
    }
    if report.invocations.is_empty() {
        eprintln!("{TOOL}: submission {submission}: no invocation matched {want:?}");
        return ExitCode::FAILURE;
    }
    if report.failure.is_some() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn history(path: &Path, submission: usize, pixel: (u32, u32), json: bool) -> ExitCode {
    let capture = match open(path, submission) {
        Ok(capture) => capture,
        Err(code) => return code,
    };
    let history = match agx_tools::debug::pixel_history(&capture, submission, pixel) {
        Ok(history) => history,
        Err(e) => return replay_failed(submission, &e),
    };
    if let Err(code) = print(json, &history, agx_tools::debug::history_listing) {
        return code;
    }
    if history.steps.is_empty() {
        eprintln!(
            "{TOOL}: submission {submission}: no render pass reached pixel ({}, {})",
            pixel.0, pixel.1
        );
        return ExitCode::FAILURE;
    }
    if history.failure.is_some() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn map(path: &Path, submission: usize, kind: KindArg, out: &Path, json: bool) -> ExitCode {
    let kind = match kind {
        KindArg::Instructions => MapKind::Instructions,
        KindArg::Overdraw => MapKind::Overdraw,
        KindArg::Reloads => MapKind::Reloads,
    };
    let capture = match open(path, submission) {
        Ok(capture) => capture,
        Err(code) => return code,
    };
    let map = match agx_tools::debug::map(&capture, submission, kind) {
        Ok(map) => map,
        Err(e) => return replay_failed(submission, &e),
    };
    let (width, height, rgba) = agx_tools::debug::map_image(&map);
    let written = agx_tools::render::encode_png(width, height, &rgba)
        .map_err(|e| e.to_string())
        .and_then(|png| std::fs::write(out, png).map_err(|e| e.to_string()));
    if let Err(e) = written {
        eprintln!("{TOOL}: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    if json {
        match serde_json::to_string(&map) {
            Ok(text) => agx_tools::outln!(TOOL, "{text}"),
            Err(e) => {
                eprintln!("{TOOL}: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        let (max, (x, y)) = map.max();
        let counted = map.values.iter().filter(|&&v| v > 0).count();
        let total: u64 = map.values.iter().sum();
        agx_tools::outln!(
            TOOL,
            "{}, submission {submission}: {}x{} pixels, {counted} counted, {total} in all, max {max} at ({x}, {y})",
            kind.name(),
            map.width,
            map.height
        );
        agx_tools::outln!(
            TOOL,
            "wrote {} ({width}x{height}, the legend below the map)",
            out.display()
        );
        if let Some(failure) = &map.failure {
            agx_tools::outln!(TOOL, "the submission failed: {failure}");
        }
    }
    if map.failure.is_some() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
