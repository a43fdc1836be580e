//! Shader programs and the USC control words that launch them.
//!
//! A program is AGX machine code in the USC region. What a launch of it
//! sees is described by a run of USC control words (the "pipeline"): Uniform
//! words that copy memory into uniform registers, Texture and Sampler words
//! that bind descriptors to state registers, the Shared word (threadgroup
//! memory, or the tilebuffer layout for fragment-stage programs), the
//! Shader word with the code's address and the Registers word. Commands
//! name a pipeline by its 64-byte-aligned offset from `usc_exec_base`.

use agx_hw::formats::{
    SharedLayout, UscFragmentProperties, UscNoPreshader, UscPreshader, UscSampler, UscShader,
    UscShared, UscTexture, UscUniform,
};

use crate::alloc::Arena;
use crate::device::{Buffer, BufferDesc, Device, MemoryType, Region};
use crate::error::Error;

/// Uniform registers are loaded in runs of at most this many 16-bit
/// halves per Uniform word.
const HALFS_PER_UNIFORM_WORD: u32 = 64;

/// Assembled code in the USC region.
#[derive(Debug)]
pub struct Shader {
    buffer: Buffer,
    code_bytes: usize,
    registers: u32,
    source: String,
    pass_type: agx_hw::formats::PassType,
}

impl Shader {
    /// Assembles `source` (applegpu notation, `hw::isa::text`) at a fresh
    /// place in the USC region.
    pub fn new(device: &Device, source: &str) -> Result<Shader, Error> {
        // Assemble once to learn the size, place, assemble at the address
        // (branches are relative, so the bytes do not change).
        let probe = agx_hw::isa::text::assemble(source, device.usc_base())
            .map_err(|e| Error::Assembly(e.to_string()))?;
        let buffer = device.create_buffer(&BufferDesc {
            size_bytes: probe.len() as u64 + 16,
            memory: MemoryType::HostVisible,
            region: Region::Usc,
            gpu_write: false,
        })?;
        let code = agx_hw::isa::text::assemble(source, buffer.va())
            .map_err(|e| Error::Assembly(e.to_string()))?;
        buffer.write(0, &code)?;
        Ok(Shader {
            code_bytes: code.len(),
            pass_type: agx_hw::isa::fragment_pass_type(&code),
            registers: registers_used(source),
            source: source.to_owned(),
            buffer,
        })
    }

    /// The code's offset from `usc_exec_base`.
    pub fn code_offset(&self) -> u32 {
        self.buffer.usc_offset().unwrap_or(0)
    }

    /// The code's GPU address.
    pub fn va(&self) -> u64 {
        self.buffer.va()
    }

    /// Size of the code in bytes.
    pub fn code_bytes(&self) -> usize {
        self.code_bytes
    }

    /// General-purpose registers the code names (32-bit, rounded up to
    /// the hardware's granule of 8).
    pub fn registers(&self) -> u32 {
        self.registers
    }

    /// The pass type the code needs as a fragment shader: what the
    /// hidden-surface removal may do with it (`hw::isa::fragment_pass_type`).
    pub fn pass_type(&self) -> agx_hw::formats::PassType {
        self.pass_type
    }

    /// The source it was assembled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The code as disassembly.
    pub fn disassemble(&self) -> Result<String, Error> {
        let mut code = vec![0u8; self.code_bytes];
        self.buffer.read(0, &mut code)?;
        let mut out = String::new();
        let mut at = 0;
        while at < code.len() {
            let decoded = agx_hw::isa::decode(&code[at..])
                .map_err(|e| Error::Assembly(format!("at +{at:#x}: {e}")))?;
            out.push_str(&agx_hw::isa::text::print(
                &decoded.instr,
                self.va() + at as u64,
            ));
            out.push('\n');
            at += decoded.length_bytes;
        }
        Ok(out)
    }
}

/// The highest general register a program's text names (`r12`, `r12l`,
/// `r2_r3_r4_r5`), plus one, rounded up to a multiple of 8 (at least 8).
fn registers_used(source: &str) -> u32 {
    let mut highest = 0u32;
    for token in source.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        for part in token.split('_') {
            let digits = part
                .strip_prefix('r')
                .map(|rest| rest.trim_end_matches(['l', 'h']));
            if let Some(n) = digits.and_then(|d| d.parse::<u32>().ok()) {
                highest = highest.max(n.saturating_add(1));
            }
        }
    }
    highest.max(1).next_multiple_of(8).min(256)
}

/// Programs by source text, each assembled and placed once: the
/// generated tile programs of every render-pass configuration seen.
#[derive(Debug)]
pub struct ProgramCache {
    device: Device,
    programs: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Shader>>>,
}

impl ProgramCache {
    /// An empty cache.
    pub fn new(device: &Device) -> ProgramCache {
        ProgramCache {
            device: device.clone(),
            programs: std::sync::Mutex::default(),
        }
    }

    /// The program for `source`, assembled the first time it is asked for.
    pub fn get(&self, source: &str) -> Result<std::sync::Arc<Shader>, Error> {
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shader) = programs.get(source) {
            return Ok(std::sync::Arc::clone(shader));
        }
        let shader = std::sync::Arc::new(Shader::new(&self.device, source)?);
        programs.insert(source.to_owned(), std::sync::Arc::clone(&shader));
        Ok(shader)
    }

    /// Programs in the cache.
    pub fn len(&self) -> usize {
        self.programs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a launch of a program binds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Bindings {
    /// Uniform registers from memory: (first register in 16-bit halves,
    /// GPU address, size in halves).
    pub uniforms: Vec<(u32, u64, u32)>,
    /// Texture (or PBE) descriptors bound to texture state registers from
    /// 0: (count, GPU address of the 24-byte descriptors).
    pub textures: Option<(u32, u64)>,
    /// Samplers bound to sampler state registers from 0: (count, GPU
    /// address of the 8-byte descriptors).
    pub samplers: Option<(u32, u64)>,
    /// Threadgroup memory in bytes (compute).
    pub shared_bytes: u32,
    /// For fragment-stage programs: the tilebuffer bytes per sample; the
    /// Shared word then describes the tilebuffer and a
    /// FragmentProperties word follows.
    pub tilebuffer_sample_bytes: Option<u32>,
    /// The program reads varyings (fragment shaders).
    pub loads_varyings: bool,
    /// Bytes of stack each thread needs (`stack_load`/`stack_store`,
    /// kernels only); 0 for none. See [`crate::scratch`].
    pub stack_bytes: u32,
    /// A preshader (kernels only): the code offset of a program
    /// ([`Shader::code_offset`]) run once before the kernel, whose
    /// `uniform_store`s every thread then reads, and the bytes of stack it
    /// needs (0 for none: the command's helper then hands preshaders no
    /// stack).
    pub preshader: Option<(u32, u32)>,
}

impl Bindings {
    /// Binds `data` (32-bit words) as uniforms from register u0, placing
    /// it in `arena`.
    pub fn with_uniform_words(mut self, arena: &mut Arena, words: &[u32]) -> Result<Self, Error> {
        if !words.is_empty() {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let slice = arena.upload(&bytes, 16)?;
            self.uniforms.push((0, slice.va, 2 * words.len() as u32));
        }
        Ok(self)
    }
}

/// Encodes the USC control words launching `shader` with `bindings`.
pub fn pipeline_words(shader: &Shader, bindings: &Bindings) -> Result<Vec<u8>, Error> {
    let pack_err = |e: agx_hw::spec::PackError| Error::Unsupported(format!("USC word: {e}"));
    let mut words = Vec::new();
    for &(start_halfs, va, size_halfs) in &bindings.uniforms {
        let mut done = 0;
        while done < size_halfs {
            let n = (size_halfs - done).min(HALFS_PER_UNIFORM_WORD);
            words.extend(
                UscUniform {
                    start_halfs: start_halfs + done,
                    size_halfs: n,
                    buffer: va + 2 * u64::from(done),
                }
                .pack()
                .map_err(pack_err)?,
            );
            done += n;
        }
    }
    if let Some((count, buffer)) = bindings.textures {
        words.extend(
            UscTexture {
                start: 0,
                count,
                buffer,
            }
            .pack()
            .map_err(pack_err)?,
        );
    }
    if let Some((count, buffer)) = bindings.samplers {
        words.extend(
            UscSampler {
                start: 0,
                count,
                buffer,
            }
            .pack()
            .map_err(pack_err)?,
        );
    }
    let shared = match bindings.tilebuffer_sample_bytes {
        Some(sample_bytes) => UscShared {
            uses_shared_memory: true,
            layout: SharedLayout::Tile32x32,
            sample_count: 1,
            sample_stride_bytes: sample_bytes.next_multiple_of(8),
            bytes_per_threadgroup: 256,
        },
        None => UscShared {
            uses_shared_memory: bindings.shared_bytes > 0,
            bytes_per_threadgroup: bindings.shared_bytes.max(256).next_multiple_of(256),
            ..UscShared::default()
        },
    };
    words.extend(shared.pack().map_err(pack_err)?);
    words.extend(
        UscShader {
            code: u64::from(shader.code_offset()),
            loads_varyings: bindings.loads_varyings,
            ..UscShader::default()
        }
        .pack()
        .map_err(pack_err)?,
    );
    words.extend(
        crate::scratch::registers_word(shader.registers(), bindings.stack_bytes)
            .pack()
            .map_err(pack_err)?,
    );
    if bindings.tilebuffer_sample_bytes.is_some() {
        words.extend(UscFragmentProperties::default().pack().map_err(pack_err)?);
    }
    match bindings.preshader {
        Some((code, _)) => words.extend(
            UscPreshader {
                code: u64::from(code),
                ..UscPreshader::default()
            }
            .pack()
            .map_err(pack_err)?,
        ),
        None => words.extend(UscNoPreshader::default().pack().map_err(pack_err)?),
    }
    Ok(words)
}

/// Places `shader`'s launch words with `bindings` in `usc_arena` (a USC
/// region arena); returns the pipeline's offset from `usc_exec_base`.
pub fn place_pipeline(
    device: &Device,
    usc_arena: &mut Arena,
    shader: &Shader,
    bindings: &Bindings,
) -> Result<u32, Error> {
    let words = pipeline_words(shader, bindings)?;
    let slice = usc_arena.upload(&words, 64)?;
    u32::try_from(slice.va - device.usc_base())
        .map_err(|_| Error::Unsupported("pipeline outside the USC region".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_count_follows_the_highest_register_named() {
        assert_eq!(registers_used("mov r2, u0\nstop"), 8);
        assert_eq!(registers_used("st_tile r10_r11_r12_r13, u8norm"), 16);
        assert_eq!(registers_used("mov r31l, 0"), 32);
        assert_eq!(registers_used("stop"), 8);
    }
}
