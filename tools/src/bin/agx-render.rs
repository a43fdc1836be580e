//! `agx-render`: draws a mesh through the whole stack to a PNG.
//!
//! With no arguments it renders the built-in scene, a textured,
//! Phong-shaded torus of 60 000 triangles (enough to overflow the
//! parameter buffer's first size), on the simulated device to
//! `frame.png`, and prints the frame time and what the parameter buffer
//! did.

use std::path::PathBuf;
use std::process::ExitCode;

use agx_kmd::tvb::GrowthPolicy;
use agx_tools::mesh::Mesh;
use agx_tools::render::{encode_png, Renderer};
use agx_umd::Device;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "agx-render",
    version,
    about = "Render a mesh through the AGX stack to a PNG"
)]
struct Args {
    /// A Wavefront OBJ or PLY mesh instead of the built-in torus.
    #[arg(long)]
    mesh: Option<PathBuf>,
    /// Frame size, WxH.
    #[arg(long, default_value = "800x600", value_parser = parse_size)]
    size: (u32, u32),
    /// Frames to draw (the mesh turns; the parameter buffer converges).
    #[arg(long, default_value_t = 1)]
    frames: u32,
    /// Parameter-buffer growth policy of the simulated kmd: asahi, demand
    /// or sync (default: `AGX_TVB_POLICY`, else demand).
    #[arg(long, value_parser = parse_policy)]
    tvb_policy: Option<GrowthPolicy>,
    /// Blocks (128 KiB each) the parameter buffer starts with (default:
    /// `AGX_TVB_INITIAL_BLOCKS`, else the kmd's).
    #[arg(long)]
    tvb_initial_blocks: Option<u64>,
    /// Where to write the last frame.
    #[arg(long, default_value = "frame.png")]
    out: PathBuf,
    /// A real asahi DRM node (for example /dev/dri/renderD128) instead of
    /// the simulated device.
    #[arg(long)]
    device: Option<PathBuf>,
    /// Host threads the simulated GPU shades tiles on (default: all).
    #[arg(long)]
    gpu_threads: Option<usize>,
    /// The watchdog's work budget per submission, in work units (default:
    /// `AGX_WORK_BUDGET_UNITS`, else 2^29; see Documentation/gpu.md).
    #[arg(long)]
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
                config.gpu_threads = threads;
            }
            if let Some(units) = args.work_budget_units {
                config.work_budget_units = units;
            }
            Device::open_simulated(config)?
        }
    };
    let (width, height) = args.size;
    println!(
        "mesh: {} triangles, {} vertices; {width}x{height}; device: {}",
        mesh.triangle_count(),
        mesh.vertices.len(),
        args.device
            .as_ref()
            .map_or("simulated".to_owned(), |p| p.display().to_string()),
    );
    let renderer = Renderer::new(&device, &mesh, width, height)?;
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
                format!(
                    "frame {frame}: {:.1} ms; parameter buffer {} blocks ({:.1} MiB){}, \
                     {partials} partial renders ({} in all) visiting {partial_tiles} tiles, \
                     wanted {} pages, {} grows; {} faults",
                    report.gpu_time.as_secs_f64() * 1e3,
                    tvb.blocks,
                    tvb.allocated_bytes() as f64 / (1 << 20) as f64,
                    if grew { " (grew)" } else { "" },
                    tvb.partial_renders,
                    tvb.last_wanted_pages,
                    tvb.grows,
                    report.faults,
                )
            }
            None => format!(
                "frame {frame}: {:.1} ms",
                report.gpu_time.as_secs_f64() * 1e3
            ),
        };
        if progress.is_hidden() {
            println!("{line}");
        } else {
            progress.println(line);
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let png = encode_png(width, height, &renderer.pixels()?)?;
    std::fs::write(&args.out, png)?;
    println!("wrote {}", args.out.display());
    Ok(())
}
