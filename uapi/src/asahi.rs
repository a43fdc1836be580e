//! The asahi driver's private ioctls (`include/uapi/drm/asahi_drm.h`).
//!
//! The GPU is driven through eleven ioctls: parameter queries, GPU virtual
//! address spaces (VMs) and the buffer objects (GEM objects) bound into them,
//! queues, and `SUBMIT`, which hands the kernel a flat command buffer of
//! render and compute commands. Rendering commands are mostly raw values of
//! hardware control registers (see `agx-hw` for their formats); the kernel
//! validates them only as far as safety requires and forwards them to the
//! firmware.
//!
//! Struct names drop the C `drm_asahi_` prefix and are CamelCase; field names
//! are the C ones. Every `pad` field, and every field documented as MBZ,
//! must be zero: the kernel rejects anything else with `EINVAL`.

use bitflags::bitflags;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::ioctl::{drm_iow, drm_iowr, DRM_COMMAND_BASE};
use crate::{assert_layout, uapi_enum};

/// Maximum number of GPU clusters; the length of
/// [`ParamsGlobal::core_masks`].
pub const DRM_ASAHI_MAX_CLUSTERS: usize = 64;

/// Barrier value meaning "do not wait" in [`CmdHeader::vdm_barrier`] and
/// [`CmdHeader::cdm_barrier`].
pub const DRM_ASAHI_BARRIER_NONE: u16 = 0xFFFF;

/// Driver-private ioctl numbers, relative to `DRM_COMMAND_BASE`.
pub mod nr {
    /// `DRM_ASAHI_GET_PARAMS`.
    pub const GET_PARAMS: u32 = 0x00;
    /// `DRM_ASAHI_GET_TIME`.
    pub const GET_TIME: u32 = 0x01;
    /// `DRM_ASAHI_VM_CREATE`.
    pub const VM_CREATE: u32 = 0x02;
    /// `DRM_ASAHI_VM_DESTROY`.
    pub const VM_DESTROY: u32 = 0x03;
    /// `DRM_ASAHI_VM_BIND`.
    pub const VM_BIND: u32 = 0x04;
    /// `DRM_ASAHI_GEM_CREATE`.
    pub const GEM_CREATE: u32 = 0x05;
    /// `DRM_ASAHI_GEM_MMAP_OFFSET`.
    pub const GEM_MMAP_OFFSET: u32 = 0x06;
    /// `DRM_ASAHI_GEM_BIND_OBJECT`.
    pub const GEM_BIND_OBJECT: u32 = 0x07;
    /// `DRM_ASAHI_QUEUE_CREATE`.
    pub const QUEUE_CREATE: u32 = 0x08;
    /// `DRM_ASAHI_QUEUE_DESTROY`.
    pub const QUEUE_DESTROY: u32 = 0x09;
    /// `DRM_ASAHI_SUBMIT`.
    pub const SUBMIT: u32 = 0x0a;
}

/// Query device parameters (writes a [`ParamsGlobal`] through
/// [`GetParams::pointer`]).
pub const DRM_IOCTL_ASAHI_GET_PARAMS: u32 = drm_iow::<GetParams>(DRM_COMMAND_BASE + nr::GET_PARAMS);
/// Read the GPU timestamp clock.
pub const DRM_IOCTL_ASAHI_GET_TIME: u32 = drm_iowr::<GetTime>(DRM_COMMAND_BASE + nr::GET_TIME);
/// Create a GPU virtual address space.
pub const DRM_IOCTL_ASAHI_VM_CREATE: u32 = drm_iowr::<VmCreate>(DRM_COMMAND_BASE + nr::VM_CREATE);
/// Destroy a GPU virtual address space.
pub const DRM_IOCTL_ASAHI_VM_DESTROY: u32 = drm_iow::<VmDestroy>(DRM_COMMAND_BASE + nr::VM_DESTROY);
/// Map or unmap GEM objects in a VM.
pub const DRM_IOCTL_ASAHI_VM_BIND: u32 = drm_iow::<VmBind>(DRM_COMMAND_BASE + nr::VM_BIND);
/// Create a GEM object.
pub const DRM_IOCTL_ASAHI_GEM_CREATE: u32 =
    drm_iowr::<GemCreate>(DRM_COMMAND_BASE + nr::GEM_CREATE);
/// Get the fake offset to `mmap` a GEM object through the DRM file.
pub const DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET: u32 =
    drm_iowr::<GemMmapOffset>(DRM_COMMAND_BASE + nr::GEM_MMAP_OFFSET);
/// Bind a GEM object for a special use (timestamp buffers).
pub const DRM_IOCTL_ASAHI_GEM_BIND_OBJECT: u32 =
    drm_iowr::<GemBindObject>(DRM_COMMAND_BASE + nr::GEM_BIND_OBJECT);
/// Create a command queue.
pub const DRM_IOCTL_ASAHI_QUEUE_CREATE: u32 =
    drm_iowr::<QueueCreate>(DRM_COMMAND_BASE + nr::QUEUE_CREATE);
/// Destroy a command queue.
pub const DRM_IOCTL_ASAHI_QUEUE_DESTROY: u32 =
    drm_iow::<QueueDestroy>(DRM_COMMAND_BASE + nr::QUEUE_DESTROY);
/// Submit a command buffer to a queue.
pub const DRM_IOCTL_ASAHI_SUBMIT: u32 = drm_iow::<Submit>(DRM_COMMAND_BASE + nr::SUBMIT);

/// Every asahi ioctl: (name, request number, command number).
pub const IOCTLS: &[(&str, u32, u32)] = &[
    (
        "DRM_IOCTL_ASAHI_GET_PARAMS",
        DRM_IOCTL_ASAHI_GET_PARAMS,
        nr::GET_PARAMS,
    ),
    (
        "DRM_IOCTL_ASAHI_GET_TIME",
        DRM_IOCTL_ASAHI_GET_TIME,
        nr::GET_TIME,
    ),
    (
        "DRM_IOCTL_ASAHI_VM_CREATE",
        DRM_IOCTL_ASAHI_VM_CREATE,
        nr::VM_CREATE,
    ),
    (
        "DRM_IOCTL_ASAHI_VM_DESTROY",
        DRM_IOCTL_ASAHI_VM_DESTROY,
        nr::VM_DESTROY,
    ),
    (
        "DRM_IOCTL_ASAHI_VM_BIND",
        DRM_IOCTL_ASAHI_VM_BIND,
        nr::VM_BIND,
    ),
    (
        "DRM_IOCTL_ASAHI_GEM_CREATE",
        DRM_IOCTL_ASAHI_GEM_CREATE,
        nr::GEM_CREATE,
    ),
    (
        "DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET",
        DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
        nr::GEM_MMAP_OFFSET,
    ),
    (
        "DRM_IOCTL_ASAHI_GEM_BIND_OBJECT",
        DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
        nr::GEM_BIND_OBJECT,
    ),
    (
        "DRM_IOCTL_ASAHI_QUEUE_CREATE",
        DRM_IOCTL_ASAHI_QUEUE_CREATE,
        nr::QUEUE_CREATE,
    ),
    (
        "DRM_IOCTL_ASAHI_QUEUE_DESTROY",
        DRM_IOCTL_ASAHI_QUEUE_DESTROY,
        nr::QUEUE_DESTROY,
    ),
    ("DRM_IOCTL_ASAHI_SUBMIT", DRM_IOCTL_ASAHI_SUBMIT, nr::SUBMIT),
];

bitflags! {
    /// `drm_asahi_feature`: optional features reported in
    /// [`ParamsGlobal::features`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Feature: u64 {
        /// Shader loads from unmapped memory read zero and stores to it are
        /// dropped instead of faulting (the texture unit still faults). A
        /// global, boot-time setting of the kernel.
        const SOFT_FAULTS = 1 << 0;
    }
}

bitflags! {
    /// `drm_asahi_gem_flags`: flags of [`GemCreate::flags`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct GemFlags: u32 {
        /// Map the object write-back cached on the CPU instead of
        /// write-combined.
        const WRITEBACK = 1 << 0;
        /// The object is private to [`GemCreate::vm_id`]: it can only be
        /// bound there and cannot be exported.
        const VM_PRIVATE = 1 << 1;
    }
}

bitflags! {
    /// `drm_asahi_bind_flags`: flags of [`GemBindOp::flags`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct BindFlags: u32 {
        /// Unmap the range instead of mapping it. Must be the only flag.
        const UNBIND = 1 << 0;
        /// The GPU may read the mapping.
        const READ = 1 << 1;
        /// The GPU may write the mapping.
        const WRITE = 1 << 2;
        /// Map the single page at [`GemBindOp::offset`] repeatedly across the
        /// whole range (for sparse scratch or zero pages).
        const SINGLE_PAGE = 1 << 3;
    }
}

bitflags! {
    /// `drm_asahi_bind_object_flags`: flags of [`GemBindObject::flags`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct BindObjectFlags: u32 {
        /// The object receives command timestamps written by the firmware.
        const USAGE_TIMESTAMPS = 1 << 0;
    }
}

bitflags! {
    /// `drm_asahi_render_flags`: flags of [`CmdRender::flags`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct RenderFlags: u32 {
        /// The vertex stage uses scratch memory (spilling).
        const VERTEX_SCRATCH = 1 << 0;
        /// Run the background and end-of-tile programs for tiles that no
        /// primitive touches. Required when the pass clears an attachment.
        const PROCESS_EMPTY_TILES = 1 << 1;
        /// Run the vertex stage on a single cluster (debugging aid).
        const NO_VERTEX_CLUSTERING = 1 << 2;
        /// Use the integer depth-bias formula. Equal to the hardware ISP
        /// control bit, which the kernel ORs in directly.
        const DBIAS_IS_INT = 1 << 18;
    }
}

uapi_enum! {
    /// `drm_asahi_bind_object_op`: [`GemBindObject::op`].
    pub enum BindObjectOp {
        /// Bind the object and return an `object_handle`.
        Bind = 0,
        /// Unbind `object_handle`.
        Unbind = 1,
    }
}

uapi_enum! {
    /// `drm_asahi_cmd_type`: [`CmdHeader::cmd_type`].
    pub enum CmdType {
        /// A render pass: payload is a [`CmdRender`].
        Render = 0,
        /// A compute dispatch: payload is a [`CmdCompute`].
        Compute = 1,
        /// Attachments for the following vertex work: payload is an array of
        /// [`Attachment`].
        SetVertexAttachments = 2,
        /// Attachments for the following fragment work.
        SetFragmentAttachments = 3,
        /// Attachments for the following compute work.
        SetComputeAttachments = 4,
    }
}

uapi_enum! {
    /// `drm_asahi_priority`: [`QueueCreate::priority`].
    pub enum Priority {
        /// Low priority.
        Low = 0,
        /// Medium priority.
        Medium = 1,
        /// High priority; reserved (the kernel rejects it with `EINVAL`).
        High = 2,
        /// Realtime priority; reserved (the kernel rejects it with `EINVAL`).
        Realtime = 3,
    }
}

uapi_enum! {
    /// `drm_asahi_sync_type`: [`Sync::sync_type`].
    pub enum SyncType {
        /// A binary syncobj; `timeline_value` must be zero.
        Syncobj = 0,
        /// A point on a timeline syncobj.
        TimelineSyncobj = 1,
    }
}

/// The parameter group of [`GetParams::param_group`]; only group 0 exists.
pub const DRM_ASAHI_PARAM_GROUP_GLOBAL: u32 = 0;

/// `drm_asahi_params_global`: device parameters returned by `GET_PARAMS`.
///
/// Written by the kernel. Older userspace may ask for fewer bytes than this
/// struct has; the kernel writes `min(size, sizeof)` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ParamsGlobal {
    /// Supported [`Feature`] bits.
    pub features: u64,
    /// GPU generation: 13 for G13 (M1), 14 for G14 (M2).
    pub gpu_generation: u32,
    /// GPU variant as an ASCII letter: `'G'` base, `'S'` Pro, `'C'` Max,
    /// `'D'` Ultra.
    pub gpu_variant: u32,
    /// GPU revision in BCD: `0x00` = A0, `0x21` = C1.
    pub gpu_revision: u32,
    /// SoC chip ID in BCD, e.g. `0x8103` for T8103 (M1).
    pub chip_id: u32,
    /// Number of dies.
    pub num_dies: u32,
    /// Number of GPU clusters across all dies.
    pub num_clusters_total: u32,
    /// Number of GPU cores per cluster.
    pub num_cores_per_cluster: u32,
    /// Maximum GPU core clock in kHz.
    pub max_frequency_khz: u32,
    /// Bitmask of present cores, one entry per cluster.
    pub core_masks: [u64; DRM_ASAHI_MAX_CLUSTERS],
    /// Lowest GPU virtual address userspace may use (one 16 KiB page).
    pub vm_start: u64,
    /// One past the highest GPU virtual address userspace may use.
    pub vm_end: u64,
    /// Minimum size in bytes of the kernel range passed to `VM_CREATE`.
    pub vm_kernel_min_size: u64,
    /// Maximum number of render and compute commands in one `SUBMIT`.
    pub max_commands_per_submission: u32,
    /// Maximum number of attachments in one `SET_*_ATTACHMENTS` command.
    pub max_attachments: u32,
    /// Frequency in Hz of the timestamps the firmware writes for commands.
    pub command_timestamp_frequency_hz: u64,
}

impl Default for ParamsGlobal {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `drm_asahi_get_params`: argument of `GET_PARAMS`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GetParams {
    /// Parameter group; must be [`DRM_ASAHI_PARAM_GROUP_GLOBAL`].
    pub param_group: u32,
    /// MBZ.
    pub pad: u32,
    /// User pointer to a buffer that receives the parameters.
    pub pointer: u64,
    /// Size in bytes of the buffer at `pointer`.
    pub size: u64,
}

/// `drm_asahi_vm_create`: argument of `VM_CREATE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct VmCreate {
    /// Start of the range reserved for the kernel (page aligned, inside
    /// `[vm_start, vm_end)`). Userspace must never bind there.
    pub kernel_start: u64,
    /// End of the kernel range; `kernel_end - kernel_start` must be at least
    /// [`ParamsGlobal::vm_kernel_min_size`].
    pub kernel_end: u64,
    /// Returned: the new VM's ID (IDs start at 1).
    pub vm_id: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_vm_destroy`: argument of `VM_DESTROY`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct VmDestroy {
    /// The VM to destroy.
    pub vm_id: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_gem_create`: argument of `GEM_CREATE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemCreate {
    /// Size of the object in bytes (rounded up to the page size).
    pub size: u64,
    /// [`GemFlags`].
    pub flags: u32,
    /// The VM an object with [`GemFlags::VM_PRIVATE`] is private to; MBZ
    /// otherwise.
    pub vm_id: u32,
    /// Returned: the GEM handle.
    pub handle: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_gem_mmap_offset`: argument of `GEM_MMAP_OFFSET`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemMmapOffset {
    /// The GEM handle.
    pub handle: u32,
    /// MBZ.
    pub flags: u32,
    /// Returned: the offset to pass to `mmap` on the DRM file.
    pub offset: u64,
}

/// `drm_asahi_gem_bind_op`: one element of the [`VmBind::userptr`] array.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemBindOp {
    /// [`BindFlags`]: `UNBIND` alone, or a non-empty subset of
    /// `READ | WRITE | SINGLE_PAGE`.
    pub flags: u32,
    /// GEM handle to map; MBZ for unbind.
    pub handle: u32,
    /// Offset in bytes into the object (16 KiB aligned); MBZ for unbind.
    pub offset: u64,
    /// Length in bytes of the range (16 KiB aligned, non-zero).
    pub range: u64,
    /// GPU virtual address of the range (16 KiB aligned, outside the kernel
    /// range).
    pub addr: u64,
}

/// `drm_asahi_vm_bind`: argument of `VM_BIND`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct VmBind {
    /// The VM to modify.
    pub vm_id: u32,
    /// Number of [`GemBindOp`] elements at `userptr`.
    pub num_binds: u32,
    /// Distance in bytes between elements (non-zero); the kernel reads
    /// `min(stride, sizeof(GemBindOp))` bytes of each and treats missing
    /// trailing fields as zero.
    pub stride: u32,
    /// MBZ.
    pub pad: u32,
    /// User pointer to the array of bind operations.
    pub userptr: u64,
}

/// `drm_asahi_gem_bind_object`: argument of `GEM_BIND_OBJECT`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GemBindObject {
    /// [`BindObjectOp`].
    pub op: u32,
    /// [`BindObjectFlags`]; exactly `USAGE_TIMESTAMPS` for bind, MBZ for
    /// unbind.
    pub flags: u32,
    /// GEM handle for bind; MBZ for unbind.
    pub handle: u32,
    /// MBZ (objects are bound into the firmware's address space).
    pub vm_id: u32,
    /// Page-aligned offset in bytes into the object; MBZ for unbind.
    pub offset: u64,
    /// Page-aligned length in bytes; MBZ for unbind.
    pub range: u64,
    /// Returned for bind, passed for unbind: the bound object's handle, used
    /// in [`Timestamp::handle`].
    pub object_handle: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_queue_create`: argument of `QUEUE_CREATE`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueueCreate {
    /// MBZ.
    pub flags: u32,
    /// The VM the queue's commands run in.
    pub vm_id: u32,
    /// [`Priority`]; only `Low` and `Medium` are accepted today.
    pub priority: u32,
    /// Returned: the queue ID (IDs start at 1).
    pub queue_id: u32,
    /// GPU virtual address of the 4 GiB region that USC (shader) addresses
    /// in commands are 32-bit offsets into.
    pub usc_exec_base: u64,
}

/// `drm_asahi_queue_destroy`: argument of `QUEUE_DESTROY`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueueDestroy {
    /// The queue to destroy.
    pub queue_id: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_sync`: one element of the [`Submit::syncs`] array.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Sync {
    /// [`SyncType`].
    pub sync_type: u32,
    /// Syncobj handle.
    pub handle: u32,
    /// Timeline point for timeline syncobjs; MBZ for binary ones.
    pub timeline_value: u64,
}

/// `drm_asahi_cmd_header`: precedes each command in the submit command
/// buffer.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CmdHeader {
    /// [`CmdType`].
    pub cmd_type: u16,
    /// Size in bytes of the payload that follows (not counting the header).
    /// A payload shorter than its struct is zero-extended.
    pub size: u16,
    /// Render (VDM) barrier: 0 waits for all earlier render work on the
    /// queue, N waits for the N-th render command of this submit,
    /// [`DRM_ASAHI_BARRIER_NONE`] waits for nothing.
    pub vdm_barrier: u16,
    /// Compute (CDM) barrier, with the same encoding as `vdm_barrier`.
    pub cdm_barrier: u16,
}

/// `drm_asahi_submit`: argument of `SUBMIT`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Submit {
    /// User pointer to `in_sync_count + out_sync_count` [`Sync`] elements:
    /// the waits first, then the signals.
    pub syncs: u64,
    /// User pointer to the command buffer: [`CmdHeader`]s each followed by
    /// its payload.
    pub cmdbuf: u64,
    /// MBZ.
    pub flags: u32,
    /// The queue to submit to.
    pub queue_id: u32,
    /// Number of syncs to wait on before running.
    pub in_sync_count: u32,
    /// Number of syncs to signal on completion.
    pub out_sync_count: u32,
    /// Size in bytes of the command buffer.
    pub cmdbuf_size: u32,
    /// MBZ.
    pub pad: u32,
}

/// `drm_asahi_attachment`: a memory range written by shaders, a hint for the
/// firmware's cache management.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Attachment {
    /// GPU virtual address of the range.
    pub pointer: u64,
    /// Size in bytes of the range.
    pub size: u64,
    /// MBZ.
    pub pad: u32,
    /// MBZ.
    pub flags: u32,
}

/// `drm_asahi_zls_buffer`: a depth or stencil buffer used for loads, stores
/// and partial-render reloads.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ZlsBuffer {
    /// GPU virtual address of the buffer.
    pub base: u64,
    /// GPU virtual address of the compression metadata, if compressed.
    pub comp_base: u64,
    /// Distance between layers, as the hardware's register takes it (Mesa
    /// writes `((layer_stride_pages - 1) << 14) | 1`; passed through to
    /// the firmware).
    pub stride: u32,
    /// Distance between layers of the compression metadata (Mesa writes
    /// `(layer_stride_cachelines - 1) << 14`).
    pub comp_stride: u32,
}

/// `drm_asahi_timestamp`: where the firmware writes one timestamp.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Timestamp {
    /// Object handle from `GEM_BIND_OBJECT`; 0 for none.
    pub handle: u32,
    /// Byte offset into the object.
    pub offset: u32,
}

/// `drm_asahi_timestamps`: start and end timestamps of a command stage.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Timestamps {
    /// Written when the stage starts.
    pub start: Timestamp,
    /// Written when the stage ends.
    pub end: Timestamp,
}

/// `drm_asahi_helper_program`: a firmware-launched helper program (used for
/// scratch memory setup).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct HelperProgram {
    /// USC address of the helper program (offset from `usc_exec_base`,
    /// tagged in the low bits); 0 for none.
    pub binary: u32,
    /// Helper configuration.
    pub cfg: u32,
    /// Opaque 64-bit data passed to the helper (Mesa: scratch buffer
    /// address).
    pub data: u64,
}

/// `drm_asahi_bg_eot`: a tilebuffer background (load) or end-of-tile
/// (store) program.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct BgEot {
    /// USC address (offset from `usc_exec_base`) of the program's USC
    /// control words, with a tag in the low bits.
    pub usc: u32,
    /// The program's resource counts (the hardware "Counts" word).
    pub rsrc_spec: u32,
}

/// `drm_asahi_cmd_render`: one render pass (vertex and fragment work).
///
/// Most fields are raw hardware register values whose formats `agx-hw`
/// describes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
#[allow(non_snake_case)] // `sample_size_B` keeps its C name.
pub struct CmdRender {
    /// [`RenderFlags`].
    pub flags: u32,
    /// Depth/stencil buffer dimensions (ISP_ZLS_PIXELS register).
    pub isp_zls_pixels: u32,
    /// GPU virtual address of the VDM control stream.
    pub vdm_ctrl_stream_base: u64,
    /// Helper program for the vertex stage.
    pub vertex_helper: HelperProgram,
    /// Helper program for the fragment stage.
    pub fragment_helper: HelperProgram,
    /// GPU virtual address of the scissor array.
    pub isp_scissor_base: u64,
    /// GPU virtual address of the depth-bias array.
    pub isp_dbias_base: u64,
    /// GPU virtual address of the occlusion query results.
    pub isp_oclqry_base: u64,
    /// Depth buffer.
    pub depth: ZlsBuffer,
    /// Stencil buffer.
    pub stencil: ZlsBuffer,
    /// Depth/stencil load/store control (hardware "ZLS Control" format).
    pub zls_ctrl: u64,
    /// Multisample control (PPP_MULTISAMPLECTL register).
    pub ppp_multisamplectl: u64,
    /// GPU virtual address of the sampler heap used by all stages.
    pub sampler_heap: u64,
    /// PPP control register.
    pub ppp_ctrl: u32,
    /// Width in pixels of the render area, 1..=16384.
    pub width_px: u16,
    /// Height in pixels of the render area, 1..=16384.
    pub height_px: u16,
    /// Number of layers, 1..=2048.
    pub layers: u16,
    /// Number of samplers in `sampler_heap`.
    pub sampler_count: u16,
    /// Tile width in pixels (32 or 16).
    pub utile_width_px: u8,
    /// Tile height in pixels (32 or 16).
    pub utile_height_px: u8,
    /// Samples per pixel: 1, 2 or 4.
    pub samples: u8,
    /// Tilebuffer bytes per sample.
    pub sample_size_B: u8,
    /// Triangle merging limit in x (f32 bit pattern).
    pub isp_merge_upper_x: u32,
    /// Triangle merging limit in y (f32 bit pattern).
    pub isp_merge_upper_y: u32,
    /// Background program: run per tile at the start of the pass.
    pub bg: BgEot,
    /// End-of-tile program: run per tile at the end of the pass.
    pub eot: BgEot,
    /// Background program run when the pass resumes after a partial render.
    pub partial_bg: BgEot,
    /// End-of-tile program run when the pass is paused for a partial render.
    pub partial_eot: BgEot,
    /// Depth clear value, in the depth buffer's format.
    pub isp_bgobjdepth: u32,
    /// Stencil clear value in the low 8 bits.
    pub isp_bgobjvals: u32,
    /// Vertex stage timestamps.
    pub ts_vtx: Timestamps,
    /// Fragment stage timestamps.
    pub ts_frag: Timestamps,
}

/// `drm_asahi_cmd_compute`: one compute dispatch stream.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CmdCompute {
    /// MBZ.
    pub flags: u32,
    /// Number of samplers in `sampler_heap`.
    pub sampler_count: u32,
    /// GPU virtual address of the CDM control stream.
    pub cdm_ctrl_stream_base: u64,
    /// End of the first contiguous segment of the control stream.
    pub cdm_ctrl_stream_end: u64,
    /// GPU virtual address of the sampler heap.
    pub sampler_heap: u64,
    /// Helper program.
    pub helper: HelperProgram,
    /// Timestamps.
    pub ts: Timestamps,
}

/// `drm_asahi_get_time`: argument of `GET_TIME`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct GetTime {
    /// MBZ.
    pub flags: u64,
    /// Returned: the GPU timestamp in nanoseconds.
    pub gpu_timestamp: u64,
}

assert_layout!(ParamsGlobal, size = 592, align = 8, {
    features @ 0, 8;
    gpu_generation @ 8, 4;
    gpu_variant @ 12, 4;
    gpu_revision @ 16, 4;
    chip_id @ 20, 4;
    num_dies @ 24, 4;
    num_clusters_total @ 28, 4;
    num_cores_per_cluster @ 32, 4;
    max_frequency_khz @ 36, 4;
    core_masks @ 40, 512;
    vm_start @ 552, 8;
    vm_end @ 560, 8;
    vm_kernel_min_size @ 568, 8;
    max_commands_per_submission @ 576, 4;
    max_attachments @ 580, 4;
    command_timestamp_frequency_hz @ 584, 8;
});
assert_layout!(GetParams, size = 24, align = 8, {
    param_group @ 0, 4;
    pad @ 4, 4;
    pointer @ 8, 8;
    size @ 16, 8;
});
assert_layout!(VmCreate, size = 24, align = 8, {
    kernel_start @ 0, 8;
    kernel_end @ 8, 8;
    vm_id @ 16, 4;
    pad @ 20, 4;
});
assert_layout!(VmDestroy, size = 8, align = 4, {
    vm_id @ 0, 4;
    pad @ 4, 4;
});
assert_layout!(GemCreate, size = 24, align = 8, {
    size @ 0, 8;
    flags @ 8, 4;
    vm_id @ 12, 4;
    handle @ 16, 4;
    pad @ 20, 4;
});
assert_layout!(GemMmapOffset, size = 16, align = 8, {
    handle @ 0, 4;
    flags @ 4, 4;
    offset @ 8, 8;
});
assert_layout!(GemBindOp, size = 32, align = 8, {
    flags @ 0, 4;
    handle @ 4, 4;
    offset @ 8, 8;
    range @ 16, 8;
    addr @ 24, 8;
});
assert_layout!(VmBind, size = 24, align = 8, {
    vm_id @ 0, 4;
    num_binds @ 4, 4;
    stride @ 8, 4;
    pad @ 12, 4;
    userptr @ 16, 8;
});
assert_layout!(GemBindObject, size = 40, align = 8, {
    op @ 0, 4;
    flags @ 4, 4;
    handle @ 8, 4;
    vm_id @ 12, 4;
    offset @ 16, 8;
    range @ 24, 8;
    object_handle @ 32, 4;
    pad @ 36, 4;
});
assert_layout!(QueueCreate, size = 24, align = 8, {
    flags @ 0, 4;
    vm_id @ 4, 4;
    priority @ 8, 4;
    queue_id @ 12, 4;
    usc_exec_base @ 16, 8;
});
assert_layout!(QueueDestroy, size = 8, align = 4, {
    queue_id @ 0, 4;
    pad @ 4, 4;
});
assert_layout!(Sync, size = 16, align = 8, {
    sync_type @ 0, 4;
    handle @ 4, 4;
    timeline_value @ 8, 8;
});
assert_layout!(CmdHeader, size = 8, align = 2, {
    cmd_type @ 0, 2;
    size @ 2, 2;
    vdm_barrier @ 4, 2;
    cdm_barrier @ 6, 2;
});
assert_layout!(Submit, size = 40, align = 8, {
    syncs @ 0, 8;
    cmdbuf @ 8, 8;
    flags @ 16, 4;
    queue_id @ 20, 4;
    in_sync_count @ 24, 4;
    out_sync_count @ 28, 4;
    cmdbuf_size @ 32, 4;
    pad @ 36, 4;
});
assert_layout!(Attachment, size = 24, align = 8, {
    pointer @ 0, 8;
    size @ 8, 8;
    pad @ 16, 4;
    flags @ 20, 4;
});
assert_layout!(ZlsBuffer, size = 24, align = 8, {
    base @ 0, 8;
    comp_base @ 8, 8;
    stride @ 16, 4;
    comp_stride @ 20, 4;
});
assert_layout!(Timestamp, size = 8, align = 4, {
    handle @ 0, 4;
    offset @ 4, 4;
});
assert_layout!(Timestamps, size = 16, align = 4, {
    start @ 0, 8;
    end @ 8, 8;
});
assert_layout!(HelperProgram, size = 16, align = 8, {
    binary @ 0, 4;
    cfg @ 4, 4;
    data @ 8, 8;
});
assert_layout!(BgEot, size = 8, align = 4, {
    usc @ 0, 4;
    rsrc_spec @ 4, 4;
});
assert_layout!(CmdRender, size = 240, align = 8, {
    flags @ 0, 4;
    isp_zls_pixels @ 4, 4;
    vdm_ctrl_stream_base @ 8, 8;
    vertex_helper @ 16, 16;
    fragment_helper @ 32, 16;
    isp_scissor_base @ 48, 8;
    isp_dbias_base @ 56, 8;
    isp_oclqry_base @ 64, 8;
    depth @ 72, 24;
    stencil @ 96, 24;
    zls_ctrl @ 120, 8;
    ppp_multisamplectl @ 128, 8;
    sampler_heap @ 136, 8;
    ppp_ctrl @ 144, 4;
    width_px @ 148, 2;
    height_px @ 150, 2;
    layers @ 152, 2;
    sampler_count @ 154, 2;
    utile_width_px @ 156, 1;
    utile_height_px @ 157, 1;
    samples @ 158, 1;
    sample_size_B @ 159, 1;
    isp_merge_upper_x @ 160, 4;
    isp_merge_upper_y @ 164, 4;
    bg @ 168, 8;
    eot @ 176, 8;
    partial_bg @ 184, 8;
    partial_eot @ 192, 8;
    isp_bgobjdepth @ 200, 4;
    isp_bgobjvals @ 204, 4;
    ts_vtx @ 208, 16;
    ts_frag @ 224, 16;
});
assert_layout!(CmdCompute, size = 64, align = 8, {
    flags @ 0, 4;
    sampler_count @ 4, 4;
    cdm_ctrl_stream_base @ 8, 8;
    cdm_ctrl_stream_end @ 16, 8;
    sampler_heap @ 24, 8;
    helper @ 32, 16;
    ts @ 48, 16;
});
assert_layout!(GetTime, size = 16, align = 8, {
    flags @ 0, 8;
    gpu_timestamp @ 8, 8;
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ioctl::{ioc_nr, ioc_size_bytes};

    /// The request numbers upstream publishes for x86-64 and arm64.
    #[test]
    fn request_numbers_match_upstream() {
        let expected: &[(u32, u32)] = &[
            (DRM_IOCTL_ASAHI_GET_PARAMS, 0x4018_6440),
            (DRM_IOCTL_ASAHI_GET_TIME, 0xC010_6441),
            (DRM_IOCTL_ASAHI_VM_CREATE, 0xC018_6442),
            (DRM_IOCTL_ASAHI_VM_DESTROY, 0x4008_6443),
            (DRM_IOCTL_ASAHI_VM_BIND, 0x4018_6444),
            (DRM_IOCTL_ASAHI_GEM_CREATE, 0xC018_6445),
            (DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET, 0xC010_6446),
            (DRM_IOCTL_ASAHI_GEM_BIND_OBJECT, 0xC028_6447),
            (DRM_IOCTL_ASAHI_QUEUE_CREATE, 0xC018_6448),
            (DRM_IOCTL_ASAHI_QUEUE_DESTROY, 0x4008_6449),
            (DRM_IOCTL_ASAHI_SUBMIT, 0x4028_644A),
        ];
        for &(ours, theirs) in expected {
            assert_eq!(ours, theirs, "{ours:#x} != {theirs:#x}");
        }
    }

    #[test]
    fn ioctl_table_is_consistent() {
        for &(name, request, number) in IOCTLS {
            assert_eq!(ioc_nr(request), DRM_COMMAND_BASE + number, "{name}");
            assert!(ioc_size_bytes(request) > 0, "{name}");
        }
    }

    #[test]
    fn enums_round_trip_and_reject_unknown_values() {
        for &t in CmdType::ALL {
            assert_eq!(CmdType::try_from(u32::from(t)), Ok(t));
        }
        for &p in Priority::ALL {
            assert_eq!(Priority::try_from(u32::from(p)), Ok(p));
        }
        assert_eq!(
            CmdType::try_from(5),
            Err(crate::UnknownValue {
                type_name: "CmdType",
                value: 5
            })
        );
        assert!(SyncType::try_from(2).is_err());
        assert!(BindObjectOp::try_from(u32::MAX).is_err());
    }

    #[test]
    fn structs_are_plain_bytes() {
        use zerocopy::IntoBytes;
        let mut render = CmdRender {
            width_px: 0x1234,
            sample_size_B: 8,
            ..Default::default()
        };
        render.partial_bg.usc = 0xdead_beef;
        let bytes = render.as_bytes();
        assert_eq!(bytes.len(), 240);
        assert_eq!(&bytes[148..150], &[0x34, 0x12]);
        assert_eq!(bytes[159], 8);
        assert_eq!(&bytes[184..188], &0xdead_beef_u32.to_le_bytes());
        let back = CmdRender::read_from_bytes(bytes).unwrap();
        assert_eq!(back, render);
    }

    #[test]
    fn flags_values() {
        assert_eq!(RenderFlags::DBIAS_IS_INT.bits(), 0x4_0000);
        assert_eq!(BindFlags::all().bits(), 0xf);
        assert_eq!(GemFlags::all().bits(), 0x3);
    }
}
