//! The texture and image instructions: sampling and texel loads through
//! the texture unit, image writes, and the pixel back end's block
//! stores of the tilebuffer.

use agx_hw::isa::{Op, Operand, RegRun, Size, Value};

use super::{lanes, unsupported, Env, ExecError, Flow, Operands, SimdGroup, GPRS, LANES, UNIFORMS};
use crate::usc::float::half_to_f32;
use crate::usc::io::{
    BlockStore, ImageWrite, LodArgument, TexelLoads, TextureHandle, TextureRequest, TextureSamples,
};
use crate::usc::trace::LaneAccess;

impl SimdGroup {
    /// Executes a texture or image instruction.
    #[inline(always)]
    pub(super) fn texture_op(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let pc = o.pc;
        let exec = o.exec;
        match o.ins.op {
            Op::TextureSample | Op::TextureLoad => self.texture(o, env)?,
            Op::ImageWrite if o.int(8)? != 1 => {
                return Err(unsupported(
                    pc,
                    "image_write with bit 23 clear (Mesa always sets it; not modelled)",
                ))
            }
            Op::ImageWrite => {
                let data = o.run(0)?;
                let coords = o.run(1)?;
                let lod = o.value(2)?;
                let base = o.value(3)?;
                let handle = o.value(4)?;
                let dim = o.int(5)? as u32;
                let first = exec.trailing_zeros() as usize;
                let traced = self.traced_in(exec);
                for lane in lanes(exec) {
                    let request = ImageWrite {
                        first_of_instruction: lane == first,
                        texture: self.texture_handle(&handle, &base, lane, env.uniforms),
                        dim,
                        coords: self.read_run(&coords, lane),
                        lod: self.lane_value(&lod, lane, env.uniforms) as u32,
                        values: self.read_run(&RegRun { count: 4, ..data }, lane),
                        half: data.first.size == Size::S16,
                    };
                    if traced == Some(lane) {
                        self.trace_access(LaneAccess {
                            kind: "image write",
                            address: None,
                            size_bytes: 0,
                            detail: format!("{request:?}"),
                        });
                    }
                    env.io
                        .image_write(lane, &request)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::ImageWriteBlock => {
                if let Some(lane) = lanes(exec).next() {
                    let offset = o.run(0)?;
                    let coords = o.run(1)?;
                    let base = o.value(3)?;
                    let handle = o.value(4)?;
                    let explicit_coords = o.int(8)? != 0;
                    // The layer, or x, y (and the layer): the run's
                    // length follows the explicit bit and the dimension.
                    let dim = o.int(5)? as u32;
                    let mut xyz = [0u32; 3];
                    xyz.copy_from_slice(&self.read_run(&coords, lane)[..3]);
                    let request = BlockStore {
                        texture: self.texture_handle(&handle, &base, lane, env.uniforms),
                        dim,
                        format: o.int(7)? as u32,
                        tilebuffer_offset_bytes: self.read(offset.first, lane) as u32,
                        coords: xyz,
                        explicit_coords,
                    };
                    env.io
                        .block_store(&request)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    pub(super) fn texture_handle(
        &self,
        handle: &Value,
        base: &Value,
        lane: usize,
        uniforms: &[u32; UNIFORMS],
    ) -> TextureHandle {
        match handle {
            Value::Imm(index) => TextureHandle::Index(*index as u32),
            Value::Reg(reg, _) if reg.size == Size::S32 => TextureHandle::Bindless {
                base: self.lane_value(base, lane, uniforms),
                offset: self.read(*reg, lane) as u32,
            },
            other => TextureHandle::Index(self.lane_value(other, lane, uniforms) as u32),
        }
    }

    pub(super) fn texture(&mut self, o: &Operands<'_>, env: &mut Env<'_>) -> Result<(), ExecError> {
        let (ins, exec, pc) = (o.ins, o.exec, o.pc);
        let ops = &ins.operands;
        let int = |i: usize| ins.int(i).unwrap_or(0);
        let (
            Some(Operand::Regs(data)),
            Some(Operand::Value(base)),
            Some(Operand::Value(handle)),
            Some(Operand::Value(sampler)),
            Some(Operand::Regs(coords)),
            Some(lod_operand),
            Some(Operand::Regs(extra)),
        ) = (
            ops.get(6),
            ops.get(7),
            ops.get(8),
            ops.get(9),
            ops.get(11),
            ops.get(13),
            ops.get(15),
        )
        else {
            return Err(unsupported(pc, "malformed texture instruction"));
        };
        let shadow = int(0) != 0;
        let has_offset = int(14) != 0;
        // Mesa's gather field (bits 87-89: 1, 3, 5, 7 for r, g, b, a) is
        // bits 86-90 here: 2, 6, 10, 14. Bit 86 (applegpu's
        // `gather_depth` with gather_r) is not understood.
        let gather = match int(3) {
            0 => None,
            g @ (2 | 6 | 10 | 14) => Some((g >> 2) as u8),
            g => return Err(unsupported(pc, format!("gather mode {g:#b}"))),
        };
        let sparse = int(5) & 2 != 0;
        if sparse && usize::from(data.reg(u16::from(data.count)).half / 2) >= GPRS {
            return Err(unsupported(pc, "a residency code past the last register"));
        }
        let mask = int(4) as u8;
        let dim = int(10) as u32;
        let lod_mode = int(12);
        let load = ins.op == Op::TextureLoad;
        // 16-bit coordinate registers (bit 47) are integers, zero-extended,
        // for loads (Mesa's tile reload programs use them). Whether a
        // sample reads them as fp16 is not known: refused.
        if coords.first.size == Size::S16 && !load {
            return Err(unsupported(pc, "16-bit sample coordinates"));
        }
        // Coordinates of every present lane, for quad derivatives, read
        // register by register.
        let all_coords = self.read_run_lanes(coords, self.present);
        let derivative = |lane: usize, neighbour: usize| -> [f32; 3] {
            let (hi, lo) = (all_coords[lane | neighbour], all_coords[lane & !neighbour]);
            [0, 1, 2].map(|k| f32::from_bits(hi[k]) - f32::from_bits(lo[k]))
        };
        let query_lod = ins.has_modifier("query_lod");
        // A handle or sampler the same in every lane (an immediate or a
        // uniform) is read once.
        let lane_invariant = |v: &Value| matches!(v, Value::Imm(_) | Value::Uniform(_));
        let first = exec.trailing_zeros() as usize % LANES;
        let same_texture = (lane_invariant(handle) && lane_invariant(base))
            .then(|| self.texture_handle(handle, base, first, env.uniforms));
        let same_sampler =
            lane_invariant(sampler).then(|| self.lane_value(sampler, first, env.uniforms) as u32);
        let half = data.first.size == Size::S16;
        let packed_offsets = |s: &SimdGroup, lane: usize| -> [i32; 3] {
            // Four signed bits per axis, after the compare reference when
            // there is one.
            if has_offset {
                let packed = s.read(extra.reg(u16::from(shadow)), lane) as u32;
                [0, 4, 8].map(|shift| ((packed >> shift) << 28) as i32 >> 28)
            } else {
                [0; 3]
            }
        };
        let mut offsets = [[0i32; 3]; LANES];
        if has_offset {
            for lane in lanes(exec) {
                offsets[lane] = packed_offsets(self, lane);
            }
        }
        // A load of one texture at explicit levels, without a gather or a
        // LOD query (tile reloads, `texelFetch`): served for the
        // SIMD-group at once.
        if let (true, None, false, Some(texture), 0 | 2 | 6) =
            (load, gather, query_lod, same_texture, lod_mode)
        {
            let mut levels = [0u32; LANES];
            // A load's level is the low 16 bits of its register.
            if let (2 | 6, Operand::Value(v)) = (lod_mode, lod_operand) {
                let (raw, _) = self.gather_raw(v, env.uniforms);
                for lane in lanes(exec) {
                    levels[lane] = u32::from(raw[lane] as u16);
                }
            }
            if exec == 0 {
                return Ok(());
            }
            let loads = TexelLoads {
                texture,
                dim,
                lanes: exec,
                coords: &all_coords,
                levels: &levels,
                offsets: &offsets,
                mask,
                half,
            };
            let mut texels = [[0u32; 4]; LANES];
            env.io
                .texel_loads(&loads, &mut texels)
                .map_err(|error| ExecError::Io { pc, error })?;
            let traced = self.traced_in(exec).map(|lane| {
                let request = TextureRequest {
                    sampler: same_sampler
                        .unwrap_or_else(|| self.lane_value(sampler, lane, env.uniforms) as u32),
                    compare: shadow.then(|| f32::from_bits(self.read(extra.first, lane) as u32)),
                    ..loads.request(lane)
                };
                (lane, request)
            });
            self.texture_results(data, exec, mask, sparse, &texels, traced);
            return Ok(());
        }
        // A sample of one texture through one sampler at the level of
        // detail the derivatives give (a plain `texture()`): served for the
        // SIMD-group at once.
        if let (false, None, false, Some(texture), Some(sampler), false, 0) = (
            load,
            gather,
            query_lod,
            same_texture,
            same_sampler,
            shadow,
            lod_mode,
        ) {
            if exec == 0 {
                return Ok(());
            }
            let samples = TextureSamples {
                texture,
                sampler,
                dim,
                lanes: exec,
                coords: &all_coords,
                offsets: &offsets,
                mask,
                half,
            };
            let mut texels = [[0u32; 4]; LANES];
            env.io
                .texture_samples(&samples, &mut texels)
                .map_err(|error| ExecError::Io { pc, error })?;
            let traced = self
                .traced_in(exec)
                .map(|lane| (lane, samples.request(lane)));
            self.texture_results(data, exec, mask, sparse, &texels, traced);
            return Ok(());
        }
        let mut requests = [None; LANES];
        for lane in lanes(exec) {
            let scalar = |s: &SimdGroup| -> f32 {
                match lod_operand {
                    Operand::Value(v) => {
                        let bits = s.lane_value(v, lane, env.uniforms);
                        if load {
                            bits as u16 as f32
                        } else {
                            half_to_f32(bits)
                        }
                    }
                    _ => 0.0,
                }
            };
            let mut min_lod = None;
            let lod = match lod_mode {
                0 if load => LodArgument::Explicit(0.0),
                0 | 1 | 5 => LodArgument::Auto {
                    ddx: derivative(lane, 1),
                    ddy: derivative(lane, 2),
                    bias: if lod_mode == 0 { 0.0 } else { scalar(self) },
                },
                2 | 6 => LodArgument::Explicit(scalar(self)),
                // One word: the bias in the low half, the minimum in the
                // high half, both fp16 (Mesa's lod_bias_min_agx).
                9 | 13 => {
                    let Operand::Value(v) = lod_operand else {
                        return Err(unsupported(pc, "malformed bias and minimum"));
                    };
                    let word = self.lane_value(v, lane, env.uniforms);
                    min_lod = Some(half_to_f32(word >> 16));
                    LodArgument::Auto {
                        ddx: derivative(lane, 1),
                        ddy: derivative(lane, 2),
                        bias: half_to_f32(word),
                    }
                }
                4 | 12 => {
                    let Operand::Regs(grads) = lod_operand else {
                        return Err(unsupported(pc, "malformed gradients"));
                    };
                    // Per axis, d/dx then d/dy (Mesa's collect in
                    // agx_emit_tex: ddx.x, ddy.x, ddx.y, ddy.y, ...).
                    let axes = usize::from(grads.count / 2);
                    let mut ddx = [0f32; 3];
                    let mut ddy = [0f32; 3];
                    for k in 0..axes.min(3) {
                        let read = |i: usize| self.read(grads.reg(i as u16), lane) as u32;
                        ddx[k] = f32::from_bits(read(2 * k));
                        ddy[k] = f32::from_bits(read(2 * k + 1));
                    }
                    // The minimum follows the gradients, fp16 in the low
                    // half of its register.
                    if lod_mode == 12 {
                        let last = self.read(grads.reg(2 * axes as u16), lane);
                        min_lod = Some(half_to_f32(last));
                    }
                    LodArgument::Gradient { ddx, ddy }
                }
                m => return Err(unsupported(pc, format!("LOD mode {m}"))),
            };
            requests[lane] = Some(TextureRequest {
                load,
                texture: same_texture
                    .unwrap_or_else(|| self.texture_handle(handle, base, lane, env.uniforms)),
                sampler: same_sampler
                    .unwrap_or_else(|| self.lane_value(sampler, lane, env.uniforms) as u32),
                dim,
                coords: all_coords[lane],
                lod,
                compare: shadow.then(|| f32::from_bits(self.read(extra.first, lane) as u32)),
                mask,
                half,
                offset_texels: offsets[lane],
                gather,
                min_lod,
                query_lod,
            });
        }
        // No executing lane, no request: the texture unit is not asked
        // (a stage without one runs code that branches around its
        // samples).
        if exec == 0 {
            return Ok(());
        }
        let mut texels = [[0u32; 4]; LANES];
        env.io
            .texture(&requests, &mut texels)
            .map_err(|error| ExecError::Io { pc, error })?;
        let traced = self
            .traced_in(exec)
            .and_then(|lane| Some((lane, requests[lane]?)));
        self.texture_results(data, exec, mask, sparse, &texels, traced);
        Ok(())
    }

    /// Writes a texture instruction's results: the components the mask
    /// names into consecutive registers from `data`, a register's lanes at
    /// a time, then the residency code when `sparse`; traces the traced
    /// lane's request.
    fn texture_results(
        &mut self,
        data: &RegRun,
        exec: u32,
        mask: u8,
        sparse: bool,
        texels: &[[u32; 4]; LANES],
        traced: Option<(usize, TextureRequest)>,
    ) {
        if let Some((lane, request)) = traced {
            self.trace_access(LaneAccess {
                kind: if request.load {
                    "texture load"
                } else {
                    "texture sample"
                },
                address: None,
                size_bytes: 0,
                detail: format!(
                    "{request:?}: texel [{}]",
                    texels[lane].map(|t| format!("{t:#x}")).join(", ")
                ),
            });
        }
        let mut position = 0;
        for c in (0..4).filter(|c| mask & (1 << c) != 0) {
            self.write_lanes_of(data.reg(position), exec, |lane| texels[lane][c]);
            position += 1;
        }
        // The residency code follows the texel: 0, resident (Mesa's
        // AGX_RESIDENT); every texture here is resident.
        if sparse {
            self.write_lanes(data.reg(position), exec, &[0; LANES]);
        }
    }
}
