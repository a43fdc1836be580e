//! Special registers (`get_sr`): lane and thread indices, and the values
//! a dispatch provides per lane.

use agx_hw::isa::Op;

use super::{lanes, Env, ExecError, Flow, Operands, SimdGroup, LANES};

impl SimdGroup {
    /// Executes `get_sr`.
    #[inline(always)]
    pub(super) fn special(
        &mut self,
        o: &Operands<'_>,
        _env: &mut Env<'_>,
    ) -> Result<Flow, ExecError> {
        let pc = o.pc;
        let exec = o.exec;
        match o.ins.op {
            Op::GetSr => {
                let d = o.dst(0)?.reg;
                let sr = o.int(1)? as u32;
                let mut values = [0u64; LANES];
                match self.special.get(sr).filter(|_| !from_lane_and_mask(sr)) {
                    // A register the dispatch set: its lanes as they are.
                    Some(set) => {
                        for lane in lanes(exec) {
                            values[lane] = u64::from(set[lane]);
                        }
                    }
                    None => {
                        for lane in lanes(exec) {
                            values[lane] = u64::from(self.special_register(sr, lane, exec, pc)?);
                        }
                    }
                }
                self.write_lanes(d, exec, &values);
            }
            _ => return Err(o.misrouted()),
        }
        Ok(Flow::Next)
    }

    /// Special register `sr`'s value in `lane`: what the dispatch set, or
    /// what the lane and the execution mask give ([`from_lane_and_mask`]).
    pub(super) fn special_register(
        &self,
        sr: u32,
        lane: usize,
        exec: u32,
        pc: u64,
    ) -> Result<u32, ExecError> {
        let below = (1u32 << lane) - 1;
        Ok(match sr {
            52 => lane as u32,
            56 => (exec & below & !((1 << (lane & !3)) - 1)).count_ones(),
            57 => (exec >> (lane & !3) & 0xF).count_ones(),
            58 => (exec & below).count_ones(),
            59 => exec.count_ones(),
            // A fragment program sets it per lane (0 for helper lanes and
            // demoted ones); every thread of other stages is active.
            63 => self.special.get(63).map_or(1, |values| values[lane]),
            _ => match self.special.get(sr) {
                Some(values) => values[lane],
                None => return Err(ExecError::SpecialRegister { pc, sr }),
            },
        })
    }
}

/// Whether `special_register` works special register `sr` out from the
/// lane and the execution mask (the lane's index, the quad's and the
/// group's active counts), whatever the dispatch set.
fn from_lane_and_mask(sr: u32) -> bool {
    matches!(sr, 52 | 56..=59)
}
