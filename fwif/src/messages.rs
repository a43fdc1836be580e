//! The structures the kmd and the firmware exchange.
//!
//! The kmd boots the firmware by writing an [`InitData`] block and
//! handing its address over the mailbox. From then on everything goes
//! through shared memory: the kmd asks the firmware to run a queue's work
//! by pushing a [`RunWorkQueueMsg`] onto one of the twelve submission
//! rings (three stages x four priorities) and ringing the doorbell; sends
//! control requests on the device-control ring ([`DeviceControlMsg`]); and
//! learns of completions, faults, timeouts and grow requests from the
//! event ring ([`EventMsg`]). A queue's work is a per-stage
//! [`WorkQueueInfo`] ring of addresses of command objects, each starting
//! with a [`CommandHeader`]. Completion is reported through *stamps*: 128
//! event slots, each a 32-bit counter the firmware advances by
//! [`STAMP_STEP`] per completed command. Every layout here is fixed and
//! size-checked at compile time; `Documentation/firmware-interface.md`
//! describes them.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ring::RingDesc;
use agx_hw::addr::{FwVa, GpuVa};

/// Pipe (stage) types of the submission rings.
pub const PIPE_TYPES: usize = 3;
/// Priorities per pipe type.
pub const PRIORITIES: usize = 4;
/// Event (stamp) slots.
pub const EVENT_SLOTS: usize = 128;
/// How much a stamp advances per completed command.
pub const STAMP_STEP: u32 = 0x100;
/// Entries of a queue's per-stage work ring.
pub const WORK_QUEUE_ENTRIES: u32 = 0x500;
/// GPU MMU contexts (VM slots); slot 0 is the kernel's.
pub const VM_SLOTS: usize = 64;
/// Attachments a Run command carries at most.
pub const MAX_ATTACHMENTS: usize = 16;

/// A stage of the GPU, as the submission rings and work queues are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PipeType {
    /// Vertex work (VDM): the vertex half of render passes.
    Vertex = 0,
    /// Fragment work: the fragment half of render passes.
    Fragment = 1,
    /// Compute work (CDM).
    Compute = 2,
}

/// Commands in a work queue, by their tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CommandTag {
    /// The vertex half of a render pass.
    RunVertex = 0,
    /// The fragment half of a render pass.
    RunFragment = 1,
    /// A compute dispatch.
    RunCompute = 3,
    /// Wait until an event slot's stamp reaches a value.
    Barrier = 4,
    /// (Re)initialise the parameter buffer's block list.
    InitBuffer = 6,
}

impl CommandTag {
    /// The tag for a raw value.
    pub fn from_raw(raw: u32) -> Option<CommandTag> {
        Some(match raw {
            0 => CommandTag::RunVertex,
            1 => CommandTag::RunFragment,
            3 => CommandTag::RunCompute,
            4 => CommandTag::Barrier,
            6 => CommandTag::InitBuffer,
            _ => return None,
        })
    }
}

/// The firmware's boot block: where everything else is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct InitData {
    /// [`INIT_MAGIC`].
    pub magic: u64,
    /// Interface version ([`INTERFACE_VERSION`]).
    pub version: u32,
    /// Firmware watchdog: a command running longer is stopped and
    /// reported as a timeout (milliseconds).
    pub command_timeout_ms: u32,
    /// Device-control requests, kmd -> firmware ([`DeviceControlMsg`]).
    pub device_control: RingDesc,
    /// Events, firmware -> kmd ([`EventMsg`]).
    pub events: RingDesc,
    /// Firmware log lines, firmware -> kmd ([`LogMsg`]).
    pub log: RingDesc,
    /// Submission rings, kmd -> firmware ([`RunWorkQueueMsg`]), indexed
    /// `pipe_type * PRIORITIES + priority`.
    pub pipes: [RingDesc; PIPE_TYPES * PRIORITIES],
    /// Address of the [`EVENT_SLOTS`] stamps (u32 each).
    pub stamps: FwVa,
    /// Address of the [`FirmwareStatus`] block.
    pub status: FwVa,
    /// Address of the context table: [`VM_SLOTS`] `UatTtb` values (u64
    /// each), the user-half page-table base of each VM slot. The GPU
    /// translates a command's addresses through its slot's entry.
    pub contexts: FwVa,
    /// Statistics, firmware -> kmd ([`StatsMsg`], best effort: dropped
    /// when full).
    pub stats: RingDesc,
    /// The watchdog's budget: the GPU work (in work units, see
    /// `Documentation/gpu.md`) one submission may do before it is
    /// stopped. `command_timeout_ms` of host time stays as a last resort.
    pub work_budget_units: u64,
}

/// Identifies an [`InitData`] block.
pub const INIT_MAGIC: u64 = u64::from_le_bytes(*b"AGXFWIF\0");
/// The interface version these layouts describe.
pub const INTERFACE_VERSION: u32 = 5;

const _: () = assert!(size_of::<InitData>() == 16 + 24 * 3 + 24 * 12 + 24 + 24 + 8);

/// Firmware health, written by the firmware.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct FirmwareStatus {
    /// Non-zero once the firmware has booted.
    pub booted: u32,
    /// Non-zero while the firmware is halted for recovery.
    pub halted: u32,
    /// Set by the kmd to resume after recovery.
    pub resume: u32,
    /// Non-zero after a firmware crash (everything fails ENODEV).
    pub crashed: u32,
    /// Device-control requests the firmware has applied (wrapping); the
    /// answers to its grow requests ([`DeviceControlKind::GrowTvbAck`])
    /// are not requests and are not counted. It is
    /// published between passes over the work queues, so once it covers a
    /// CancelWorkQueue the firmware will never touch that queue again and
    /// the kmd may free its memory.
    pub controls_done: u32,
    /// MBZ.
    pub pad: u32,
}

const _: () = assert!(size_of::<FirmwareStatus>() == 24);

/// Run (more of) a queue's work queue for one stage.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RunWorkQueueMsg {
    /// [`PipeType`] as u32.
    pub pipe_type: u32,
    /// The event slot the queue's commands stamp.
    pub event_slot: u32,
    /// Address of the queue's [`WorkQueueInfo`] for this stage.
    pub work_queue: FwVa,
    /// The queue's write index after the new commands: the firmware runs
    /// the queue up to here (not further, even if `cpu_write_index` has
    /// moved on: later commands come with their own message and VM slot).
    pub write_index: u32,
    /// Non-zero the first time this work queue is run.
    pub is_new: u32,
    /// The queue's VM context slot.
    pub vm_slot: u32,
    /// MBZ.
    pub pad: u32,
}

const _: () = assert!(size_of::<RunWorkQueueMsg>() == 32);

/// One stage of a queue: a ring of command addresses.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct WorkQueueInfo {
    /// Address of the ring of u64 command addresses.
    pub ring: FwVa,
    /// Entries in the ring ([`WORK_QUEUE_ENTRIES`]).
    pub entries: u32,
    /// Next entry the firmware reads (firmware-written).
    pub gpu_read_index: u32,
    /// Next entry the kmd writes (kmd-written).
    pub cpu_write_index: u32,
    /// Entries the firmware has completed (firmware-written).
    pub gpu_done_index: u32,
    /// Address of the parameter buffer's control block (vertex queues).
    pub buffer: FwVa,
}

const _: () = assert!(size_of::<WorkQueueInfo>() == 32);

/// The start of every command object.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CommandHeader {
    /// [`CommandTag`] as u32.
    pub tag: u32,
    /// Bytes of the command, header included.
    pub size: u32,
    /// Event slot to stamp on completion.
    pub stamp_slot: u32,
    /// Value to write to the stamp on completion.
    pub stamp_value: u32,
    /// Address of the start timestamp to write (0: none).
    pub timestamp_start: FwVa,
    /// Address of the end timestamp to write (0: none).
    pub timestamp_end: FwVa,
    /// The submission the command belongs to (its number among the
    /// device's submissions, from 1): the firmware charges the work of
    /// all commands of one submission to one account of
    /// [`InitData::work_budget_units`], and once a submission runs out,
    /// its remaining commands are cancelled.
    pub submission: u64,
    /// How many commands the submission has (on all stages): the firmware
    /// forgets the submission's account after that many. 0: unknown (the
    /// account is forgotten only when many newer submissions exist).
    pub submission_commands: u32,
    /// MBZ.
    pub pad: u32,
}

const _: () = assert!(size_of::<CommandHeader>() == 48);

/// A barrier command's body: wait until a stamp reaches a value.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct BarrierBody {
    /// The event slot to watch.
    pub wait_slot: u32,
    /// The value to wait for (stamps compare with wrap-around).
    pub wait_value: u32,
}

const _: () = assert!(size_of::<BarrierBody>() == 8);

/// An InitBuffer command's body: the parameter buffer changed size; the
/// firmware resets its page allocator from the new block list.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct InitBufferBody {
    /// Address of the buffer's [`TvbInfo`].
    pub buffer: FwVa,
    /// Address of the block list (u32 each: the GPU virtual address of the
    /// block's first page, shifted right by 15).
    pub block_list: FwVa,
    /// Blocks in the buffer.
    pub block_count: u32,
    /// MBZ.
    pub pad: u32,
}

const _: () = assert!(size_of::<InitBufferBody>() == 24);

/// Bytes of a parameter-buffer page.
pub const TVB_PAGE_BYTES: u64 = 32 * 1024;
/// Pages per parameter-buffer block.
pub const TVB_BLOCK_PAGES: u64 = 4;

/// A queue's parameter buffer (tiled vertex buffer) as the firmware sees
/// it: where its blocks are, and the statistics the firmware keeps about
/// the renders that used it. The kmd writes the first four fields; the
/// firmware writes the statistics after every render, `renders` last.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct TvbInfo {
    /// Address of the block list (see [`InitBufferBody::block_list`]).
    pub block_list: FwVa,
    /// Address of the page list: u32 per 32 KiB page (its GPU address
    /// shifted right by 15), four per block, in block order: what the
    /// tiler allocates pages from.
    pub page_list: FwVa,
    /// Blocks in the buffer.
    pub block_count: u32,
    /// The GPU MMU context (VM slot) the blocks are mapped in.
    pub vm_slot: u32,
    /// Renders completed with this buffer (firmware-written).
    pub renders: u32,
    /// Most pages in use at once during the last render.
    pub last_peak_pages: u32,
    /// Pages the last render wanted in total over its partial-render
    /// segments.
    pub last_wanted_pages: u32,
    /// Times the buffer ran dry, over all renders.
    pub overflows: u32,
    /// Partial renders done, over all renders.
    pub partial_renders: u32,
    /// The buffer's id: what a GrowTVB event names it by.
    pub buffer_id: u32,
    /// Tiles the partial renders visited, over all renders
    /// (firmware-written): a partial render of a resumed segment visits
    /// only the tiles it binned geometry into.
    pub partial_render_tiles: u64,
}

const _: () = assert!(size_of::<TvbInfo>() == 56);

/// Derives shared by the command bodies: plain little-endian data in
/// shared memory, every byte a named field.
macro_rules! body {
    ($(#[$doc:meta])* pub struct $name:ident { $($body:tt)* } size = $size:expr;) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable,
            KnownLayout,
        )]
        #[repr(C)]
        pub struct $name { $($body)* }

        const _: () = assert!(size_of::<$name>() == $size);
    };
}

body! {
    /// A tilebuffer program (background or end-of-tile, for a whole pass or
    /// around a partial render).
    pub struct TileProgram {
        /// Offset of the program's USC control words from `usc_exec_base`,
        /// with a tag in bits 0-2; 0 = none.
        pub usc: u32,
        /// Its resource counts (an `agx_hw::formats::Counts` word).
        pub rsrc_spec: u32,
    }
    size = 8;
}

body! {
    /// A helper program the firmware launches before a stage (it sets up
    /// per-thread scratch).
    pub struct Helper {
        /// Offset of its USC code from `usc_exec_base`, tag in bits 0-1;
        /// 0 = none.
        pub program: u32,
        /// Its configuration word.
        pub cfg: u32,
        /// Its argument (the scratch description's address).
        pub arg: u64,
    }
    size = 16;
}

body! {
    /// One depth or stencil surface as the ZLS unit loads or stores it.
    pub struct ZlsSurface {
        /// The surface.
        pub base: GpuVa,
        /// Its compression metadata; null if uncompressed.
        pub comp_base: GpuVa,
        /// Distance between layers (an `agx_hw::formats::ZlsLayerStride`
        /// word, passed through from the UAPI as the kernel does).
        pub stride: u32,
        /// Distance between layers of the metadata (an
        /// `agx_hw::formats::ZlsMetaStride` word).
        pub comp_stride: u32,
    }
    size = 24;
}

body! {
    /// Depth and stencil load/store state of a pass.
    pub struct Zls {
        /// Which planes load and store, and how (an
        /// `agx_hw::formats::ZlsControl` word).
        pub ctrl: u64,
        /// Depth, loaded at the start of a tile.
        pub z_load: ZlsSurface,
        /// Depth, stored at the end of a tile.
        pub z_store: ZlsSurface,
        /// Stencil, loaded.
        pub s_load: ZlsSurface,
        /// Stencil, stored.
        pub s_store: ZlsSurface,
        /// The depth a tile starts with when depth is not loaded (bits of
        /// the depth format: an f32 for F32).
        pub clear_depth: u32,
        /// The stencil a tile starts with when stencil is not loaded
        /// (bits 0-7).
        pub clear_stencil: u32,
    }
    size = 112;
}

body! {
    /// A range a stage writes (a cache-maintenance hint).
    pub struct FwAttachment {
        /// Its start.
        pub address: GpuVa,
        /// Its size in 128-byte cache lines, rounded up.
        pub size_lines: u32,
        /// MBZ.
        pub flags: u32,
    }
    size = 16;
}

body! {
    /// The ranges a stage writes.
    pub struct Attachments {
        /// The ranges; `count` of them are used.
        pub list: [FwAttachment; MAX_ATTACHMENTS],
        /// Ranges used.
        pub count: u32,
        /// MBZ.
        pub pad: u32,
    }
    size = 8 + 16 * MAX_ATTACHMENTS;
}

body! {
    /// What the per-tile work of a render pass needs. Both halves carry
    /// it: the vertex half runs partial renders when the parameter buffer
    /// fills, which is per-tile work of the same pass.
    pub struct RenderPass {
        /// Width of the pass.
        pub width_px: u32,
        /// Height of the pass.
        pub height_px: u32,
        /// Layers.
        pub layers: u32,
        /// Samples per pixel (1, 2 or 4).
        pub samples: u32,
        /// Tilebuffer bytes per sample.
        pub sample_size_bytes: u32,
        /// Width of a tile.
        pub utile_width_px: u32,
        /// Height of a tile.
        pub utile_height_px: u32,
        /// `PASS_*` flags.
        pub flags: u32,
        /// The ISP's ZLS pixel configuration word.
        pub isp_zls_pixels: u32,
        /// Samplers in `sampler_heap`.
        pub sampler_count: u32,
        /// Sample positions (an `agx_hw::formats::SampleLocations` word; 0
        /// = the standard pattern).
        pub ppp_multisamplectl: u64,
        /// The sampler heap tile programs and shaders index; null if none.
        pub sampler_heap: GpuVa,
        /// Merge limit in x (f32 bits).
        pub isp_merge_upper_x: u32,
        /// Merge limit in y (f32 bits).
        pub isp_merge_upper_y: u32,
        /// Scissor rectangles.
        pub isp_scissor_base: GpuVa,
        /// Depth-bias values.
        pub isp_dbias_base: GpuVa,
        /// Occlusion-query results.
        pub isp_oclqry_base: GpuVa,
        /// Background program of every tile.
        pub bg: TileProgram,
        /// End-of-tile program of every tile.
        pub eot: TileProgram,
        /// Background program of a tile resumed after a partial render.
        pub partial_bg: TileProgram,
        /// End-of-tile program of a partial render.
        pub partial_eot: TileProgram,
        /// Depth and stencil.
        pub zls: Zls,
    }
    size = 232;
}

/// [`RenderPass::flags`]: run the tile programs on tiles no primitive
/// touches.
pub const PASS_PROCESS_EMPTY_TILES: u32 = 1 << 0;
/// [`RenderPass::flags`]: depth-bias values are integers.
pub const PASS_DBIAS_IS_INT: u32 = 1 << 1;

impl RenderPass {
    /// Whether empty tiles run the tile programs.
    pub fn process_empty_tiles(&self) -> bool {
        self.flags & PASS_PROCESS_EMPTY_TILES != 0
    }
}

body! {
    /// The body of RunVertex: the vertex half of a render pass (vertex
    /// shading and tiling into the parameter buffer).
    pub struct RunVertexBody {
        /// Base of the 4 GiB region the pass's USC addresses are offsets
        /// into.
        pub usc_exec_base: GpuVa,
        /// The queue's [`TvbInfo`].
        pub buffer: FwVa,
        /// The VDM control stream.
        pub vdm_ctrl_stream_base: GpuVa,
        /// The PPP control word.
        pub ppp_ctrl: u32,
        /// `VERTEX_*` flags.
        pub flags: u32,
        /// Helper program of the vertex stage.
        pub helper: Helper,
        /// Helper program of the fragment stage, for the fragment programs
        /// of partial renders.
        pub fragment_helper: Helper,
        /// The pass (for partial renders).
        pub pass: RenderPass,
        /// What the vertex stage writes.
        pub attachments: Attachments,
    }
    size = 64 + 232 + 264;
}

/// [`RunVertexBody::flags`]: the vertex stage uses scratch memory.
pub const VERTEX_USES_SCRATCH: u32 = 1 << 0;
/// [`RunVertexBody::flags`]: do not cluster vertices.
pub const VERTEX_NO_CLUSTERING: u32 = 1 << 1;

body! {
    /// The body of RunFragment: the per-tile half of a render pass.
    pub struct RunFragmentBody {
        /// Base of the 4 GiB region the pass's USC addresses are offsets
        /// into.
        pub usc_exec_base: GpuVa,
        /// The queue's [`TvbInfo`].
        pub buffer: FwVa,
        /// Helper program of the fragment stage.
        pub helper: Helper,
        /// The pass.
        pub pass: RenderPass,
        /// What the pass writes.
        pub attachments: Attachments,
    }
    size = 32 + 232 + 264;
}

body! {
    /// The body of RunCompute: one compute control stream.
    pub struct RunComputeBody {
        /// Base of the 4 GiB region the dispatch's USC addresses are
        /// offsets into.
        pub usc_exec_base: GpuVa,
        /// The CDM control stream.
        pub cdm_ctrl_stream_base: GpuVa,
        /// The end of its first segment.
        pub cdm_ctrl_stream_end: GpuVa,
        /// The sampler heap; null if none.
        pub sampler_heap: GpuVa,
        /// Samplers in it.
        pub sampler_count: u32,
        /// MBZ.
        pub flags: u32,
        /// Helper program.
        pub helper: Helper,
        /// What the dispatch writes.
        pub attachments: Attachments,
    }
    size = 56 + 264;
}

/// The largest command object: a header and a vertex body.
pub const MAX_COMMAND_BYTES: usize = size_of::<CommandHeader>() + size_of::<RunVertexBody>();

const _: () = assert!(size_of::<RunFragmentBody>() <= size_of::<RunVertexBody>());
const _: () = assert!(size_of::<RunComputeBody>() <= size_of::<RunVertexBody>());
// The raw hardware words the bodies carry have the formats' sizes.
const _: () = assert!(size_of::<u64>() == agx_hw::formats::ZlsControl::SIZE_BYTES);
const _: () = assert!(size_of::<u32>() == agx_hw::formats::Counts::SIZE_BYTES);
const _: () = assert!(size_of::<u64>() == agx_hw::formats::SampleLocations::SIZE_BYTES);

/// Units a GPU fault is attributed to ([`EventMsg::unit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FaultUnit {
    /// The firmware itself (a command it could not run).
    Firmware = 0,
    /// The vertex data master: the render control stream.
    Vdm = 1,
    /// The compute data master: the compute control stream.
    Cdm = 2,
    /// The shader cores.
    Usc = 3,
    /// The tiler, writing the parameter buffer.
    Tiler = 4,
    /// The pixel back end (tile stores).
    Pbe = 5,
    /// Depth/stencil load and store.
    Zls = 6,
}

impl FaultUnit {
    /// The unit a fault event's code names.
    pub fn from_raw(code: u32) -> Option<FaultUnit> {
        Some(match code {
            0 => FaultUnit::Firmware,
            1 => FaultUnit::Vdm,
            2 => FaultUnit::Cdm,
            3 => FaultUnit::Usc,
            4 => FaultUnit::Tiler,
            5 => FaultUnit::Pbe,
            6 => FaultUnit::Zls,
            _ => return None,
        })
    }
}

impl EventMsg {
    /// A fault event in words, as a kernel log line names it: the
    /// address, the unit, the access and the fault type.
    pub fn describe_fault(&self) -> String {
        let unit = FaultUnit::from_raw(self.unit)
            .map_or_else(|| format!("unit {}", self.unit), |u| format!("{u:?}"));
        let access = match self.access {
            0 => "read",
            1 => "write",
            2 => "fetch",
            _ => "access",
        };
        let reason = if self.reason == FAULT_UNSUPPORTED_WORK {
            "work the GPU cannot run".to_string()
        } else {
            format!(
                "{:?}",
                agx_hw::formats::UatFaultReason::from_raw(self.reason)
            )
        };
        format!("{access} at {:#x} by the {unit}: {reason}", self.address)
    }
}

/// Kinds of device-control requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DeviceControlKind {
    /// Forget a VM context slot (its VM was destroyed).
    DestroyContext = 1,
    /// The answer to a GrowTVB event: `args[0]` buffer slot, `args[1]`
    /// the new block count (0: refused, partially render).
    GrowTvbAck = 2,
    /// Forget a work queue (`args[0]`: its [`WorkQueueInfo`] address): the
    /// firmware stops running it and never reads it again once
    /// [`FirmwareStatus::controls_done`] covers this request.
    CancelWorkQueue = 3,
}

/// A device-control request.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DeviceControlMsg {
    /// [`DeviceControlKind`] as u32.
    pub kind: u32,
    /// MBZ.
    pub pad: u32,
    /// Kind-specific arguments.
    pub args: [u64; 7],
}

const _: () = assert!(size_of::<DeviceControlMsg>() == 64);

/// Kinds of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventKind {
    /// Stamps advanced: `slot` is the event slot, `value` its new stamp.
    Completion = 0,
    /// A GPU fault: `slot`/`value` the culprit's stamp, `address` the GPU
    /// address, `unit` the unit code, `vm_slot`, `access` (0 read, 1
    /// write, 2 fetch), `reason` ([`agx_hw::formats::UatFaultReason`] or
    /// [`FAULT_UNSUPPORTED_WORK`]).
    Fault = 1,
    /// A command was stopped by the watchdog: `slot`/`value`, `address`
    /// the work units its submission had used, `unit` 1 if host time (the
    /// last resort) ran out rather than the work budget.
    Timeout = 2,
    /// The parameter buffer ran dry: `unit` is the buffer's [`TvbInfo::buffer_id`], `address`
    /// the blocks wanted.
    GrowTvb = 3,
    /// The firmware hit an internal error and stopped.
    Crash = 4,
    /// A command was not run because an earlier command of its
    /// submission timed out: `slot`/`value`.
    Cancelled = 5,
}

/// A fault reason meaning "the execution engine cannot run this command".
pub const FAULT_UNSUPPORTED_WORK: u32 = 0x100;

/// An event, firmware -> kmd.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct EventMsg {
    /// [`EventKind`] as u32.
    pub kind: u32,
    /// Event slot.
    pub slot: u32,
    /// Stamp value.
    pub value: u32,
    /// Unit code (faults) or buffer slot (GrowTVB).
    pub unit: u32,
    /// GPU address (faults) or blocks wanted (GrowTVB).
    pub address: u64,
    /// VM context slot.
    pub vm_slot: u32,
    /// Access kind.
    pub access: u32,
    /// Reason code.
    pub reason: u32,
    /// MBZ.
    pub pad: [u32; 7],
}

const _: () = assert!(size_of::<EventMsg>() == 64);

/// What the GPU spent on one Run command (the statistics ring).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct StatsMsg {
    /// [`PipeType`] as u32.
    pub pipe_type: u32,
    /// The command's VM slot.
    pub vm_slot: u32,
    /// The command's event slot.
    pub slot: u32,
    /// Its stamp value.
    pub value: u32,
    /// When it started (GPU time, ns).
    pub start_ns: u64,
    /// When it ended (GPU time, ns).
    pub end_ns: u64,
}

const _: () = assert!(size_of::<StatsMsg>() == 32);

/// A firmware log line (NUL-padded UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct LogMsg {
    /// Severity: 0 error, 1 warning, 2 info, 3 debug.
    pub level: u32,
    /// Bytes of `text` used.
    pub len: u32,
    /// The text.
    pub text: [u8; 120],
}

const _: () = assert!(size_of::<LogMsg>() == 128);

impl LogMsg {
    /// A log line, truncated to 120 bytes at a character boundary.
    pub fn new(level: u32, text: &str) -> LogMsg {
        let mut end = text.len().min(120);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut msg = LogMsg {
            level,
            len: end as u32,
            text: [0; 120],
        };
        msg.text[..end].copy_from_slice(&text.as_bytes()[..end]);
        msg
    }

    /// The text.
    pub fn text(&self) -> &str {
        let len = (self.len as usize).min(120);
        std::str::from_utf8(&self.text[..len]).unwrap_or("<invalid utf-8>")
    }
}

/// Whether stamp `value` has reached `target`, with wrap-around (as the
/// firmware compares them).
pub fn stamp_reached(value: u32, target: u32) -> bool {
    value.wrapping_sub(target) as i32 >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_compare_across_wrap_around() {
        assert!(stamp_reached(0x200, 0x100));
        assert!(stamp_reached(0x100, 0x100));
        assert!(!stamp_reached(0x100, 0x200));
        assert!(
            stamp_reached(0x0000_0100, 0xFFFF_FF00),
            "wrapped past the target"
        );
        assert!(!stamp_reached(0xFFFF_FF00, 0x0000_0100));
    }

    #[test]
    fn log_lines_truncate_on_character_boundaries() {
        let msg = LogMsg::new(2, &"é".repeat(100));
        assert_eq!(msg.len, 120);
        assert_eq!(msg.text().chars().count(), 60);
        assert_eq!(LogMsg::new(0, "boot").text(), "boot");
        assert_eq!(CommandTag::from_raw(4), Some(CommandTag::Barrier));
        assert_eq!(CommandTag::from_raw(2), None);
    }
}
