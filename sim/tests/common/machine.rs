//! A file with a VM, a data buffer, a USC region and a queue, for tests
//! that run programs on the simulated GPU through SUBMIT.

use std::time::{Duration, Instant};

use agx_hw::formats::{
    UscControl, UscNoPreshader, UscPreshader, UscRegisters, UscSampler, UscShader, UscShared,
    UscTexture, UscUniform, UscWord,
};
use agx_hw::uat::PhysicalMemory;
use agx_kmd::{Errno, File};
use agx_sim::{System, SystemConfig};
use agx_uapi::asahi::{
    self, BindFlags, CmdCompute, CmdHeader, CmdType, QueueCreate, Submit, Sync,
    DRM_ASAHI_BARRIER_NONE,
};
use agx_uapi::drm::{self, SyncobjCreate};
use zerocopy::{FromZeros, IntoBytes};

use super::*;

/// Data buffers (inputs, outputs, uniforms, control streams).
pub const DATA_VA: u64 = 0x1_0000_0000;
pub const DATA_BYTES: u64 = 4 << 20;
/// The USC region: `usc_exec_base`, with code and pipelines in it.
pub const USC_BASE: u64 = 0x2_0000_0000;
pub const USC_BYTES: u64 = 256 << 10;

/// The configuration machines use: 1 GiB of RAM and the given watchdog.
pub fn machine_config(command_timeout_ms: u32) -> SystemConfig {
    SystemConfig {
        ram_bytes: 1 << 30,
        command_timeout_ms,
        ..SystemConfig::default()
    }
}

pub struct Machine {
    pub system: System,
    pub file: File,
    pub vm: u32,
    pub queue: u32,
    pub data: u32,
    pub usc: u32,
    /// The pass type each fragment program placed by [`Machine::program`]
    /// needs, by pipeline offset (`agx_hw::isa::fragment_pass_type`).
    pass_types: std::sync::Mutex<std::collections::HashMap<u64, agx_hw::formats::PassType>>,
}

impl Machine {
    pub fn new(command_timeout_ms: u32) -> Machine {
        Machine::with_threads(command_timeout_ms, 2)
    }

    pub fn with_threads(command_timeout_ms: u32, gpu_threads: usize) -> Machine {
        Machine::with_config(SystemConfig {
            gpu_threads,
            ..machine_config(command_timeout_ms)
        })
    }

    pub fn with_config(config: SystemConfig) -> Machine {
        let system = System::new(config).unwrap();
        let file = system.open();
        let vm = vm_create(&file);
        let rw = (BindFlags::READ | BindFlags::WRITE).bits();
        let data = gem_create(&file, DATA_BYTES, 0, 0).unwrap();
        let usc = gem_create(&file, USC_BYTES, 0, 0).unwrap();
        bind(
            &file,
            vm,
            &[
                map_op(data, DATA_VA, DATA_BYTES, 0, rw),
                map_op(usc, USC_BASE, USC_BYTES, 0, BindFlags::READ.bits()),
            ],
        )
        .unwrap();
        let mut c = QueueCreate {
            vm_id: vm,
            priority: 0,
            usc_exec_base: USC_BASE,
            ..QueueCreate::default()
        };
        call(&file, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut c).unwrap();
        Machine {
            system,
            file,
            vm,
            queue: c.queue_id,
            data,
            usc,
            pass_types: Default::default(),
        }
    }

    /// The pass type the program at `pipeline` needs as a fragment shader,
    /// as Mesa's linker chooses it.
    pub fn pass_type(&self, pipeline: u64) -> agx_hw::formats::PassType {
        self.pass_types
            .lock()
            .unwrap()
            .get(&pipeline)
            .copied()
            .unwrap_or(agx_hw::formats::PassType::Opaque)
    }

    pub fn poke(&self, handle: u32, offset: u64, bytes: &[u8]) {
        let pa = self.file.object(handle).unwrap().memory().pa();
        self.system
            .device()
            .ram()
            .write(pa.offset(offset), bytes)
            .unwrap();
    }

    pub fn peek(&self, handle: u32, offset: u64, len: usize) -> Vec<u8> {
        let pa = self.file.object(handle).unwrap().memory().pa();
        let mut out = vec![0u8; len];
        self.system
            .device()
            .ram()
            .read(pa.offset(offset), &mut out)
            .unwrap();
        out
    }

    pub fn poke_u32s(&self, offset: u64, values: &[u32]) {
        self.poke(self.data, offset, values.as_bytes());
    }

    pub fn peek_u32s(&self, offset: u64, count: usize) -> Vec<u32> {
        self.peek(self.data, offset, 4 * count)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Places a program: its code at `code_offset` and a pipeline at
    /// `pipeline_offset` (both in the USC region) binding `uniforms` (at
    /// `uniform_offset` in the data buffer), `shared_bytes` of threadgroup
    /// memory and the descriptors of `textures` (count, GPU address) to
    /// texture state registers from 0. Returns the pipeline's offset.
    #[allow(clippy::too_many_arguments)]
    pub fn program(
        &self,
        source: &str,
        code_offset: u64,
        pipeline_offset: u64,
        uniforms: &[u32],
        uniform_offset: u64,
        shared_bytes: u32,
        textures: Option<(u32, u64)>,
    ) -> u64 {
        self.program_with_samplers(
            source,
            code_offset,
            pipeline_offset,
            uniforms,
            uniform_offset,
            shared_bytes,
            textures,
            None,
        )
    }

    /// [`Machine::program`] that also binds `samplers` (count, GPU
    /// address) to sampler state registers from 0.
    #[allow(clippy::too_many_arguments)]
    pub fn program_with_samplers(
        &self,
        source: &str,
        code_offset: u64,
        pipeline_offset: u64,
        uniforms: &[u32],
        uniform_offset: u64,
        shared_bytes: u32,
        textures: Option<(u32, u64)>,
        samplers: Option<(u32, u64)>,
    ) -> u64 {
        let code = agx_hw::isa::text::assemble(source, USC_BASE + code_offset).unwrap();
        self.poke(self.usc, code_offset, &code);
        self.pass_types
            .lock()
            .unwrap()
            .insert(pipeline_offset, agx_hw::isa::fragment_pass_type(&code));
        self.poke_u32s(uniform_offset, uniforms);
        let mut words = Vec::new();
        words.extend(
            UscUniform {
                start_halfs: 0,
                size_halfs: 2 * uniforms.len() as u32,
                buffer: DATA_VA + uniform_offset,
            }
            .pack()
            .unwrap(),
        );
        if let Some((count, buffer)) = textures {
            words.extend(
                UscTexture {
                    start: 0,
                    count,
                    buffer,
                }
                .pack()
                .unwrap(),
            );
        }
        if let Some((count, buffer)) = samplers {
            words.extend(
                UscSampler {
                    start: 0,
                    count,
                    buffer,
                }
                .pack()
                .unwrap(),
            );
        }
        words.extend(
            UscShared {
                uses_shared_memory: shared_bytes > 0,
                bytes_per_threadgroup: shared_bytes.max(256),
                ..UscShared::default()
            }
            .pack()
            .unwrap(),
        );
        words.extend(
            UscShader {
                code: code_offset,
                ..UscShader::default()
            }
            .pack()
            .unwrap(),
        );
        words.extend(
            UscRegisters {
                register_count: 16,
                ..UscRegisters::default()
            }
            .pack()
            .unwrap(),
        );
        words.extend(UscNoPreshader::default().pack().unwrap());
        self.poke(self.usc, pipeline_offset, &words);
        pipeline_offset
    }

    /// Gives the pipeline at `pipeline` (made by [`Machine::program`]) a
    /// preshader: `source`, assembled at `code_offset` in the USC region,
    /// in place of its No-preshader word (Mesa's preambles).
    pub fn set_preshader(&self, pipeline: u64, code_offset: u64, source: &str) {
        let code = agx_hw::isa::text::assemble(source, USC_BASE + code_offset).unwrap();
        self.poke(self.usc, code_offset, &code);
        let word = UscPreshader {
            code: code_offset,
            ..UscPreshader::default()
        };
        let end = self.control_word(pipeline, UscControl::NoPreshader);
        self.poke(self.usc, end, &word.pack().unwrap());
    }

    /// The USC-region offset of the pipeline's first control word with
    /// `tag` (made by [`Machine::program`]).
    pub fn control_word(&self, pipeline: u64, tag: UscControl) -> u64 {
        let words = self.peek(self.usc, pipeline, 64);
        let mut at = 0;
        while UscWord::peek_tag(&words[at..]).unwrap() != tag {
            at += UscWord::len_bytes(&words[at..]).unwrap();
        }
        pipeline + at as u64
    }

    /// A compute kernel's pipeline (no textures).
    pub fn kernel(
        &self,
        source: &str,
        code_offset: u64,
        pipeline_offset: u64,
        uniforms: &[u32],
        uniform_offset: u64,
        shared_bytes: u32,
    ) -> u64 {
        self.program(
            source,
            code_offset,
            pipeline_offset,
            uniforms,
            uniform_offset,
            shared_bytes,
            None,
        )
    }

    /// Runs a CDM stream (at `stream_offset` in the data buffer); returns
    /// the submission's fence error.
    pub fn run(&self, stream_offset: u64) -> Option<Errno> {
        let cmd = CmdCompute {
            cdm_ctrl_stream_base: DATA_VA + stream_offset,
            cdm_ctrl_stream_end: DATA_VA + stream_offset + 0x1000,
            ..CmdCompute::new_zeroed()
        };
        self.submit(CmdType::Compute, cmd.as_bytes())
    }

    /// Writes a stream of one launch of `pipeline` (over `grid` threads in
    /// threadgroups of `local`) and a terminate at `stream_offset`, and
    /// runs it as [`Machine::run`] does.
    pub fn run_launch(
        &self,
        stream_offset: u64,
        pipeline: u64,
        grid: [u32; 3],
        local: [u32; 3],
    ) -> Option<Errno> {
        let mut stream = launch(pipeline, grid, local);
        stream.extend(
            agx_hw::formats::CdmStreamTerminate::default()
                .pack()
                .unwrap(),
        );
        self.poke(self.data, stream_offset, &stream);
        self.run(stream_offset)
    }

    /// Submits one command and waits; returns the fence error.
    pub fn submit(&self, cmd_type: CmdType, payload: &[u8]) -> Option<Errno> {
        let mut cmdbuf = CmdHeader {
            cmd_type: cmd_type as u16,
            size: payload.len() as u16,
            vdm_barrier: DRM_ASAHI_BARRIER_NONE,
            cdm_barrier: DRM_ASAHI_BARRIER_NONE,
        }
        .as_bytes()
        .to_vec();
        cmdbuf.extend_from_slice(payload);
        let mut create = SyncobjCreate::default();
        call(&self.file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut create).unwrap();
        let syncs = [Sync {
            sync_type: 0,
            handle: create.handle,
            timeline_value: 0,
        }];
        let mut s = Submit {
            syncs: syncs.as_ptr() as u64,
            cmdbuf: cmdbuf.as_ptr() as u64,
            queue_id: self.queue,
            out_sync_count: 1,
            cmdbuf_size: cmdbuf.len() as u32,
            ..Submit::default()
        };
        call(&self.file, asahi::DRM_IOCTL_ASAHI_SUBMIT, &mut s).unwrap();
        let syncobj = self.file.syncobj(create.handle).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = syncobj.fence_for(0).and_then(|f| f.status()) {
                return status;
            }
            assert!(Instant::now() < deadline, "the kernel never finished");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A Launch block (direct mode) of `pipeline` over `grid` threads in
/// threadgroups of `local`.
pub fn launch(pipeline: u64, grid: [u32; 3], local: [u32; 3]) -> Vec<u8> {
    use agx_hw::formats::{
        CdmBlock, CdmGlobalSize, CdmLaunch, CdmLaunchWord0, CdmLaunchWord1, CdmLocalSize, CdmMode,
    };
    let mut block = Vec::new();
    CdmBlock::Launch(CdmLaunch {
        header: CdmLaunchWord0 {
            mode: CdmMode::Direct,
            ..CdmLaunchWord0::default()
        },
        word1: CdmLaunchWord1 { pipeline },
        global: Some(CdmGlobalSize {
            x: grid[0],
            y: grid[1],
            z: grid[2],
        }),
        indirect: None,
        local: Some(CdmLocalSize {
            x: local[0],
            y: local[1],
            z: local[2],
        }),
    })
    .build(&mut block)
    .unwrap();
    block
}
