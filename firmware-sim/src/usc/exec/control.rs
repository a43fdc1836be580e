//! Control flow: `stop`, `trap`, waits and barriers, jumps taken by the
//! whole SIMD-group, calls and returns, and the structured
//! `if`/`else`/`while`/`pop_exec` instructions that update each lane's
//! `r0l` nesting count and set the execution mask from it; the doorbell
//! a helper program rings to talk to the firmware.

use agx_hw::isa::{Op, Reg};

use super::{lanes, Env, ExecError, Flow, Operands, SimdGroup};

impl SimdGroup {
    /// Executes a control-flow instruction.
    #[inline(always)]
    pub(super) fn control(
        &mut self,
        o: &Operands<'_>,
        env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let op = o.ins.op;
        let pc = o.pc;
        let exec = o.exec;
        match op {
            // `stop` ends the SIMD-group when any lane runs it, and does
            // nothing when none does. Mesa emits NIR's halt as a stop in
            // a branch with no jump around it: libagx's abort after a
            // heap overflow sits in a branch no lane takes, in every
            // tessellation and geometry kernel's allocation, and those
            // kernels go on past it on the hardware. What a stop run by
            // some lanes of a divergent group does is not public: it ends
            // the group here, as a program's last stop does.
            Op::Stop => {
                if exec != 0 {
                    return Ok(Flow::Stop);
                }
            }
            Op::Trap => return Err(ExecError::Trap { pc }),
            Op::Wait | Op::MemoryBarrier | Op::WaitPix | Op::SignalPix | Op::NoVar => {}
            Op::ThreadgroupBarrier => return Ok(Flow::Barrier),
            // A helper program rings the firmware: the run ends with the
            // value, and the firmware's helper runner reads it.
            Op::Doorbell => return Ok(Flow::Doorbell(o.int(0)? as u8)),
            // The doorbell itself rings whatever the execution mask; Mesa
            // puts this jump before every doorbell, and its helper program
            // rings inside branches that leave no lane active, so the jump
            // skips the doorbell when no lane is active (an inference from
            // Mesa's code: nothing public documents the condition).
            Op::JmpIfSkippingDoorbell => {
                if exec == 0 {
                    return Ok(Flow::Jump(pc.wrapping_add(o.int(0)? as u64)));
                }
            }
            Op::JmpExecAny => {
                if exec != 0 {
                    return Ok(Flow::Jump(pc.wrapping_add(o.int(0)? as u64)));
                }
            }
            Op::JmpExecNone => {
                if exec == 0 {
                    return Ok(Flow::Jump(pc.wrapping_add(o.int(0)? as u64)));
                }
            }
            Op::Call => {
                for lane in lanes(exec) {
                    self.write(Reg::r(1), lane, pc.wrapping_add(6) & 0xFFFF_FFFF);
                }
                return Ok(Flow::Jump(pc.wrapping_add(o.int(0)? as u64)));
            }
            Op::CallReg | Op::Ret => {
                let target_reg = o.run(0)?.first;
                // The whole group follows one address: the first active
                // lane's, or the first present lane's if none is active.
                let source_lane = lanes(if exec != 0 { exec } else { self.present })
                    .next()
                    .unwrap_or(0);
                let target = self.read(target_reg, source_lane);
                if op == Op::CallReg {
                    for lane in lanes(exec) {
                        self.write(Reg::r(1), lane, pc.wrapping_add(2) & 0xFFFF_FFFF);
                    }
                }
                return Ok(Flow::Jump((pc & !0xFFFF_FFFF) | target));
            }
            Op::IfIcmp
            | Op::ElseIcmp
            | Op::WhileIcmp
            | Op::IfFcmp
            | Op::ElseFcmp
            | Op::WhileFcmp => {
                let code = o.int(1)? as u32;
                let (a, b) = (o.src(2)?, o.src(3)?);
                let n = o.int(4)? as u64;
                let float = matches!(op, Op::IfFcmp | Op::ElseFcmp | Op::WhileFcmp);
                let conditions =
                    self.exec_condition_mask(float, code, &a, &b, self.present, env.uniforms, pc)?;
                for lane in lanes(self.present) {
                    let v = self.read(Reg::l(0), lane);
                    let cond = conditions & (1 << lane) != 0;
                    let new = match op {
                        Op::IfIcmp | Op::IfFcmp => {
                            if v != 0 {
                                v + n
                            } else if cond {
                                0
                            } else {
                                1
                            }
                        }
                        Op::ElseIcmp | Op::ElseFcmp => match v {
                            0 => n,
                            1 => u64::from(!cond),
                            v => v,
                        },
                        _ => {
                            if v < n {
                                if cond {
                                    0
                                } else {
                                    n
                                }
                            } else {
                                v
                            }
                        }
                    };
                    self.write(Reg::l(0), lane, new);
                }
                self.exec_from_r0l();
            }
            Op::PopExec => {
                let n = o.int(1)? as u64;
                for lane in lanes(self.present) {
                    let v = self.read(Reg::l(0), lane);
                    self.write(Reg::l(0), lane, v.saturating_sub(n));
                }
                self.exec_from_r0l();
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }
}
