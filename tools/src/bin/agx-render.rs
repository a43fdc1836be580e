//! `agx-render`: draws a mesh through the whole stack to a PNG.
//!
//! With no arguments it renders the built-in scene, a textured,
//! Phong-shaded torus of 60 000 triangles (enough to overflow the
//! parameter buffer's first size), on the simulated device to
//! `frame.png`, and prints the frame time and what the parameter buffer
//! did.

use std::path::PathBuf;
use std::process::ExitCode;

use agx_kmd::tvb::{GrowthPolicy, BLOCK_BYTES, BLOCK_PAGES, MAX_BLOCKS, MIN_INITIAL_BLOCKS};
use agx_tools::count;
use agx_tools::mesh::Mesh;
use agx_tools::render::{encode_png, Renderer};
use agx_umd::Device;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "agx-render",
    version,
    about = "Render a mesh through the AGX stack to a PNG",
    after_help = "Exit status: 0 when every frame rendered and the PNG was written; 1 when the \
        mesh cannot be read, the output cannot be written, the device cannot be opened or the \
        GPU work failed (the message names the path or the fault); 2 for a bad command line."
)]
struct Args {
    /// A Wavefront OBJ or PLY mesh instead of the built-in torus.
    #[arg(long)]
    mesh: Option<PathBuf>,
    /// Frame size, WxH.
    #[arg(long, default_value = "800x600", value_parser = parse_size)]
    size: (u32, u32),
    /// Frames to draw (the mesh turns; the parameter buffer converges).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    frames: u32,
    /// Parameter-buffer growth policy of the simulated kmd: asahi, demand
    /// or sync (default: `AGX_TVB_POLICY`, else demand).
    #[arg(long, value_parser = parse_policy, conflicts_with = "device")]
    tvb_policy: Option<GrowthPolicy>,
    /// Blocks (128 KiB each) the parameter buffer starts with, 8 to 6579
    /// (default: `AGX_TVB_INITIAL_BLOCKS`, else 8).
    #[arg(
        long,
        conflicts_with = "device",
        value_parser = clap::value_parser!(u64).range(MIN_INITIAL_BLOCKS..=MAX_BLOCKS)
    )]
    tvb_initial_blocks: Option<u64>,
    /// Where to write the last frame, a .png file.
    #[arg(long, default_value = "frame.png", value_parser = parse_png_path)]
    out: PathBuf,
    /// A real asahi DRM node (for example /dev/dri/renderD128) instead of
    /// the simulated device.
    #[arg(long)]
    device: Option<PathBuf>,
    /// Host threads the simulated GPU shades tiles on (default:
    /// `AGX_GPU_THREADS`, else one per CPU).
    #[arg(long, conflicts_with = "device", value_parser = clap::value_parser!(u64).range(1..=1024))]
    gpu_threads: Option<u64>,
    /// The watchdog's work budget per submission, in work units (default:
    /// `AGX_WORK_BUDGET_UNITS`, else 2^32; see Documentation/gpu.md).
    #[arg(long, conflicts_with = "device", value_parser = clap::value_parser!(u64).range(1..))]
    work_budget_units: Option<u64>,
}

fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s.split_once(['x', 'X']).ok_or("expected WxH")?;
    let w: u32 = w.parse().map_err(|_| format!("bad width {w:?}"))?;
    let h: u32 = h.parse().map_err(|_| format!("bad height {h:?}"))?;
    if !(1..=16384).contains(&w) || !(1..=16384).contains(&h) {
        return Err("width and height must be 1..=16384".into());
    }
    Ok((w, h))
}

/// A path ending in `.png`: the only format agx-render writes.
fn parse_png_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("png") => Ok(path),
        _ => Err(format!(
            "{s}: agx-render writes PNG; give a path ending in .png"
        )),
    }
}

fn parse_policy(s: &str) -> Result<GrowthPolicy, String> {
    s.parse()
        .map_err(|e: agx_sim::kmd::tvb::UnknownPolicy| e.to_string())
}

fn main() -> ExitCode {
    agx_tools::install_kernel_log("agx-render");
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agx-render: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A frame's error, with the simulated device's line about the GPU fault
/// or timeout behind it (address, unit, reason; queue and submission).
fn with_failure_summary(device: &Device, error: agx_umd::Error) -> Box<dyn std::error::Error> {
    let summary = device
        .simulated()
        .and_then(|sim| sim.system().device().scheduler().take_last_failure());
    match (&error, summary) {
        (agx_umd::Error::GpuFault { .. }, Some(summary)) => format!("{error}\n  {summary}").into(),
        _ => error.into(),
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let mesh = match &args.mesh {
        Some(path) => Mesh::load(path)?,
        None => Mesh::torus(300, 100),
    };
    // The output is a new file beside the target, made before the frames
    // are drawn (a path that cannot be written fails at once, naming it),
    // and renamed onto the target only once the PNG is in it: a failure
    // leaves an existing file at that path as it was.
    let partial = partial_path(&args.out);
    let out = std::fs::File::create(&partial)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    let rendered = render(args, &mesh, out).and_then(|()| {
        std::fs::rename(&partial, &args.out)
            .map_err(|e| format!("cannot write {}: {e}", args.out.display()).into())
    });
    if rendered.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    rendered
}

/// `.NAME.partial-PID` in the directory of `out`.
fn partial_path(out: &std::path::Path) -> PathBuf {
    let name = out
        .file_name()
        .map_or_else(|| "frame.png".into(), |n| n.to_string_lossy().into_owned());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn render(
    args: &Args,
    mesh: &Mesh,
    mut out: std::fs::File,
) -> Result<(), Box<dyn std::error::Error>> {
    let device = match &args.device {
        Some(path) => Device::open(path)?,
        None => {
            // The environment, then the command line over it.
            let mut config = agx_sim::SystemConfig {
                gpu_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
                ..agx_sim::SystemConfig::default()
            }
            .with_env()?;
            if let Some(policy) = args.tvb_policy {
                config.tvb_policy = policy;
            }
            if let Some(blocks) = args.tvb_initial_blocks {
                config.tvb_initial_blocks = blocks;
            }
            if let Some(threads) = args.gpu_threads {
                config.gpu_threads = usize::try_from(threads)?;
            }
            if let Some(units) = args.work_budget_units {
                config.work_budget_units = units;
            }
            Device::open_simulated(config)?
        }
    };
    let (width, height) = args.size;
    agx_tools::outln!(
        "agx-render",
        "mesh: {} triangles, {} vertices; {width}x{height}; device: {}",
        mesh.triangle_count(),
        mesh.vertices.len(),
        args.device
            .as_ref()
            .map_or("simulated".to_owned(), |p| p.display().to_string()),
    );
    let renderer = Renderer::new(&device, mesh, width, height)?;
    // On a terminal: frames done, and a spinner and the time so far that
    // keep moving while a long frame renders (indicatif hides the bar
    // when stderr is not a terminal).
    let progress = {
        let bar = indicatif::ProgressBar::new(u64::from(args.frames.max(1)));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {bar:40} {pos}/{len} frames, {elapsed} so far",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    };
    let mut last_blocks = None;
    let mut last_partials = (0, 0);
    for frame in 0..args.frames.max(1) {
        let report = renderer
            .frame(frame)
            .map_err(|e| with_failure_summary(&device, e))?;
        let line = match report.tvb {
            Some(tvb) => {
                let grew = last_blocks.is_some_and(|b| b != tvb.blocks);
                last_blocks = Some(tvb.blocks);
                let (partials, partial_tiles) = (
                    tvb.partial_renders - last_partials.0,
                    tvb.partial_render_tiles - last_partials.1,
                );
                last_partials = (tvb.partial_renders, tvb.partial_render_tiles);
                // Sizes in 128 KiB blocks, the unit the buffer grows by,
                // with MiB beside them.
                let wanted_blocks = tvb.last_wanted_pages.div_ceil(BLOCK_PAGES);
                let mib = |blocks: u64| (blocks * BLOCK_BYTES) as f64 / f64::from(1 << 20);
                format!(
                    "frame {frame}: {:.1} ms; parameter buffer {} blocks ({:.1} MiB){}, \
                     the scene wanted {wanted_blocks} blocks ({:.1} MiB), {} in all; \
                     {} ({} in all) visiting {}; {}",
                    report.gpu_time.as_secs_f64() * 1e3,
                    tvb.blocks,
                    mib(tvb.blocks),
                    if grew { " (grew)" } else { "" },
                    mib(wanted_blocks),
                    count(tvb.grows as usize, "grow"),
                    count(partials as usize, "partial render"),
                    tvb.partial_renders,
                    count(partial_tiles as usize, "tile"),
                    count(report.faults as usize, "fault"),
                )
            }
            None => format!(
                "frame {frame}: {:.1} ms",
                report.gpu_time.as_secs_f64() * 1e3
            ),
        };
        if progress.is_hidden() {
            agx_tools::outln!("agx-render", "{line}");
        } else {
            progress.println(line);
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let png = encode_png(width, height, &renderer.pixels()?)?;
    std::io::Write::write_all(&mut out, &png)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    agx_tools::outln!("agx-render", "wrote {}", args.out.display());
    Ok(())
}
