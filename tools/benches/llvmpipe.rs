//! The stack against Mesa's llvmpipe, side by side: the same scene (the
//! Stanford bunny from Debian's glmark2-data and the built-in torus, the
//! same camera, vertex layout, texture and per-pixel Phong shading) at
//! several sizes, drawn by both on the same number of threads. Each case
//! runs in a child process of its own, so that its CPU time (all threads
//! of the process: umd, kmd, the simulated firmware and GPU; or llvmpipe's
//! rasteriser threads) and its peak resident memory are its own.
//!
//! ```text
//! cargo bench -p agx-tools --bench llvmpipe -- [--sizes 256,1024] [--scenes bunny,torus]
//!     [--frames N] [--threads N]
//! ```
//!
//! A scene is `bunny`, `torus` or the path of an .obj or .ply mesh.
//!
//! It prints a Markdown table: per scene and size, the steady frame (the
//! median of frames 1..N) and the first frame, wall and CPU time for each,
//! the ratios, peak RSS and how the two images differ.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use agx_tools::compare::ImageDiff;
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;

#[path = "../tests/common/reference.rs"]
mod reference;

const BUNNY: &str = "/usr/share/glmark2/models/bunny.obj";

/// The two renderers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Which {
    Stack,
    Llvmpipe,
}

/// One case's measurements, as the child prints them.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    first_wall: Duration,
    first_cpu: Duration,
    steady_wall: Duration,
    steady_cpu: Duration,
    peak_rss_kib: u64,
}

fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn load_scene(name: &str) -> Result<Mesh, String> {
    match name {
        "torus" => Ok(Mesh::torus(300, 100)),
        "bunny" => Mesh::load(Path::new(BUNNY))
            .map_err(|e| format!("{e} (Debian: apt-get install glmark2-data)")),
        path if path.ends_with(".obj") || path.ends_with(".ply") => {
            Mesh::load(Path::new(path)).map_err(|e| e.to_string())
        }
        other => Err(format!(
            "unknown scene {other:?} (bunny, torus, or a path to an .obj or .ply mesh)"
        )),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// One renderer drawing `frames` frames of `scene` at `size`² on
/// `threads` threads, the last frame's RGBA8 pixels written to `out`.
#[derive(Debug, Clone)]
struct Case {
    which: Which,
    scene: String,
    size: u32,
    frames: u32,
    threads: usize,
    out: PathBuf,
}

impl Case {
    /// The child's command-line arguments, after `--case`.
    fn args(&self) -> Vec<String> {
        let which = match self.which {
            Which::Stack => "stack",
            Which::Llvmpipe => "llvmpipe",
        };
        vec![
            which.to_owned(),
            self.scene.clone(),
            self.size.to_string(),
            self.frames.to_string(),
            self.threads.to_string(),
            self.out.display().to_string(),
        ]
    }

    /// The case [`Case::args`] wrote.
    fn parse(args: &[String]) -> Result<Case, String> {
        let [which, scene, size, frames, threads, out] = args else {
            return Err(format!("--case takes 6 arguments, got {args:?}"));
        };
        let which = match which.as_str() {
            "stack" => Which::Stack,
            "llvmpipe" => Which::Llvmpipe,
            other => return Err(format!("unknown renderer {other:?}")),
        };
        let parse = |s: &str| s.parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
        Ok(Case {
            which,
            scene: scene.clone(),
            size: parse(size)?,
            frames: parse(frames)?.max(2),
            threads: parse(threads)? as usize,
            out: PathBuf::from(out),
        })
    }
}

/// Runs `case` in this process and returns the measurements.
fn run_case(case: &Case) -> Result<Measured, String> {
    let &Case {
        which,
        size,
        frames,
        threads,
        ..
    } = case;
    let out = case.out.as_path();
    let mesh = load_scene(&case.scene)?;
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    let mut timed = |draw: &mut dyn FnMut(u32) -> Result<(), String>| -> Result<(), String> {
        for frame in 0..frames {
            let (wall, cpu) = (Instant::now(), cpu_time());
            draw(frame)?;
            walls.push(wall.elapsed());
            cpus.push(cpu_time() - cpu);
        }
        Ok(())
    };
    let pixels = match which {
        Which::Stack => {
            let config = agx_sim::SystemConfig {
                gpu_threads: threads,
                ..agx_sim::SystemConfig::default()
            };
            let device = agx_umd::Device::open_simulated(config).map_err(|e| e.to_string())?;
            let renderer = Renderer::new(&device, &mesh, size, size).map_err(|e| e.to_string())?;
            timed(&mut |frame| renderer.frame(frame).map(drop).map_err(|e| e.to_string()))?;
            renderer.pixels().map_err(|e| e.to_string())?
        }
        Which::Llvmpipe => {
            // The parent set llvmpipe's environment (`spawn_case`).
            let reference = reference::scene(&mesh, size, size).map_err(|e| e.to_string())?;
            timed(&mut |frame| {
                reference
                    .draw(&reference::frame(frame, size, size))
                    .map_err(|e| e.to_string())
            })?;
            reference.read_pixels().map_err(|e| e.to_string())?
        }
    };
    std::fs::write(out, &pixels).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(Measured {
        first_wall: walls[0],
        first_cpu: cpus[0],
        steady_wall: median(walls[1..].to_vec()),
        steady_cpu: median(cpus[1..].to_vec()),
        peak_rss_kib: peak_rss_kib(),
    })
}

/// Runs `case` in a child process of this program.
fn spawn_case(case: &Case) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    if case.which == Which::Llvmpipe {
        command.envs(agx_llvmpipe::environment(case.threads));
    }
    let output = command
        .arg("--case")
        .args(case.args())
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix("measured "));
    match (output.status.success(), line) {
        (true, Some(line)) => {
            let n: Vec<u64> = line
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let ns = |i: usize| Duration::from_nanos(n.get(i).copied().unwrap_or(0));
            Ok(Measured {
                first_wall: ns(0),
                first_cpu: ns(1),
                steady_wall: ns(2),
                steady_cpu: ns(3),
                peak_rss_kib: n.get(4).copied().unwrap_or(0),
            })
        }
        _ => Err(format!(
            "{:?} {} {}: {}{}",
            case.which,
            case.scene,
            case.size,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.1}x", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

fn list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|v| v.parse().map_err(|_| format!("bad list item {v:?}")))
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some("--case") {
        child(&args[1..])
    } else {
        parent(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llvmpipe bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn child(args: &[String]) -> Result<(), String> {
    let m = run_case(&Case::parse(args)?)?;
    println!(
        "measured {} {} {} {} {}",
        m.first_wall.as_nanos(),
        m.first_cpu.as_nanos(),
        m.steady_wall.as_nanos(),
        m.steady_cpu.as_nanos(),
        m.peak_rss_kib
    );
    Ok(())
}

fn parent(args: &[String]) -> Result<(), String> {
    let mut sizes = vec![256u32, 512, 1024, 2048];
    let mut scenes = vec!["bunny".to_owned(), "torus".to_owned()];
    let mut frames = 4u32;
    let mut threads = 2usize;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--sizes" => sizes = list(value()?)?,
            "--scenes" => scenes = list(value()?)?,
            "--frames" => frames = value()?.parse().map_err(|e| format!("--frames: {e}"))?,
            "--threads" => threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            // cargo bench passes --bench; criterion-style filters are not
            // taken.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("agx-llvmpipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = run_cases(&dir, &scenes, &sizes, frames, threads);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Runs every case with its images in `dir` and prints the table.
fn run_cases(
    dir: &Path,
    scenes: &[String],
    sizes: &[u32],
    frames: u32,
    threads: usize,
) -> Result<(), String> {
    println!(
        "{frames} frames per case (steady = median of frames 1..{frames}), {threads} threads each; \
         times in ms, CPU = all threads of the renderer's process"
    );
    println!();
    println!(
        "| scene | size | llvmpipe steady wall / CPU | stack steady wall / CPU | ratio wall / CPU | \
         llvmpipe first wall | stack first wall | stack first / steady | peak RSS llvmpipe / stack (MiB) | image difference |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for scene in scenes {
        for &size in sizes {
            let case = |which, name| Case {
                which,
                scene: scene.clone(),
                size,
                frames,
                threads,
                out: dir.join(format!("{scene}-{size}-{name}.rgba")),
            };
            let (reference_case, stack_case) = (
                case(Which::Llvmpipe, "llvmpipe"),
                case(Which::Stack, "stack"),
            );
            let reference = spawn_case(&reference_case)?;
            let stack = spawn_case(&stack_case)?;
            let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
            let diff = ImageDiff::of(&read(&reference_case.out)?, &read(&stack_case.out)?);
            println!(
                "| {scene} | {size}² | {} / {} | {} / {} | {} / {} | {} | {} | {} | {:.0} / {:.0} | {diff} |",
                ms(reference.steady_wall),
                ms(reference.steady_cpu),
                ms(stack.steady_wall),
                ms(stack.steady_cpu),
                ratio(stack.steady_wall, reference.steady_wall),
                ratio(stack.steady_cpu, reference.steady_cpu),
                ms(reference.first_wall),
                ms(stack.first_wall),
                ratio(stack.first_wall, stack.steady_wall),
                reference.peak_rss_kib as f64 / 1024.0,
                stack.peak_rss_kib as f64 / 1024.0,
            );
        }
    }
    Ok(())
}
