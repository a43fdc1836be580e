//! `agx-debug`: a capture replayed with one invocation traced.
//!
//! The hardware runs a SIMD-group's 32 lanes in lockstep and nothing on it
//! can be single-stepped. The simulator can: a capture's submission is
//! replayed on a fresh simulated device (as `agx-replay` does) whose GPU
//! carries a probe ([`agx_sim::ShaderProbe`]). The probe picks, in every
//! SIMD-group that starts, the lane running the invocation asked for (a
//! fragment by its pixel, a compute thread by its position in the grid,
//! a vertex by its index), and the interpreter records what that lane
//! executed, instruction by instruction. Every group the probe does not
//! pick runs as it would without it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agx_capture::Capture;
use agx_hw::isa::table::sr;
use agx_sim::{
    GroupStart, PixelEvent, ShaderEngine, ShaderProbe, Stage, System, SystemConfig, TracedLane,
};
use serde::Serialize;

use crate::replay::{replay_on, ReplayError, Replayed};

/// Which invocation to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    /// The fragment shading pixel (`x`, `y`) of the render target (or, with
    /// [`TraceStage::Background`] or [`TraceStage::EndOfTile`], that
    /// pixel's lane of the tile program).
    Pixel {
        /// Column.
        x: u32,
        /// Row.
        y: u32,
    },
    /// The compute thread at this position in its grid.
    Thread {
        /// The thread's `thread_position_in_grid`.
        id: [u32; 3],
        /// Only in the submission's launch of this number (from 0, in
        /// the order the GPU ran them); every launch without.
        dispatch: Option<usize>,
    },
    /// The vertex shader invocation of this vertex id (index).
    Vertex {
        /// The vertex id (`r5` when the shader starts).
        index: u32,
        /// Only in the submission's draw of this number (from 0, in the
        /// order the GPU ran them); every draw without.
        draw: Option<usize>,
    },
}

/// Which per-tile program a pixel is traced in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceStage {
    /// The fragment shader (every draw that shades the pixel).
    #[default]
    Fragment,
    /// The background (tile load) program.
    Background,
    /// The end-of-tile (tile store) program.
    EndOfTile,
}

/// The probe `agx-debug` gives the simulated GPU.
#[derive(Debug)]
struct Probe {
    want: Invocation,
    stage: TraceStage,
    traced_lanes: Mutex<Vec<Traced>>,
    /// The tile (threadgroup position: column, row, layer) the background
    /// program last ran the pixel in.
    tile: Mutex<Option<[u32; 3]>>,
    /// The launches' and draws' control-stream addresses, numbered in the
    /// order their first SIMD-group started (the GPU runs one thread).
    numbered: Numbering,
}

/// Launches and draws numbered in the order the GPU reached them.
#[derive(Debug, Default)]
struct Numbering {
    launches: Mutex<Vec<u64>>,
    draws: Mutex<Vec<u64>>,
}

impl Numbering {
    fn number(list: &Mutex<Vec<u64>>, address: u64) -> usize {
        let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
        match list.iter().position(|&a| a == address) {
            Some(n) => n,
            None => {
                list.push(address);
                list.len() - 1
            }
        }
    }

    /// The number of the launch or draw `stage` belongs to.
    fn of(&self, stage: Stage) -> Option<usize> {
        match stage {
            Stage::Compute { launch } => Some(Numbering::number(&self.launches, launch)),
            Stage::Vertex { draw } => Some(Numbering::number(&self.draws, draw)),
            _ => None,
        }
    }
}

impl Probe {
    fn position(start: &GroupStart<'_>, lane: usize, axis: u32) -> Option<u32> {
        start
            .group
            .special
            .lane(sr::THREAD_POSITION_IN_GRID + axis, lane)
    }

    /// The lane of a fragment, background or end-of-tile group that runs
    /// pixel (`x`, `y`), if any. A helper lane (an uncovered member of a
    /// covered quad) is not the pixel's fragment. The background program
    /// runs on every pixel of the render area, so its group names the
    /// pixel's tile; the end-of-tile program runs once per tile, each lane
    /// at the tile's origin: lane 0 of the group of the tile the
    /// background program last found the pixel in.
    fn pixel_lane(&self, start: &GroupStart<'_>, (x, y): (u32, u32)) -> Option<usize> {
        let present = start.group.present;
        match start.stage {
            Stage::Fragment | Stage::Background { .. } => {
                let lane = (0..agx_sim::LANES).find(|&lane| {
                    present & (1 << lane) != 0
                        && Probe::position(start, lane, 0) == Some(x)
                        && Probe::position(start, lane, 1) == Some(y)
                        && start.group.special.lane(sr::IS_ACTIVE_THREAD, lane) != Some(0)
                })?;
                if matches!(start.stage, Stage::Background { .. }) {
                    *self.tile.lock().unwrap_or_else(|p| p.into_inner()) = Some(Probe::tile(start));
                }
                Some(lane)
            }
            Stage::EndOfTile => {
                let tile = *self.tile.lock().unwrap_or_else(|p| p.into_inner());
                (tile == Some(Probe::tile(start)) && present & 1 != 0).then_some(0)
            }
            _ => None,
        }
    }

    /// The first present lane of a compute or vertex group that `wanted`
    /// picks, if the group's launch or draw is the one numbered `number`
    /// (any, without).
    fn numbered_lane(
        &self,
        start: &GroupStart<'_>,
        number: Option<usize>,
        wanted: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        let this = self.numbered.of(start.stage);
        if number.is_some_and(|n| this != Some(n)) {
            return None;
        }
        (0..agx_sim::LANES).find(|&lane| start.group.present & (1 << lane) != 0 && wanted(lane))
    }

    /// The tile a per-tile program's group runs on.
    fn tile(start: &GroupStart<'_>) -> [u32; 3] {
        [0, 1, 2].map(|axis| {
            start
                .group
                .special
                .lane(sr::THREADGROUP_POSITION_IN_GRID + axis, 0)
                .unwrap_or(u32::MAX)
        })
    }
}

impl ShaderProbe for Probe {
    fn lane_to_trace(&self, start: &GroupStart<'_>) -> Option<usize> {
        match (self.want, start.stage) {
            (Invocation::Pixel { x, y }, stage) => {
                // (Run for every per-tile group, so that the background
                // program's tile is known when the end-of-tile one starts.)
                let lane = self.pixel_lane(start, (x, y))?;
                let wanted = matches!(
                    (self.stage, stage),
                    (TraceStage::Fragment, Stage::Fragment)
                        | (TraceStage::Background, Stage::Background { .. })
                        | (TraceStage::EndOfTile, Stage::EndOfTile)
                );
                wanted.then_some(lane)
            }
            (Invocation::Thread { id, dispatch }, Stage::Compute { .. }) => {
                self.numbered_lane(start, dispatch, &|lane| {
                    (0..3).all(|axis| Probe::position(start, lane, axis) == Some(id[axis as usize]))
                })
            }
            (Invocation::Vertex { index, draw }, Stage::Vertex { .. }) => {
                self.numbered_lane(start, draw, &|lane| {
                    start.group.read(agx_hw::isa::Reg::r(5), lane) == u64::from(index)
                })
            }
            _ => None,
        }
    }

    fn traced(&self, lane: TracedLane) {
        let number = self.numbered.of(lane.stage);
        let mut traced = traced(lane);
        traced.number = number;
        self.traced_lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(traced);
    }
}

/// A register or uniform an instruction named, in the traced lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operand {
    /// Its name (`r3`, `r0l`, `u4`).
    pub name: String,
    /// Before the instruction.
    pub before: u64,
    /// After it.
    pub after: u64,
    /// Whether the instruction wrote it.
    pub destination: bool,
}

/// Memory or a unit the traced lane reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    /// `load`, `store`, `atomic`, `texture load`, `texture sample`,
    /// `image write`.
    pub kind: &'static str,
    /// The GPU virtual address, for memory.
    pub address: Option<u64>,
    /// Bytes at it.
    pub size_bytes: u32,
    /// The texture request and its texel, the atomic's operation and
    /// what it found, the image write's request.
    pub detail: String,
}

/// One instruction the traced lane's SIMD-group executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Its address.
    pub pc: u64,
    /// Its disassembly.
    pub text: String,
    /// The execution mask it ran with.
    pub exec_mask: u32,
    /// Whether the traced lane ran it.
    pub active: bool,
    /// What it named.
    pub operands: Vec<Operand>,
    /// The memory and units the lane reached.
    pub accesses: Vec<Access>,
    /// The fault it stopped with.
    pub error: Option<String>,
}

/// One traced invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Traced {
    /// The stage (`fragment`, `compute`, `vertex`, `background`,
    /// `end-of-tile`).
    pub stage: &'static str,
    /// The firmware address of the command that ran it.
    pub command: u64,
    /// For compute, the launch's control-stream address; for a vertex
    /// shader, the draw's.
    pub control_block: Option<u64>,
    /// For compute, the launch's number in the submission (from 0, in the
    /// order the GPU ran them, `--dispatch`); for a vertex shader, the
    /// draw's (`--draw`).
    pub number: Option<usize>,
    /// The program's address.
    pub program: u64,
    /// The lane it ran in.
    pub lane: usize,
    /// The lanes present in its SIMD-group.
    pub present: u32,
    /// For a per-tile program, the samples its lane covers (a fragment's
    /// coverage after the tests and hidden-surface removal).
    pub coverage: Option<u32>,
    /// What it executed.
    pub steps: Vec<Step>,
    /// Steps past the trace's limit, not kept.
    pub steps_dropped: u64,
}

/// What `agx-debug trace` found in one submission.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    /// The submission's index in the capture.
    pub submission: usize,
    /// The invocations traced, in the order their SIMD-groups ended.
    pub invocations: Vec<Traced>,
    /// The submission's failure on the GPU (the device's line), if any.
    pub failure: Option<String>,
}

fn traced(lane: TracedLane) -> Traced {
    Traced {
        stage: lane.stage.name(),
        command: lane.command,
        control_block: match lane.stage {
            Stage::Compute { launch } => Some(launch),
            Stage::Vertex { draw } => Some(draw),
            _ => None,
        },
        number: None,
        program: lane.program,
        lane: lane.trace.lane,
        present: lane.present,
        coverage: lane.coverage,
        steps: lane
            .trace
            .steps
            .into_iter()
            .map(|step| Step {
                pc: step.pc,
                text: step.text,
                exec_mask: step.exec_mask,
                active: step.active,
                operands: step
                    .values
                    .into_iter()
                    .map(|v| Operand {
                        name: v.name,
                        before: v.before,
                        after: v.after,
                        destination: v.destination,
                    })
                    .collect(),
                accesses: step
                    .accesses
                    .into_iter()
                    .map(|a| Access {
                        kind: a.kind,
                        address: a.address,
                        size_bytes: a.size_bytes,
                        detail: a.detail,
                    })
                    .collect(),
                error: step.error,
            })
            .collect(),
        steps_dropped: lane.trace.steps_dropped,
    }
}

/// Replays submission `index` of `capture` with `want` traced in `stage`.
/// The GPU runs one thread, so that invocations come in the order the
/// hardware's one core would run them.
pub fn trace(
    capture: &Capture,
    index: usize,
    want: Invocation,
    stage: TraceStage,
) -> Result<TraceReport, ReplayError> {
    let probe = Arc::new(Probe {
        want,
        stage,
        traced_lanes: Mutex::new(Vec::new()),
        tile: Mutex::new(None),
        numbered: Numbering::default(),
    });
    let Replayed { failure, .. } = replay_probed(capture, index, probe.clone())?;
    let invocations = std::mem::take(
        &mut *probe
            .traced_lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    Ok(TraceReport {
        submission: index,
        invocations,
        failure,
    })
}

/// A value as the listing shows it: hex, and for a 32-bit word that is a
/// finite float of moderate size, the float too.
fn shown(name: &str, value: u64) -> String {
    let is_half = name.ends_with('l') || name.ends_with('h');
    if !is_half && value <= u64::from(u32::MAX) {
        let f = f32::from_bits(value as u32);
        if f.is_finite() && f != 0.0 && (1e-6..1e9).contains(&f.abs()) {
            return format!("{value:#x} ({f})");
        }
    }
    format!("{value:#x}")
}

/// The report as text: each invocation, then each step with the values it
/// read and wrote in the traced lane.
pub fn listing(report: &TraceReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let count = report.invocations.len();
    for (n, t) in report.invocations.iter().enumerate() {
        let _ = write!(
            out,
            "invocation {} of {count}: {} program {:#x}, lane {} (present {:#010x}), command {:#x}",
            n + 1,
            t.stage,
            t.program,
            t.lane,
            t.present,
            t.command
        );
        if let Some(coverage) = t.coverage {
            let _ = write!(out, ", coverage {coverage:#x}");
        }
        match (t.stage, t.control_block, t.number) {
            ("compute", Some(launch), Some(n)) => {
                let _ = write!(out, ", dispatch {n} (launch {launch:#x})");
            }
            ("vertex", Some(draw), Some(n)) => {
                let _ = write!(out, ", draw {n} (at {draw:#x})");
            }
            _ => {}
        }
        let _ = writeln!(out, ", {} instructions", t.steps.len());
        for step in &t.steps {
            let _ = write!(
                out,
                "  {:#010x}  {:<48} exec {:#010x}{}",
                step.pc,
                step.text,
                step.exec_mask,
                if step.active { "" } else { "  (lane inactive)" }
            );
            let _ = writeln!(out);
            for v in &step.operands {
                if v.destination && step.active {
                    let _ = writeln!(
                        out,
                        "      {} = {}  (was {})",
                        v.name,
                        shown(&v.name, v.after),
                        shown(&v.name, v.before)
                    );
                } else {
                    let _ = writeln!(out, "      {}: {}", v.name, shown(&v.name, v.before));
                }
            }
            for a in &step.accesses {
                let _ = write!(out, "      {}", a.kind);
                if let Some(address) = a.address {
                    let _ = write!(out, " {address:#x} ({} bytes)", a.size_bytes);
                }
                if !a.detail.is_empty() {
                    let _ = write!(out, ": {}", a.detail);
                }
                let _ = writeln!(out);
            }
            if let Some(error) = &step.error {
                let _ = writeln!(out, "      fault: {error}");
            }
        }
        if t.steps_dropped > 0 {
            let _ = writeln!(out, "  ... {} more instructions not kept", t.steps_dropped);
        }
    }
    if let Some(failure) = &report.failure {
        let _ = writeln!(out, "the submission failed: {failure}");
    }
    out
}

/// What a map counts per pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Instructions the fragment shaders executed for the pixel (those
    /// their SIMD-group ran while the pixel's lane was in the execution
    /// mask), over every fragment of it.
    Instructions,
    /// Fragments shaded at the pixel (helper lanes not counted).
    Overdraw,
    /// Times the pixel's tile was loaded again after a partial render:
    /// runs of the partial background program, one per segment resumed
    /// after a partial render that visited the tile.
    Reloads,
}

impl MapKind {
    /// The map's name as the tool prints it.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Instructions => "fragment-shader instructions per pixel",
            MapKind::Overdraw => "fragments shaded per pixel",
            MapKind::Reloads => "partial-render reloads per pixel",
        }
    }
}

/// A per-pixel count over one submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PixelMap {
    /// The submission's index in the capture.
    pub submission: usize,
    /// Columns: one past the rightmost pixel any counted program ran on.
    pub width: u32,
    /// Rows, likewise.
    pub height: u32,
    /// Row-major counts.
    pub values: Vec<u64>,
    /// The submission's failure on the GPU (the device's line), if any.
    pub failure: Option<String>,
}

impl PixelMap {
    /// The count at (`x`, `y`) (0 outside the map).
    pub fn at(&self, x: u32, y: u32) -> u64 {
        if x < self.width && y < self.height {
            self.values[(y * self.width + x) as usize]
        } else {
            0
        }
    }

    /// The largest count and the first pixel holding it.
    pub fn max(&self) -> (u64, (u32, u32)) {
        let (index, &value) = self
            .values
            .iter()
            .enumerate()
            .rev()
            .max_by_key(|&(_, v)| *v)
            .unwrap_or((0, &0));
        let width = self.width.max(1) as usize;
        (value, ((index % width) as u32, (index / width) as u32))
    }
}

/// Counts per pixel, gathered from the groups the GPU ran.
#[derive(Debug, Default)]
struct Counts {
    instructions: HashMap<(u32, u32), u64>,
    fragments: HashMap<(u32, u32), u64>,
    /// Background program runs of resumed segments (reloads).
    reloads: HashMap<(u32, u32), u64>,
}

/// The probe of `agx-debug map`: every fragment group counted lane by
/// lane, and every reloading background group.
#[derive(Debug, Default)]
struct MapProbe {
    counts: Mutex<Counts>,
}

impl ShaderProbe for MapProbe {
    fn lane_to_trace(&self, _start: &GroupStart<'_>) -> Option<usize> {
        None
    }

    fn traced(&self, _lane: TracedLane) {}

    fn count_lanes(&self, start: &GroupStart<'_>) -> bool {
        matches!(
            start.stage,
            Stage::Fragment | Stage::Background { reload: true }
        )
    }

    fn counted(
        &self,
        _command: u64,
        stage: Stage,
        group: &agx_sim::SimdGroup,
        counts: &agx_sim::LaneCounts,
    ) {
        let mut all = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for lane in (0..agx_sim::LANES).filter(|&lane| group.present & (1 << lane) != 0) {
            let special = |sr: u32| group.special.lane(sr, lane);
            let (Some(x), Some(y)) = (
                special(sr::THREAD_POSITION_IN_GRID),
                special(sr::THREAD_POSITION_IN_GRID + 1),
            ) else {
                continue;
            };
            // Helper lanes are no fragment of their pixel.
            if special(sr::IS_ACTIVE_THREAD) == Some(0) {
                continue;
            }
            match stage {
                Stage::Fragment => {
                    *all.fragments.entry((x, y)).or_default() += 1;
                    *all.instructions.entry((x, y)).or_default() += counts.instructions[lane];
                }
                Stage::Background { reload: true } => *all.reloads.entry((x, y)).or_default() += 1,
                _ => {}
            }
        }
    }
}

/// Replays submission `index` of `capture` counting, per pixel, what
/// `kind` says.
pub fn map(capture: &Capture, index: usize, kind: MapKind) -> Result<PixelMap, ReplayError> {
    let probe = Arc::new(MapProbe::default());
    let Replayed { failure, .. } = replay_probed(capture, index, probe.clone())?;
    let counts = std::mem::take(&mut *probe.counts.lock().unwrap_or_else(|p| p.into_inner()));
    let per_pixel = match kind {
        MapKind::Instructions => counts.instructions,
        MapKind::Overdraw => counts.fragments,
        MapKind::Reloads => counts.reloads,
    };
    // The map spans every pixel a counted program ran on.
    let (mut width, mut height) = (0u32, 0u32);
    for &(x, y) in per_pixel.keys() {
        width = width.max(x.saturating_add(1));
        height = height.max(y.saturating_add(1));
    }
    let (width, height) = (width.min(MAX_MAP_SIDE_PX), height.min(MAX_MAP_SIDE_PX));
    let mut values = vec![0u64; width as usize * height as usize];
    for ((x, y), value) in per_pixel {
        if x < width && y < height {
            values[(y * width + x) as usize] = value;
        }
    }
    Ok(PixelMap {
        submission: index,
        width,
        height,
        values,
        failure,
    })
}

/// The largest side a map is drawn at (the render area's limit).
pub const MAX_MAP_SIDE_PX: u32 = 16_384;

/// Replays submission `index` of `capture` on a one-thread interpreted
/// GPU carrying `probe`.
fn replay_probed(
    capture: &Capture,
    index: usize,
    probe: Arc<dyn ShaderProbe>,
) -> Result<Replayed, ReplayError> {
    let s = capture
        .submissions
        .get(index)
        .ok_or(ReplayError::NoSuchSubmission(index))?;
    let config = SystemConfig {
        ram_bytes: 4 << 30,
        ..SystemConfig::default()
    }
    .with_env()
    .map_err(|_| ReplayError::Device)?;
    let config = SystemConfig {
        gpu_threads: 1,
        shader_engine: ShaderEngine::Interpreter,
        ..config
    };
    let system = System::with_probe(config, Some(probe)).map_err(|_| ReplayError::Device)?;
    replay_on(&system, s, index)
}

/// A colour for `t` in 0..=1: dark blue through cyan, green and yellow to
/// red.
fn ramp(t: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 5] = [
        [20.0, 20.0, 140.0],
        [0.0, 170.0, 230.0],
        [40.0, 200.0, 60.0],
        [250.0, 220.0, 0.0],
        [230.0, 20.0, 20.0],
    ];
    let t = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    std::array::from_fn(|c| (STOPS[i][c] + (STOPS[i + 1][c] - STOPS[i][c]) * f).round() as u8)
}

/// Digits 0-9, 3x5 pixels, a row per entry (bit 2 the left column).
const DIGITS: [[u8; 5]; 10] = [
    [7, 5, 5, 5, 7],
    [2, 6, 2, 2, 7],
    [7, 1, 7, 4, 7],
    [7, 1, 7, 1, 7],
    [5, 5, 7, 1, 1],
    [7, 4, 7, 1, 7],
    [7, 4, 7, 5, 7],
    [7, 1, 1, 1, 1],
    [7, 5, 7, 5, 7],
    [7, 5, 7, 1, 7],
];

/// Pixel rows of the legend under a map: a gap, the colour bar from 1 to
/// the largest count, and the two numbers under its ends.
pub const LEGEND_ROWS: u32 = 16;

/// The map as RGBA rows, with its legend under it: a pixel with no count
/// is black, the others on the ramp from 1 (dark blue) to the largest
/// count (red).
pub fn map_image(map: &PixelMap) -> (u32, u32, Vec<u8>) {
    let (max, _) = map.max();
    let width = map.width.max(24);
    let height = map.height + LEGEND_ROWS;
    let mut rgba = vec![0u8; width as usize * height as usize * 4];
    let colour = |value: u64| -> [u8; 3] {
        if value == 0 {
            [0, 0, 0]
        } else if max <= 1 {
            ramp(1.0)
        } else {
            ramp((value - 1) as f64 / (max - 1) as f64)
        }
    };
    let mut put = |x: u32, y: u32, c: [u8; 3]| {
        if x < width && y < height {
            let at = (y as usize * width as usize + x as usize) * 4;
            rgba[at..at + 4].copy_from_slice(&[c[0], c[1], c[2], 255]);
        }
    };
    for y in 0..map.height {
        for x in 0..map.width {
            put(x, y, colour(map.at(x, y)));
        }
    }
    // The legend: a bar 5 rows high, then the numbers.
    let bar = map.height + 3;
    for x in 0..width {
        let t = f64::from(x) / f64::from((width - 1).max(1));
        let c = if max == 0 { [0, 0, 0] } else { ramp(t) };
        for y in bar..bar + 5 {
            put(x, y, c);
        }
    }
    let mut text = |value: u64, right: bool| {
        let digits = value.to_string();
        let text_width = digits.len() as u32 * 4;
        let x0 = if right {
            width.saturating_sub(text_width)
        } else {
            0
        };
        for (k, d) in digits.bytes().enumerate() {
            let glyph = DIGITS[usize::from(d - b'0')];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..3u32 {
                    if bits & (4 >> col) != 0 {
                        put(
                            x0 + k as u32 * 4 + col,
                            bar + 7 + row as u32,
                            [255, 255, 255],
                        );
                    }
                }
            }
        }
    };
    text(u64::from(max > 0), false);
    text(max, true);
    (width, height, rgba)
}

/// One thing that happened at a pixel, in the order the GPU did it: an
/// event of the fragment pass (a tile visit with what it loaded, a
/// primitive covering the pixel, a sample's depth and stencil tests, what
/// the tile stored), or a shader that ran there, traced. In JSON an event
/// has an `"event"` tag (`tile_start`, `primitive`, `depth_test`,
/// `tile_end`); a shader is a [`Traced`] (with its `"stage"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PixelStep {
    /// What the fragment pass did there.
    Event(PixelEvent),
    /// A background, fragment or end-of-tile program's lane there.
    Shader(Traced),
}

/// A render target's pixel in memory, before and after the submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetPixel {
    /// The render command (its index in the submission's command buffer).
    pub command: usize,
    /// The target's index among its end-of-tile stores.
    pub index: usize,
    /// The pixel's address.
    pub address: u64,
    /// RGBA8 as the capture held it.
    pub before: [u8; 4],
    /// RGBA8 after the replay.
    pub after: [u8; 4],
}

/// `agx-debug pixel`'s answer.
#[derive(Debug, Clone, Serialize)]
pub struct PixelHistory {
    /// The submission's index in the capture.
    pub submission: usize,
    /// The pixel.
    pub pixel: (u32, u32),
    /// What happened there, in order.
    pub steps: Vec<PixelStep>,
    /// The pixel in each linear RGBA8 render target the submission
    /// stored (other layouts are not read back).
    pub memory: Vec<TargetPixel>,
    /// The submission's failure on the GPU (the device's line), if any.
    pub failure: Option<String>,
}

/// The probe of `agx-debug pixel`: the pixel's events, and its lanes of
/// every background, fragment and end-of-tile program traced.
#[derive(Debug)]
struct HistoryProbe {
    tracer: Probe,
    steps: Mutex<Vec<PixelStep>>,
}

impl ShaderProbe for HistoryProbe {
    fn lane_to_trace(&self, start: &GroupStart<'_>) -> Option<usize> {
        let Invocation::Pixel { x, y } = self.tracer.want else {
            return None;
        };
        self.tracer.pixel_lane(start, (x, y))
    }

    fn traced(&self, lane: TracedLane) {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(PixelStep::Shader(traced(lane)));
    }

    fn watched_pixel(&self) -> Option<(u32, u32)> {
        match self.tracer.want {
            Invocation::Pixel { x, y } => Some((x, y)),
            _ => None,
        }
    }

    fn pixel_event(&self, event: PixelEvent) {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(PixelStep::Event(event));
    }
}

/// Replays submission `index` of `capture` watching pixel (`x`, `y`):
/// every tile pass over it, the primitives covering it with their depth
/// and stencil tests, the programs that ran there (traced), what the
/// tilebuffer held when the tile was stored, and the pixel in memory
/// before and after.
pub fn pixel_history(
    capture: &Capture,
    index: usize,
    (x, y): (u32, u32),
) -> Result<PixelHistory, ReplayError> {
    let probe = Arc::new(HistoryProbe {
        tracer: Probe {
            want: Invocation::Pixel { x, y },
            stage: TraceStage::Fragment,
            traced_lanes: Mutex::new(Vec::new()),
            tile: Mutex::new(None),
            numbered: Numbering::default(),
        },
        steps: Mutex::new(Vec::new()),
    });
    let replayed = replay_probed(capture, index, probe.clone())?;
    let steps = std::mem::take(&mut *probe.steps.lock().unwrap_or_else(|p| p.into_inner()));
    let memory = replayed
        .targets
        .iter()
        .filter(|t| x < t.width && y < t.height)
        .map(|t| {
            let at = ((y * t.width + x) * 4) as usize;
            let rgba = |rows: &[u8]| -> [u8; 4] {
                rows.get(at..at + 4)
                    .and_then(|p| p.try_into().ok())
                    .unwrap_or_default()
            };
            TargetPixel {
                command: t.command,
                index: t.index,
                address: t
                    .address
                    .wrapping_add(u64::from(y) * u64::from(t.stride_bytes) + u64::from(x) * 4),
                before: rgba(&t.before),
                after: rgba(&t.rgba),
            }
        })
        .collect();
    Ok(PixelHistory {
        submission: index,
        pixel: (x, y),
        steps,
        memory,
        failure: replayed.failure,
    })
}

/// A shader's trace in a pixel history: its header, what it read from
/// the varyings and the tilebuffer, and what it stored.
fn shader_summary(out: &mut String, t: &Traced) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "    {} program {:#x}: lane {}{}, {} instructions (agx-debug trace shows each)",
        t.stage,
        t.program,
        t.lane,
        t.coverage
            .map_or(String::new(), |c| format!(", coverage {c:#x}")),
        t.steps.len()
    );
    for step in &t.steps {
        let mnemonic = step.text.split_whitespace().next().unwrap_or("");
        let after = |v: &Operand| format!("{}={}", v.name, shown(&v.name, v.after));
        match mnemonic {
            "iter" | "iterproj" | "ldcf" | "ld_tile" | "texture_sample" | "texture_load" => {
                let written: Vec<String> = step
                    .operands
                    .iter()
                    .filter(|v| v.destination)
                    .map(after)
                    .collect();
                let _ = writeln!(out, "      {mnemonic}: {}", written.join(" "));
            }
            "st_tile" | "image_write_block" | "image_write" | "zs_emit" | "sample_mask" => {
                let read: Vec<String> = step
                    .operands
                    .iter()
                    .map(|v| format!("{}={}", v.name, shown(&v.name, v.before)))
                    .collect();
                let _ = writeln!(out, "      {mnemonic}: {}", read.join(" "));
            }
            _ => {}
        }
        if let Some(error) = &step.error {
            let _ = writeln!(out, "      fault at {:#x}: {error}", step.pc);
        }
    }
}

/// The history as text.
pub fn history_listing(h: &PixelHistory) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pixel ({}, {}), submission {}: {} events",
        h.pixel.0,
        h.pixel.1,
        h.submission,
        h.steps.len()
    );
    for step in &h.steps {
        match step {
            PixelStep::Event(PixelEvent::TileStart {
                command,
                tile,
                layer,
                segment,
                last,
                depth,
                stencil,
            }) => {
                let _ = writeln!(
                    out,
                    "command {command:#x}, tile ({}, {}) layer {layer}, segment {segment}{}: loaded depth {depth:?} stencil {stencil:?}",
                    tile.0,
                    tile.1,
                    if *last { "" } else { " (a partial render stores it)" }
                );
            }
            PixelStep::Event(PixelEvent::Primitive {
                record,
                state,
                coverage,
                in_scissor,
                deferred,
                shader_writes_depth_or_stencil,
                ..
            }) => {
                let _ =
                    writeln!(
                    out,
                    "  primitive {record:#x} (state {state}): covers samples {coverage:#x}{}{}{}",
                    if *in_scissor { "" } else { ", outside the scissor" },
                    if *deferred {
                        ", opaque: shaded only if still visible"
                    } else {
                        ", shaded in order"
                    },
                    if *shader_writes_depth_or_stencil {
                        ", its shader writes depth or stencil (tested at zs_emit)"
                    } else {
                        ""
                    }
                );
            }
            PixelStep::Event(PixelEvent::DepthTest {
                sample,
                depth,
                stored,
                function,
                passed,
                writes,
                stencil,
                ..
            }) => {
                let mut line = format!("    sample {sample}: ");
                if let Some(st) = stencil {
                    line += &format!(
                        "stencil {} {} {}: {}; ",
                        st.reference,
                        st.function,
                        st.stored,
                        if st.passed { "pass" } else { "fail" }
                    );
                }
                if !depth.is_nan() {
                    line += &format!("depth {depth} {function} {stored}: ");
                }
                line += if *passed { "pass" } else { "fail" };
                if *writes {
                    line += ", writes its depth";
                }
                let _ = writeln!(out, "{line}");
            }
            PixelStep::Shader(t) => shader_summary(&mut out, t),
            PixelStep::Event(PixelEvent::Stored {
                descriptor,
                address,
                before,
                after,
                compressed,
                ..
            }) => {
                let hex = |bytes: &[u8]| {
                    bytes
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let _ = writeln!(
                    out,
                    "      wrote the texel at {address:#x} (image {descriptor:#x}{}): [{}] before, [{}] after",
                    if *compressed { ", compressed" } else { "" },
                    hex(before),
                    hex(after)
                );
            }
            PixelStep::Event(PixelEvent::TileEnd {
                colour,
                depth,
                stencil,
                ..
            }) => {
                let bytes: Vec<String> = colour.iter().map(|b| format!("{b:02x}")).collect();
                let _ = writeln!(
                    out,
                    "  stored: colour record [{}], depth {depth:?}, stencil {stencil:?}",
                    bytes.join(" ")
                );
            }
        }
    }
    for m in &h.memory {
        let _ = writeln!(
            out,
            "memory: command {} target {} at {:#x}: RGBA {:?} before, {:?} after",
            m.command, m.index, m.address, m.before, m.after
        );
    }
    if let Some(failure) = &h.failure {
        let _ = writeln!(out, "the submission failed: {failure}");
    }
    out
}
