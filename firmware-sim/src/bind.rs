//! USC control words: how a pipeline sets up the shader core before its
//! program runs.
//!
//! A pipeline (a kernel, a vertex or fragment shader, a tile program) is a
//! list of control words in the USC region: Uniform and Uniform-high copy
//! memory into uniform registers, Texture and Sampler bind descriptor
//! arrays to state registers, Shared sizes threadgroup memory, Shader
//! names the code, Registers the register count, Fragment-properties the
//! fragment state; the list ends at No-preshader, or at Preshader, which
//! names a program (Mesa's "preamble") that runs once before the shader
//! and computes uniforms for it (`uniform_store`). Every word is read
//! through the command's VM, so a pipeline in unmapped memory faults
//! where the hardware would.

use agx_fwif::messages::FaultUnit;
use agx_hw::formats::{
    SamplerStates, SharedLayout, UscShared, UscUniform, UscUniformHigh, UscWord,
};

use crate::command::Watchdog;
use crate::fault::{exec_fault, unsupported, EngineResult};
use crate::helper::StageHelper;
use crate::memory::{read_item, GpuVm};
use crate::texture::TextureUnit;
use crate::usc::io::{IoError, StateKind, TextureRequest};
use crate::usc::{ProgramCache, ShaderIo, SimdGroup, LANES, UNIFORMS};

/// The most control words a pipeline may have before its preshader word.
const MAX_CONTROL_WORDS: usize = 64;

pub use crate::texture::StateBinding;

/// What a pipeline's control words set up.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Address of the program's first instruction.
    pub code: u64,
    /// Uniform registers.
    pub uniforms: Box<[u32; UNIFORMS]>,
    /// Threadgroup memory per threadgroup.
    pub shared_bytes: usize,
    /// The Shared word, if the pipeline has one (its layout says whether
    /// a kernel's threadgroup memory is an image block).
    pub shared: Option<UscShared>,
    /// Texture (or PBE) descriptors bound to texture state registers.
    pub textures: Vec<StateBinding>,
    /// Sampler descriptors bound to sampler state registers.
    pub samplers: Vec<StateBinding>,
    /// The Registers word's spill size: 0 when the program needs no
    /// stack, else the bucket the helper program is asked for.
    pub spill_bucket: u32,
    /// Bytes between the samplers a Sampler word binds: 8, or 24 when the
    /// stage declares extended sampler states (each sampler followed by
    /// its 16-byte custom border colour; Mesa's `agx_upload_samplers`).
    /// The stage's word sets it after binding.
    pub sampler_stride_bytes: u64,
    /// The special registers the program reads, once a stage has asked
    /// (`shader::special_registers_read`; `None` inside: the
    /// scan could not tell).
    pub special_reads: std::sync::OnceLock<Option<[u64; 4]>>,
    /// Whether every lane of the program stores the same values and does
    /// nothing else, once a stage has asked
    /// (`shader::stores_the_same_in_every_lane`).
    pub same_in_every_lane: std::sync::OnceLock<bool>,
}

impl Binding {
    /// Takes the stage's declared sampler-state count: extended states
    /// put a custom border after each bound sampler.
    fn with_sampler_states(mut self, states: SamplerStates) -> Binding {
        use agx_hw::formats::SamplerStates as S;
        self.sampler_stride_bytes = if matches!(states, S::Extended8 | S::Extended16) {
            24
        } else {
            8
        };
        self
    }
}

impl Binding {
    /// The address of the descriptor bound to texture state register
    /// `index` (24 bytes each).
    pub fn texture_descriptor(&self, index: u32) -> Option<u64> {
        self.textures
            .iter()
            .rev()
            .find(|b| (b.start..b.start + b.count).contains(&index))
            .map(|b| b.buffer + 24 * u64::from(index - b.start))
    }
}

/// Reads the control words of the pipeline at `pipeline` (each read
/// through the MMU, sized and parsed by the generated `UscWord` list) and
/// returns what they set up, after running its preshader if it has one
/// (once, on one lane, over its uniforms); code addresses are offsets from
/// `usc_exec_base`.
/// A pipeline without a Shader word or with more than 64 words is
/// refused. The preshader runs on a stack from `helper` when the stage's
/// helper program is configured for preshader stacks.
pub fn bind(
    vm: &GpuVm<'_>,
    pipeline: u64,
    usc_exec_base: u64,
    watchdog: &Watchdog<'_>,
    samplers: StageSamplers,
    helper: Option<&mut StageHelper>,
) -> Result<Binding, EngineResult> {
    let mut binding = Binding {
        code: 0,
        uniforms: Box::new([0; UNIFORMS]),
        shared_bytes: 0,
        shared: None,
        textures: Vec::new(),
        samplers: Vec::new(),
        spill_bucket: 0,
        sampler_stride_bytes: 8,
        special_reads: std::sync::OnceLock::new(),
        same_in_every_lane: std::sync::OnceLock::new(),
    }
    .with_sampler_states(samplers.states);
    let mut have_code = false;
    let mut at = pipeline;
    let mut item = Vec::new();
    for _ in 0..MAX_CONTROL_WORDS {
        let word: UscWord = read_item(vm, at, FaultUnit::Usc, &mut item)?;
        match word {
            UscWord::Uniform(UscUniform {
                start_halfs,
                size_halfs,
                buffer,
                ..
            }) => load_uniforms(
                vm,
                &mut binding,
                at,
                u64::from(start_halfs),
                size_halfs,
                buffer,
            )?,
            UscWord::UniformHigh(UscUniformHigh {
                start_halfs,
                size_halfs,
                buffer,
                ..
            }) => load_uniforms(
                vm,
                &mut binding,
                at,
                256 + u64::from(start_halfs),
                size_halfs,
                buffer,
            )?,
            UscWord::Shared(w) => {
                if let SharedLayout::Unknown(raw) = w.layout {
                    return Err(unsupported(
                        at,
                        FaultUnit::Usc,
                        format_args!("a USC Shared word with layout {raw}, which nobody has seen"),
                    ));
                }
                if w.uses_shared_memory {
                    binding.shared_bytes = w.bytes_per_threadgroup as usize;
                }
                binding.shared = Some(w);
            }
            UscWord::Shader(w) => {
                binding.code = usc_exec_base.wrapping_add(w.code);
                have_code = true;
            }
            UscWord::Registers(w) => binding.spill_bucket = w.spill_size,
            UscWord::FragmentProperties(_) => {}
            UscWord::Texture(w) => binding.textures.push(StateBinding {
                start: w.start,
                count: w.count,
                buffer: w.buffer,
                word_address: at,
            }),
            UscWord::Sampler(w) => binding.samplers.push(StateBinding {
                start: w.start,
                count: w.count,
                buffer: w.buffer,
                word_address: at,
            }),
            UscWord::NoPreshader(_) => {
                return if have_code {
                    Ok(binding)
                } else {
                    Err(unsupported(
                        at,
                        FaultUnit::Usc,
                        "a pipeline whose control words end with no Shader word",
                    ))
                };
            }
            UscWord::Preshader(w) => {
                if !have_code {
                    return Err(unsupported(
                        at,
                        FaultUnit::Usc,
                        "a pipeline whose control words end with a preshader and no Shader word",
                    ));
                }
                run_preshader(
                    vm,
                    usc_exec_base.wrapping_add(w.code),
                    &mut binding,
                    watchdog,
                    (samplers.heap, helper),
                )?;
                return Ok(binding);
            }
        }
        at = at.wrapping_add(item.len() as u64);
    }
    Err(unsupported(
        at,
        FaultUnit::Usc,
        format_args!(
            "a pipeline of more than {MAX_CONTROL_WORDS} control words (from {pipeline:#x})"
        ),
    ))
}

/// The addresses of the texture descriptors the Texture words of the
/// pipeline at `pipeline` bind, read without binding it (no uniforms
/// loaded, no preshader run): what a render pass checks its programs
/// sample before it runs them.
pub fn texture_descriptor_addresses(
    vm: &GpuVm<'_>,
    pipeline: u64,
) -> Result<Vec<u64>, EngineResult> {
    let mut addresses = Vec::new();
    let mut at = pipeline;
    let mut item = Vec::new();
    for _ in 0..MAX_CONTROL_WORDS {
        let word: UscWord = read_item(vm, at, FaultUnit::Usc, &mut item)?;
        match word {
            UscWord::Texture(w) => {
                addresses.extend((0..u64::from(w.count)).map(|i| w.buffer.wrapping_add(24 * i)))
            }
            UscWord::NoPreshader(_) | UscWord::Preshader(_) => break,
            _ => {}
        }
        at = at.wrapping_add(item.len() as u64);
    }
    Ok(addresses)
}

/// What a stage's samplers come from, besides its Sampler words: the
/// command's sampler heap and the stage word's declared sampler states.
#[derive(Debug, Clone, Copy)]
pub struct StageSamplers {
    /// The sampler heap (address, samplers), if the command has one.
    pub heap: Option<(u64, u32)>,
    /// The stage's declared sampler-state count.
    pub states: SamplerStates,
}

impl StageSamplers {
    /// No heap, compact states (tile programs and tests).
    pub const NONE: StageSamplers = StageSamplers {
        heap: None,
        states: SamplerStates::None,
    };
}

/// A preshader reaches device memory, the uniform registers, the texture
/// unit (Mesa's preambles fetch constants such as a clear colour with
/// `texture_load`) and the state registers it binds descriptors to
/// (`tex_state_store`, `sampler_state_store`), which the shader then uses
/// as if a Texture or Sampler word had bound them.
struct PreshaderIo<'a> {
    /// The preshader's code address (where a bad binding is reported).
    code: u64,
    /// The pipeline's bindings, then the preshader's own (from `own`).
    textures: Vec<StateBinding>,
    samplers: Vec<StateBinding>,
    /// Where the preshader's own bindings start in each list.
    own: (usize, usize),
    vm: GpuVm<'a>,
    sampler_heap: Option<(u64, u32)>,
    sampler_stride_bytes: u64,
}

impl ShaderIo for PreshaderIo<'_> {
    fn texture(
        &mut self,
        requests: &[Option<TextureRequest>; LANES],
        texels: &mut [[u32; 4]; LANES],
    ) -> Result<(), IoError> {
        TextureUnit {
            vm: self.vm.clone(),
            textures: &self.textures,
            samplers: &self.samplers,
            sampler_heap: self.sampler_heap,
            sampler_stride_bytes: self.sampler_stride_bytes,
            decoded: None,
        }
        .serve(requests, texels)
    }

    fn state_store(
        &mut self,
        state: StateKind,
        index: u32,
        descriptor: u64,
    ) -> Result<(), IoError> {
        // The hardware copies the descriptor into the register; the
        // simulator reads it from the heap when the shader uses it, which
        // differs only if the heap changes while the work runs.
        let binding = StateBinding {
            start: index,
            count: 1,
            buffer: descriptor,
            word_address: self.code,
        };
        match state {
            StateKind::Texture => self.textures.push(binding),
            StateKind::Sampler => self.samplers.push(binding),
        }
        Ok(())
    }
}

/// The spill-size bucket a preshader's stack is asked for with. Mesa's
/// helper hands every SIMD-group the same blocks, sized for the larger of
/// the shader's and the preshader's scratch, and only counts requests by
/// bucket; which bucket the hardware names for a preshader is not public.
const PRESHADER_SPILL_BUCKET: u32 = 1;

/// Runs the preshader at `code` once, on one lane, over the pipeline's
/// uniform registers (as the Uniform words loaded them): what it stores
/// there (`uniform_store`) is what every invocation of the shader then
/// reads. It runs each time the pipeline is bound, which is once per
/// dispatch or draw and once per host thread for a fragment state; a
/// preshader is a function of memory and uniforms (Mesa's hoist only
/// uniform work into it), so running it again gives the same uniforms.
/// It counts against the command's watchdog like any program. When the
/// stage's helper hands preshaders stacks (Mesa's preamble scratch), it
/// runs on one, asked for with `PRESHADER_SPILL_BUCKET`.
fn run_preshader(
    vm: &GpuVm<'_>,
    code: u64,
    binding: &mut Binding,
    watchdog: &Watchdog<'_>,
    (sampler_heap, helper): (Option<(u64, u32)>, Option<&mut StageHelper>),
) -> Result<(), EngineResult> {
    let mut group = SimdGroup::new(code, 1);
    let mut memory = vm.clone();
    let mut io = PreshaderIo {
        code,
        textures: binding.textures.clone(),
        samplers: binding.samplers.clone(),
        own: (binding.textures.len(), binding.samplers.len()),
        vm: vm.clone(),
        sampler_heap,
        sampler_stride_bytes: binding.sampler_stride_bytes,
    };
    // Without a preshader stack, a helper with no program: it hands out
    // nothing, and the preshader runs as before.
    let mut no_helper = StageHelper::new(None, 0, 0);
    let (helper, bucket) = match helper.filter(|h| h.preshader_stack()) {
        Some(helper) => (helper, PRESHADER_SPILL_BUCKET),
        None => (&mut no_helper, 0),
    };
    helper.run_stage_group(
        &mut group,
        bucket,
        &mut ProgramCache::new(),
        &mut memory,
        &mut io,
        &mut binding.uniforms,
        watchdog,
        exec_fault,
        crate::probe::Stage::Preshader,
    )?;
    // Later bindings take precedence (the texture unit searches from the
    // last), so what the preshader stores overrides the control words.
    binding.textures.extend_from_slice(&io.textures[io.own.0..]);
    binding.samplers.extend_from_slice(&io.samplers[io.own.1..]);
    Ok(())
}

/// Copies `size_halfs` 16-bit halves from `buffer` into the uniform
/// registers from half `start_halfs` on (a Uniform or Uniform-high word
/// at `word_address`).
fn load_uniforms(
    vm: &GpuVm<'_>,
    binding: &mut Binding,
    word_address: u64,
    start_halfs: u64,
    size_halfs: u32,
    buffer: u64,
) -> Result<(), EngineResult> {
    let mut data = vec![0u8; 2 * size_halfs as usize];
    vm.read(buffer, &mut data)
        .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Usc))?;
    for (i, half) in data.chunks_exact(2).enumerate() {
        let index = start_halfs as usize + i;
        let Some(word) = binding.uniforms.get_mut(index / 2) else {
            return Err(unsupported(
                word_address,
                FaultUnit::Usc,
                format_args!(
                    "a uniform load of {size_halfs} halves from half {start_halfs}, past the {} uniform halves",
                    2 * UNIFORMS
                ),
            ));
        };
        let value = u32::from(u16::from_le_bytes([half[0], half[1]]));
        let shift = 16 * (index % 2);
        *word = (*word & !(0xFFFF << shift)) | (value << shift);
    }
    Ok(())
}
