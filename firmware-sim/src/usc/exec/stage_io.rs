//! I/O with the stage's fixed-function units: tilebuffer loads and
//! stores, varying interpolation and coefficient loads, vertex outputs,
//! sample masks and depth/stencil emission.

use agx_hw::isa::table::sr;
use agx_hw::isa::{Op, Reg, Size, Value};

use super::{lanes, unsupported, Env, ExecError, Flow, Operands, SimdGroup};
use crate::usc::io::{Interpolation, TileAccess};
use crate::usc::LANES;

impl SimdGroup {
    /// The coefficient register an `iter`, `iterproj` or `ldcf` names: its
    /// field, or with bit 23 set the lane's value of the 16-bit register
    /// the field names (Mesa's register-indexed varyings: `agx_pack.c`
    /// sets the bit for a register source, as a dynamically indexed
    /// varying array compiles).
    fn coefficient_index(&self, field: u32, in_register: bool, lane: usize) -> u32 {
        if in_register {
            self.read(
                Reg {
                    half: field as u16,
                    size: Size::S16,
                },
                lane,
            ) as u32
        } else {
            field
        }
    }

    /// Executes an instruction that talks to the stage's fixed-function units.
    #[inline(always)]
    pub(super) fn stage_io(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let op = o.ins.op;
        let pc = o.pc;
        let exec = o.exec;
        match op {
            Op::LdTile | Op::StTile => {
                let data = o.run(0)?;
                let sample_mask = o.value(5)?;
                let coords = o.run(6)?;
                let explicit = o.int(7)? != 0;
                // Decoded once for the lanes.
                let (format, offset_bytes, mask) =
                    (o.int(1)? as u32, o.int(4)? as u32, o.int(3)? as u8);
                // A store whose sample mask is the same in every lane (an
                // immediate or a uniform) goes to the tilebuffer at once.
                let same_mask = matches!(sample_mask, Value::Imm(_) | Value::Uniform(_));
                if op == Op::StTile && !explicit && same_mask && exec != 0 {
                    let first = exec.trailing_zeros() as usize;
                    let access = TileAccess {
                        format,
                        offset_bytes,
                        mask,
                        sample_mask: self.lane_value(&sample_mask, first, env.uniforms) as u32,
                        explicit: None,
                        half: data.first.size == Size::S16,
                    };
                    let values = self.read_run_lanes(&data, exec);
                    env.io
                        .tile_store_lanes(exec, &access, &values)
                        .map_err(|error| ExecError::Io { pc, error })?;
                    return Ok(Flow::Next);
                }
                for lane in lanes(exec) {
                    let xy = self.read(coords.first, lane);
                    let access = TileAccess {
                        format,
                        offset_bytes,
                        mask,
                        sample_mask: self.lane_value(&sample_mask, lane, env.uniforms) as u32,
                        explicit: explicit.then_some((xy as u16, (xy >> 16) as u16)),
                        half: data.first.size == Size::S16,
                    };
                    if op == Op::LdTile {
                        let values = env
                            .io
                            .tile_load(lane, &access)
                            .map_err(|error| ExecError::Io { pc, error })?;
                        self.write_run(&data, lane, &values);
                    } else {
                        let values = self.read_run(&data, lane);
                        env.io
                            .tile_store(lane, &access, values)
                            .map_err(|error| ExecError::Io { pc, error })?;
                    }
                }
            }
            Op::Iter | Op::Iterproj => {
                let data = o.run(0)?;
                let (perspective, tail) = if op == Op::Iterproj {
                    (Some(o.int(2)? as u32), 3)
                } else {
                    (None, 2)
                };
                let mode = o.int(tail)?;
                let sample = o.int(tail + 1)?;
                let cf_in_register = o.int(tail + 5)? != 0;
                let cf_field = o.int(1)? as u32;
                let count = usize::from(data.count);
                let shared = match mode {
                    _ if cf_in_register => None,
                    0 => Some(Interpolation::Center),
                    1 => Some(Interpolation::Sample(sample as u32)),
                    2 => Some(Interpolation::Centroid),
                    _ => None,
                };
                if let Some(interpolation) = shared {
                    // The same register and point rule in every lane: the
                    // lanes at once, each register written for the mask.
                    let mut values = [[0f32; LANES]; 4];
                    env.io
                        .interpolate_lanes(
                            exec,
                            cf_field,
                            count,
                            interpolation,
                            perspective,
                            &mut values,
                        )
                        .map_err(|error| ExecError::Io { pc, error })?;
                    for (i, component) in values.iter().enumerate().take(count.min(4)) {
                        self.write_floats(data.reg(i as u16), exec, component);
                    }
                    return Ok(Flow::Next);
                }
                for lane in lanes(exec) {
                    let cf = self.coefficient_index(cf_field, cf_in_register, lane);
                    let interpolation = match mode {
                        0 => Interpolation::Center,
                        1 => Interpolation::Sample(sample as u32),
                        2 => Interpolation::Centroid,
                        _ => Interpolation::Sample(self.read(
                            Reg {
                                half: sample as u16,
                                size: Size::S16,
                            },
                            lane,
                        ) as u32),
                    };
                    let values = env
                        .io
                        .interpolate(
                            lane,
                            cf,
                            usize::from(data.count),
                            interpolation,
                            perspective,
                        )
                        .map_err(|error| ExecError::Io { pc, error })?;
                    for (i, v) in values.iter().enumerate().take(usize::from(data.count)) {
                        self.write_float(data.reg(i as u16), lane, *v);
                    }
                }
            }
            Op::Ldcf => {
                let data = o.run(0)?;
                let cf_field = o.int(1)? as u32;
                let cf_in_register = o.int(2)? != 0;
                let channels = usize::from(data.count / 3);
                let mut planes = [[0f32; 3]; 4];
                for lane in lanes(exec) {
                    let cf = self.coefficient_index(cf_field, cf_in_register, lane);
                    env.io
                        .coefficients(lane, cf, channels, &mut planes)
                        .map_err(|error| ExecError::Io { pc, error })?;
                    // Coefficients are loaded as they are stored, not
                    // through the ALU: a flat integer varying's bits (a
                    // denormal, or a NaN, as floats) survive, as Mesa's
                    // flat-varying loads rely on.
                    for (i, v) in planes
                        .iter()
                        .flatten()
                        .enumerate()
                        .take(usize::from(data.count))
                    {
                        let reg = data.reg(i as u16);
                        if reg.size == Size::S32 {
                            self.write(reg, lane, u64::from(v.to_bits()));
                        } else {
                            self.write_float(reg, lane, *v);
                        }
                    }
                }
            }
            Op::StVar | Op::StVarFinal => {
                let data = o.run(1)?;
                let slot = o.value(2)?;
                for lane in lanes(exec) {
                    let slot = self.lane_value(&slot, lane, env.uniforms) as u32;
                    let v = self.read(data.first, lane) as u32;
                    env.io
                        .store_varying(lane, slot, v)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            Op::SampleMask => {
                let (which, coverage) = (o.value(0)?, o.value(1)?);
                for lane in lanes(exec) {
                    let w = self.lane_value(&which, lane, env.uniforms) as u32;
                    let c = self.lane_value(&coverage, lane, env.uniforms) as u32;
                    env.io
                        .sample_mask(lane, w, c)
                        .map_err(|error| ExecError::Io { pc, error })?;
                    // The coverage register follows: a sample killed here
                    // reads as uncovered from now on (Mesa reads it with
                    // get_sr_coverage, never hoisted, to mask its stores of
                    // spilled render targets after alpha-to-coverage and
                    // gl_SampleMask).
                    self.special.clear_bits(sr::COVERAGE_MASK, lane, w & !c);
                    // A lane left with no sample is demoted to a helper.
                    if self.special.lane(sr::COVERAGE_MASK, lane) == Some(0) {
                        self.special.clear_bits(sr::IS_ACTIVE_THREAD, lane, 1);
                    }
                }
            }
            Op::ZsEmit if o.int(3)? != 0 => {
                return Err(unsupported(
                    pc,
                    "zs_emit with bits 22-23 set (not modelled)",
                ))
            }
            Op::ZsEmit => {
                let which = o.value(0)?;
                let zs = o.int(1)?;
                let data = o.run(2)?;
                for lane in lanes(exec) {
                    let w = self.lane_value(&which, lane, env.uniforms) as u32;
                    let depth = (zs & 1 != 0).then(|| {
                        let lo = self.read(data.reg(0), lane);
                        let hi = self.read(data.reg(1), lane);
                        f32::from_bits((lo | hi << 16) as u32)
                    });
                    let stencil = (zs & 2 != 0)
                        .then(|| self.read(data.reg(if zs & 1 != 0 { 2 } else { 0 }), lane) as u16);
                    env.io
                        .depth_stencil(lane, w, depth, stencil)
                        .map_err(|error| ExecError::Io { pc, error })?;
                }
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }
}
