//! The debugger's hook into the GPU: which SIMD-groups' lanes to trace or
//! count, and what happens at a watched pixel.
//!
//! On the hardware nothing can be single-stepped; here every SIMD-group of
//! every stage starts in one place (where a stage hands it to the shader
//! core under the watchdog, which carries the probe), and a machine
//! built with a [`ShaderProbe`] asks it, for each group,
//! whether one of its lanes is to be traced. The probe sees the group as
//! its stage set it up (special registers such as the pixel or the
//! thread's position in the grid, and the registers a vertex shader
//! starts with), picks a lane, and gets the lane's
//! [`LaneTrace`] back when the group ends. For the debugger's maps it may
//! instead have every lane's instructions counted ([`LaneCounts`]).
//! A machine without a probe asks nothing.

use crate::usc::trace::{LaneCounts, LaneTrace};
use crate::usc::SimdGroup;

/// Which kind of program a SIMD-group runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A compute kernel, of the launch whose CDM block is at `launch`.
    Compute {
        /// The launch's control-stream address.
        launch: u64,
    },
    /// A vertex shader (`r5` holds each lane's vertex id, `r6` its
    /// instance), of the draw whose VDM block is at `draw`.
    Vertex {
        /// The draw's control-stream address.
        draw: u64,
    },
    /// A pipeline's preshader.
    Preshader,
    /// A fragment shader (each lane's pixel is its
    /// `thread_position_in_grid`).
    Fragment,
    /// A render pass's background (tile load) program; `reload` when the
    /// segment resumes after a partial render (the partial background
    /// program, loading what the partial render stored).
    Background {
        /// A resumed segment's reload.
        reload: bool,
    },
    /// A render pass's end-of-tile (tile store) program.
    EndOfTile,
}

impl Stage {
    /// The stage's name as the debugger prints it.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Compute { .. } => "compute",
            Stage::Vertex { .. } => "vertex",
            Stage::Preshader => "preshader",
            Stage::Fragment => "fragment",
            Stage::Background { .. } => "background",
            Stage::EndOfTile => "end-of-tile",
        }
    }
}

/// A SIMD-group about to run, as the probe sees it.
#[derive(Debug, Clone, Copy)]
pub struct GroupStart<'a> {
    /// The firmware address of the command it belongs to.
    pub command: u64,
    /// What it runs.
    pub stage: Stage,
    /// The group, set up by its stage (`pc` is the program's start).
    pub group: &'a SimdGroup,
}

/// A traced lane, handed back when its group ended.
#[derive(Debug, Clone)]
pub struct TracedLane {
    /// The firmware address of the command it belongs to.
    pub command: u64,
    /// What it ran.
    pub stage: Stage,
    /// The program's start.
    pub program: u64,
    /// The lanes present in its group.
    pub present: u32,
    /// The samples the lane covers (`sr` `coverage_mask`), for the
    /// per-tile programs.
    pub coverage: Option<u32>,
    /// What it executed.
    pub trace: LaneTrace,
}

/// A sample's stencil test at the watched pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StencilTest {
    /// The reference value, masked by the read mask.
    pub reference: u8,
    /// The stored value, masked by the read mask.
    pub stored: u8,
    /// The comparison (`ZsFunc`'s name).
    pub function: &'static str,
    /// Whether it passed.
    pub passed: bool,
}

/// What happened at the debugger's watched pixel
/// ([`ShaderProbe::watched_pixel`]), in the order the GPU did it. The
/// shaders that ran there are traced lanes, handed over apart
/// ([`ShaderProbe::traced`]).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "event", rename_all = "snake_case")
)]
pub enum PixelEvent {
    /// A tile holding the pixel begins; its background program runs
    /// next, over the tilebuffer its depth and stencil were loaded into.
    TileStart {
        /// The command.
        command: u64,
        /// The tile's column and row.
        tile: (u32, u32),
        /// The layer.
        layer: u32,
        /// The pass's segment (0, or the partial renders before it).
        segment: u32,
        /// Whether the segment ends the pass (not a partial render).
        last: bool,
        /// The pixel's depth per sample, as loaded.
        depth: Vec<f32>,
        /// The pixel's stencil per sample, as loaded.
        stencil: Vec<u8>,
    },
    /// A primitive binned into the tile covers the pixel.
    Primitive {
        /// The command.
        command: u64,
        /// The GPU address of its record in the parameter buffer.
        record: u64,
        /// Its PPP state's index.
        state: u32,
        /// The samples it covers there.
        coverage: u32,
        /// Whether the scissor keeps the pixel.
        in_scissor: bool,
        /// Whether its shader waits for hidden-surface removal (an opaque
        /// primitive: shaded only where it stays visible).
        deferred: bool,
        /// Whether its shader writes depth or stencil (those tests then
        /// run at its `zs_emit`, not shown here).
        shader_writes_depth_or_stencil: bool,
    },
    /// A sample's depth test (after its stencil test, if any).
    DepthTest {
        /// The command.
        command: u64,
        /// The sample.
        sample: u32,
        /// The primitive's depth there (after bias and clamping).
        depth: f32,
        /// The tilebuffer's depth.
        stored: f32,
        /// The comparison (`ZsFunc`'s name).
        function: &'static str,
        /// Whether the sample passed (`false` too when its stencil test
        /// failed first).
        passed: bool,
        /// Whether a pass writes its depth (once the shader kept it).
        writes: bool,
        /// The stencil test before it.
        stencil: Option<StencilTest>,
    },
    /// A block store wrote the pixel to an image: its texel's bytes
    /// (every sample) before and after, whatever the image's layout.
    Stored {
        /// The command.
        command: u64,
        /// The image's PBE descriptor address.
        descriptor: u64,
        /// The texel's address.
        address: u64,
        /// Its bytes before the store (in a compressed image, what the
        /// memory held, which a solid or compressed tile's metadata may
        /// have overridden).
        before: Vec<u8>,
        /// Its bytes after.
        after: Vec<u8>,
        /// Whether the image is compressed.
        compressed: bool,
    },
    /// The tile is about to be stored: the pixel's tilebuffer contents
    /// the end-of-tile program reads.
    TileEnd {
        /// The command.
        command: u64,
        /// The colour records of every sample, as the tilebuffer holds
        /// them.
        colour: Vec<u8>,
        /// Depth per sample.
        depth: Vec<f32>,
        /// Stencil per sample.
        stencil: Vec<u8>,
    },
}

/// Chooses lanes to trace and receives their traces. Called from the GPU's
/// worker threads.
pub trait ShaderProbe: Send + Sync + std::fmt::Debug {
    /// The lane of `start`'s group to trace, if any.
    fn lane_to_trace(&self, start: &GroupStart<'_>) -> Option<usize>;

    /// The trace of a lane [`ShaderProbe::lane_to_trace`] chose, when its
    /// group stopped or faulted.
    fn traced(&self, lane: TracedLane);

    /// Whether to count, lane by lane, the instructions `start`'s group
    /// executes (the debugger's maps).
    fn count_lanes(&self, start: &GroupStart<'_>) -> bool {
        let _ = start;
        false
    }

    /// A group [`ShaderProbe::count_lanes`] chose, when it stopped or
    /// faulted: the group as it ended (its special registers as its stage
    /// set them) and its counts.
    fn counted(&self, command: u64, stage: Stage, group: &SimdGroup, counts: &LaneCounts) {
        let _ = (command, stage, group, counts);
    }

    /// The pixel (render-target coordinates) whose tiles, primitives and
    /// tests are reported ([`ShaderProbe::pixel_event`]).
    fn watched_pixel(&self) -> Option<(u32, u32)> {
        None
    }

    /// What happened at the watched pixel.
    fn pixel_event(&self, event: PixelEvent) {
        let _ = event;
    }
}
