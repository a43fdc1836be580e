//! USC control words: how a pipeline sets up the shader core before its
//! program runs.
//!
//! A pipeline (a kernel, a vertex or fragment shader, a tile program) is a
//! list of control words in the USC region: Uniform and Uniform-high copy
//! memory into uniform registers, Texture and Sampler bind descriptor
//! arrays to state registers, Shared sizes threadgroup memory, Shader
//! names the code, Registers the register count, Fragment-properties the
//! fragment state; the list ends at No-preshader. Every word is read
//! through the command's VM, so a pipeline in unmapped memory faults
//! where the hardware would.

use agx_fwif::messages::FaultUnit;
use agx_hw::formats::{
    UscControl, UscFragmentProperties, UscRegisters, UscSampler, UscShader, UscShared, UscTexture,
    UscUniform, UscUniformHigh,
};

use crate::fault::{unsupported, EngineResult};
use crate::memory::{read_words, GpuVm};
use crate::usc::UNIFORMS;

/// The most control words a pipeline may have before its preshader word.
const MAX_CONTROL_WORDS: usize = 64;

/// Descriptors a Texture or Sampler word binds to state registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBinding {
    /// The first state register.
    pub start: u32,
    /// How many.
    pub count: u32,
    /// GPU address of the descriptor array.
    pub buffer: u64,
    /// Where the control word is (for faults).
    pub word_address: u64,
}

/// What a pipeline's control words set up.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Address of the program's first instruction.
    pub code: u64,
    /// Uniform registers.
    pub uniforms: Box<[u32; UNIFORMS]>,
    /// Threadgroup memory per threadgroup.
    pub shared_bytes: usize,
    /// Texture (or PBE) descriptors bound to texture state registers.
    pub textures: Vec<StateBinding>,
    /// Sampler descriptors bound to sampler state registers.
    pub samplers: Vec<StateBinding>,
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

/// Reads a pipeline's control words and sets up what they describe.
pub fn bind(vm: &GpuVm<'_>, pipeline: u64, usc_exec_base: u64) -> Result<Binding, EngineResult> {
    let mut binding = Binding {
        code: 0,
        uniforms: Box::new([0; UNIFORMS]),
        shared_bytes: 0,
        textures: Vec::new(),
        samplers: Vec::new(),
    };
    let mut have_code = false;
    let mut at = pipeline;
    for _ in 0..MAX_CONTROL_WORDS {
        let tag: [u8; 1] = read_words(vm, at)?;
        match UscControl::from_raw(u32::from(tag[0])) {
            UscControl::Uniform | UscControl::UniformHigh => {
                let bytes: [u8; 8] = read_words(vm, at)?;
                let (start_halfs, size_halfs, buffer) =
                    if UscControl::from_raw(u32::from(tag[0])) == UscControl::Uniform {
                        let w = UscUniform::unpack(&bytes).value;
                        (u64::from(w.start_halfs), u64::from(w.size_halfs), w.buffer)
                    } else {
                        let w = UscUniformHigh::unpack(&bytes).value;
                        (
                            256 + u64::from(w.start_halfs),
                            u64::from(w.size_halfs),
                            w.buffer,
                        )
                    };
                let mut data = vec![0u8; 2 * size_halfs as usize];
                vm.read(buffer, &mut data)
                    .map_err(|f| EngineResult::from_uat(&f, FaultUnit::Usc))?;
                for (i, half) in data.chunks_exact(2).enumerate() {
                    let index = start_halfs as usize + i;
                    let Some(word) = binding.uniforms.get_mut(index / 2) else {
                        return Err(unsupported(at, FaultUnit::Usc));
                    };
                    let value = u32::from(u16::from_le_bytes([half[0], half[1]]));
                    let shift = 16 * (index % 2);
                    *word = (*word & !(0xFFFF << shift)) | (value << shift);
                }
                at += 8;
            }
            UscControl::Shared => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let w = UscShared::unpack(&bytes).value;
                if w.uses_shared_memory {
                    binding.shared_bytes = w.bytes_per_threadgroup as usize;
                }
                at += 4;
            }
            UscControl::Shader => {
                let bytes: [u8; 6] = read_words(vm, at)?;
                let w = UscShader::unpack(&bytes).value;
                binding.code = usc_exec_base.wrapping_add(w.code);
                have_code = true;
                at += 6;
            }
            UscControl::Registers => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let _ = UscRegisters::unpack(&bytes).value;
                at += 4;
            }
            UscControl::Texture | UscControl::Sampler => {
                let bytes: [u8; 8] = read_words(vm, at)?;
                let state = if UscControl::from_raw(u32::from(tag[0])) == UscControl::Texture {
                    let w = UscTexture::unpack(&bytes).value;
                    (w.start, w.count, w.buffer, &mut binding.textures)
                } else {
                    let w = UscSampler::unpack(&bytes).value;
                    (w.start, w.count, w.buffer, &mut binding.samplers)
                };
                state.3.push(StateBinding {
                    start: state.0,
                    count: state.1,
                    buffer: state.2,
                    word_address: at,
                });
                at += 8;
            }
            UscControl::FragmentProperties => {
                let bytes: [u8; 4] = read_words(vm, at)?;
                let _ = UscFragmentProperties::unpack(&bytes).value;
                at += 4;
            }
            UscControl::NoPreshader => {
                return if have_code {
                    Ok(binding)
                } else {
                    Err(unsupported(at, FaultUnit::Usc))
                };
            }
            // A preshader runs once per launch before the kernel: not yet.
            UscControl::Preshader | UscControl::Unknown(_) => {
                return Err(unsupported(at, FaultUnit::Usc))
            }
        }
    }
    Err(unsupported(at, FaultUnit::Usc))
}
