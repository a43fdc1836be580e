//! The GPU's data masters: what runs a RunVertex, RunFragment or
//! RunCompute command once the firmware has dequeued it.
//!
//! On AGX the firmware does not execute work itself: it programs the
//! command's registers and kicks a *data master*, the front end that walks
//! a control stream in GPU memory. The compute data master (CDM) reads a
//! stream of blocks, each tagged in bits 29..31 of its first word: a
//! launch (a kernel dispatch), a barrier, a link to another stream
//! segment, or a terminate. Every read goes through the GPU MMU with the
//! command's VM context, so an unmapped stream faults at the exact address
//! the hardware would report.
//!
//! [`Gpu`] walks CDM streams: barriers and links are followed, a launch
//! binds its pipeline and runs the kernel over its grid on the shader
//! core ([`crate::compute`]), a terminate completes the command, and a
//! stream that never terminates (a link loop) runs into the firmware's
//! watchdog as it would on hardware. The render pipeline (VDM, tiling,
//! fragment) is still to come; until then RunVertex and RunFragment end
//! in a fault of reason [`FAULT_UNSUPPORTED_WORK`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use agx_fwif::messages::{CommandTag, FaultUnit, RunComputeBody, FAULT_UNSUPPORTED_WORK};
use agx_fwif::ring::SharedMemory;
use agx_hw::formats::{CdmBlockType, CdmStreamLink, UatFaultReason};
use agx_hw::uat::{self, Access, PhysicalMemory, UatFault, PAGE_BYTES};

use crate::compute;
use zerocopy::FromBytes;

/// What the execution engine did with a Run command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineResult {
    /// It completed.
    Done,
    /// It faulted.
    Fault {
        /// The GPU address.
        address: u64,
        /// The unit ([`FaultUnit`] as u32).
        unit: u32,
        /// 0 read, 1 write, 2 fetch.
        access: u32,
        /// The reason code (a `UatFaultReason`, or
        /// [`FAULT_UNSUPPORTED_WORK`]).
        reason: u32,
    },
    /// It ran out of time and was stopped.
    Timeout,
}

impl EngineResult {
    /// The fault a failed translation raises for `unit`.
    pub fn from_uat(fault: &UatFault, unit: FaultUnit) -> EngineResult {
        EngineResult::Fault {
            address: fault.va,
            unit: unit as u32,
            access: u32::from(!fault.read),
            reason: fault.reason.to_raw(),
        }
    }

    fn unsupported(address: u64, unit: FaultUnit) -> EngineResult {
        EngineResult::Fault {
            address,
            unit: unit as u32,
            access: 0,
            reason: FAULT_UNSUPPORTED_WORK,
        }
    }
}

/// What the firmware offers the GPU while a command runs.
pub trait FirmwareServices {
    /// The parameter buffer `buffer_id` ran dry mid-render: asks the kmd
    /// for `blocks_wanted` more blocks (a GrowTVB event) and waits for its
    /// answer. Returns the buffer's new block count, or `None` when the
    /// kmd refused or did not answer in time (the caller then does a
    /// partial render).
    fn grow_tvb(&self, buffer_id: u32, blocks_wanted: u64) -> Option<u64>;
}

/// Everything a command runs with.
pub struct RunContext<'a> {
    /// The command object's (firmware) address.
    pub command: u64,
    /// The command's body (the bytes after its header).
    pub body: &'a [u8],
    /// The command's VM context slot.
    pub vm_slot: u32,
    /// The root of that context's user page tables (`None`: the slot has
    /// no valid table).
    pub ttb0: Option<u64>,
    /// Physical memory, as the GPU's fabric sees it.
    pub memory: &'a (dyn PhysicalMemory + Sync),
    /// Memory as the firmware sees it.
    pub firmware: &'a (dyn SharedMemory + Sync),
    /// When the firmware's watchdog stops the command.
    pub deadline: Instant,
    /// The firmware's services.
    pub services: &'a dyn FirmwareServices,
    /// Set when the firmware shuts down: long work stops early.
    pub stop: &'a AtomicBool,
}

/// Runs RunVertex/RunFragment/RunCompute commands.
pub trait Engine: Send {
    /// Runs one command.
    fn run(&mut self, tag: CommandTag, ctx: &RunContext<'_>) -> EngineResult;
}

/// An engine that runs nothing: every command is unsupported work.
#[derive(Debug, Default)]
pub struct NoEngine;

impl Engine for NoEngine {
    fn run(&mut self, _: CommandTag, ctx: &RunContext<'_>) -> EngineResult {
        EngineResult::unsupported(ctx.command, FaultUnit::Firmware)
    }
}

/// Entries of a [`GpuVm`]'s translation cache.
const TLB_ENTRIES: usize = 16;

/// Bits of a TLB entry: bit 0 readable, bit 1 writable, bits 2-29 the
/// physical page, bits 30-63 the virtual page + 1 (0: empty). One word,
/// so entries update atomically and a `GpuVm` can be shared by threads.
const TLB_PA_PAGE_BITS: u32 = 28;

/// The user half of a VM context, as the GPU reads it.
///
/// It carries a small translation cache (a TLB) of the pages it walked,
/// direct-mapped by page number; clones start with the original's
/// entries. Any change to the page tables (the kmd advances the memory's
/// translation generation, as a kernel shoots down TLBs when it unmaps)
/// empties it before the next translation, so an unmapped page is never
/// reached through a stale entry, even mid-command.
pub struct GpuVm<'a> {
    memory: &'a (dyn PhysicalMemory + Sync),
    root: u64,
    /// The kernel's half (ttb1), shared by every context: the firmware's
    /// view of it.
    kernel: Option<&'a (dyn SharedMemory + Sync)>,
    tlb: [std::sync::atomic::AtomicU64; TLB_ENTRIES],
    /// The memory's translation generation the entries belong to.
    tlb_generation: std::sync::atomic::AtomicU64,
}

impl Clone for GpuVm<'_> {
    /// A copy with a copy of the translation cache (its entries are valid
    /// for the command the original serves).
    fn clone(&self) -> Self {
        GpuVm {
            memory: self.memory,
            root: self.root,
            kernel: self.kernel,
            tlb: std::array::from_fn(|i| {
                std::sync::atomic::AtomicU64::new(self.tlb[i].load(Ordering::Relaxed))
            }),
            tlb_generation: std::sync::atomic::AtomicU64::new(
                self.tlb_generation.load(Ordering::Relaxed),
            ),
        }
    }
}

impl<'a> GpuVm<'a> {
    /// The context rooted at `root`.
    pub fn new(memory: &'a (dyn PhysicalMemory + Sync), root: u64) -> GpuVm<'a> {
        GpuVm {
            memory,
            root,
            kernel: None,
            tlb: Default::default(),
            tlb_generation: std::sync::atomic::AtomicU64::new(memory.translation_generation()),
        }
    }

    /// The context of a command: its user half rooted at `root`, and the
    /// kernel half every context shares.
    pub fn of(ctx: &RunContext<'a>, root: u64) -> GpuVm<'a> {
        GpuVm {
            memory: ctx.memory,
            root,
            kernel: Some(ctx.firmware),
            tlb: Default::default(),
            tlb_generation: std::sync::atomic::AtomicU64::new(ctx.memory.translation_generation()),
        }
    }

    /// The kernel half, for addresses in it.
    pub fn kernel(&self, va: u64) -> Option<&'a (dyn SharedMemory + Sync)> {
        self.kernel.filter(|_| va >= uat::UPPER_HALF_START)
    }

    /// Reads `buf.len()` bytes at GPU address `va`.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), UatFault> {
        if let Some(kernel) = self.kernel(va) {
            return kernel.read(va, buf).map_err(|e| UatFault {
                va: e.address,
                reason: UatFaultReason::Unmapped,
                level: 0,
                read: true,
            });
        }
        let mut done = 0;
        while done < buf.len() {
            let at = va.wrapping_add(done as u64);
            let pa = self.translate(at, Access::GpuRead)?;
            let chunk = ((PAGE_BYTES - at % PAGE_BYTES) as usize).min(buf.len() - done);
            self.memory
                .read(pa, &mut buf[done..done + chunk])
                .map_err(|_| UatFault {
                    va: at,
                    reason: UatFaultReason::Unmapped,
                    level: 0,
                    read: true,
                })?;
            done += chunk;
        }
        Ok(())
    }

    /// Translates user-half address `va` for `access` (a GPU read or
    /// write), through the translation cache.
    pub fn translate(&self, va: u64, access: Access) -> Result<u64, UatFault> {
        // A page-table change since the entries were filled (an unmap:
        // the kernel's TLB shootdown) empties the cache.
        let generation = self.memory.translation_generation();
        if self.tlb_generation.load(Ordering::Relaxed) != generation {
            for entry in &self.tlb {
                entry.store(0, Ordering::Relaxed);
            }
            self.tlb_generation.store(generation, Ordering::Relaxed);
        }
        let page = va / PAGE_BYTES;
        let slot = &self.tlb[(page % TLB_ENTRIES as u64) as usize];
        let entry = slot.load(Ordering::Relaxed);
        let allowed = if access.is_write() { 2 } else { 1 };
        if entry >> (2 + TLB_PA_PAGE_BITS) == page + 1 && entry & allowed != 0 {
            let pa_page = (entry >> 2) & ((1 << TLB_PA_PAGE_BITS) - 1);
            return Ok(pa_page * PAGE_BYTES + va % PAGE_BYTES);
        }
        let t = uat::translate(self.memory, self.root, va, access)?;
        let pa_page = t.pa / PAGE_BYTES;
        if pa_page < 1 << TLB_PA_PAGE_BITS && page + 1 < 1 << (62 - TLB_PA_PAGE_BITS) {
            slot.store(
                (page + 1) << (2 + TLB_PA_PAGE_BITS)
                    | pa_page << 2
                    | u64::from(t.permissions.gpu_write) << 1
                    | u64::from(t.permissions.gpu_read),
                Ordering::Relaxed,
            );
        }
        Ok(t.pa)
    }

    /// Physical memory.
    pub fn memory(&self) -> &'a (dyn PhysicalMemory + Sync) {
        self.memory
    }

    /// The root of the context's user page tables.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, va: u64) -> Result<u32, UatFault> {
        let mut word = [0u8; 4];
        self.read(va, &mut word)?;
        Ok(u32::from_le_bytes(word))
    }
}

/// The GPU's data masters.
#[derive(Debug)]
pub struct Gpu {
    /// Host threads that run threadgroups (at least 1).
    pub workers: usize,
    /// CDM blocks walked, over all commands.
    pub cdm_blocks: u64,
    /// Kernels launched.
    pub launches: u64,
    /// SIMD-group instructions executed by kernels.
    pub usc_instructions: u64,
}

impl Gpu {
    /// A GPU running threadgroups on `workers` host threads.
    pub fn new(workers: usize) -> Gpu {
        Gpu {
            workers: workers.max(1),
            cdm_blocks: 0,
            launches: 0,
            usc_instructions: 0,
        }
    }
}

impl Default for Gpu {
    fn default() -> Gpu {
        Gpu::new(1)
    }
}

/// Blocks walked between watchdog checks.
const WATCHDOG_STRIDE: u64 = 4096;

impl Gpu {
    fn run_compute(&mut self, ctx: &RunContext<'_>) -> EngineResult {
        let Ok(body) = RunComputeBody::read_from_prefix(ctx.body).map(|(b, _)| b) else {
            return EngineResult::unsupported(ctx.command, FaultUnit::Firmware);
        };
        // Helper programs are not modelled: refused, not skipped.
        if body.helper.program != 0 {
            return EngineResult::unsupported(
                body.usc_exec_base
                    .get()
                    .wrapping_add(u64::from(body.helper.program & !3)),
                FaultUnit::Firmware,
            );
        }
        let Some(root) = ctx.ttb0 else {
            return EngineResult::unsupported(body.cdm_ctrl_stream_base.get(), FaultUnit::Cdm);
        };
        let vm = GpuVm::of(ctx, root);
        let mut pc = body.cdm_ctrl_stream_base.get();
        let mut walked = 0u64;
        loop {
            walked += 1;
            if walked.is_multiple_of(WATCHDOG_STRIDE)
                && (Instant::now() >= ctx.deadline || ctx.stop.load(Ordering::Relaxed))
            {
                return EngineResult::Timeout;
            }
            let word = match vm.read_u32(pc) {
                Ok(word) => word,
                Err(fault) => return EngineResult::from_uat(&fault, FaultUnit::Cdm),
            };
            self.cdm_blocks += 1;
            match CdmBlockType::from_raw(word >> 29) {
                CdmBlockType::StreamTerminate => return EngineResult::Done,
                CdmBlockType::Barrier => pc = pc.wrapping_add(4),
                CdmBlockType::StreamLink => {
                    let mut block = [0u8; 8];
                    if let Err(fault) = vm.read(pc, &mut block) {
                        return EngineResult::from_uat(&fault, FaultUnit::Cdm);
                    }
                    pc = CdmStreamLink::unpack(&block).value.target;
                }
                CdmBlockType::Launch => {
                    let launch = match compute::parse_launch(&vm, pc, body.usc_exec_base.get()) {
                        Ok(launch) => launch,
                        Err(result) => return result,
                    };
                    let binding =
                        match compute::bind(&vm, launch.pipeline, body.usc_exec_base.get()) {
                            Ok(binding) => binding,
                            Err(result) => return result,
                        };
                    let heap = (!body.sampler_heap.is_null())
                        .then_some((body.sampler_heap.get(), body.sampler_count));
                    match compute::run(ctx, vm.clone(), self.workers, &launch, &binding, pc, heap) {
                        Ok(instructions) => self.usc_instructions += instructions,
                        Err(result) => return result,
                    }
                    self.launches += 1;
                    pc = pc.wrapping_add(launch.length_bytes);
                }
                CdmBlockType::Unknown(_) => return EngineResult::unsupported(pc, FaultUnit::Cdm),
            }
        }
    }
}

impl Engine for Gpu {
    fn run(&mut self, tag: CommandTag, ctx: &RunContext<'_>) -> EngineResult {
        match tag {
            CommandTag::RunCompute => self.run_compute(ctx),
            CommandTag::RunVertex => crate::render::run_vertex(ctx, self.workers),
            CommandTag::RunFragment => crate::render::run_fragment(ctx, self.workers),
            _ => EngineResult::unsupported(ctx.command, FaultUnit::Firmware),
        }
    }
}
