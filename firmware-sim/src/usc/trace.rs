//! One lane of a SIMD-group recorded instruction by instruction, for the
//! debugger (`agx-debug trace`).
//!
//! The hardware cannot be single-stepped; the interpreter can. A group
//! that carries a [`LaneTrace`] runs every instruction in the interpreter
//! (never in compiled blocks) and records, for its traced lane, what each
//! instruction executed: where, its disassembly, the execution mask, and
//! the value of every register and uniform it names before and after,
//! and the memory and units the lane reached (device loads, stores and
//! atomics by address; texture requests with the texels they returned;
//! image writes).
//! These are the values the interpreter computed, read from the register
//! file around the instruction, not worked out again. A group without a
//! trace records nothing and pays one test of an `Option` per
//! interpreted instruction.

use agx_hw::isa::{Instr, Operand, Reg, Size, Value};

use super::exec::{SimdGroup, GPRS, LANES, UNIFORMS};

/// Steps one trace keeps; a lane that runs longer is cut off there (its
/// [`LaneTrace::steps_dropped`] counts what was not kept).
pub const MAX_TRACE_STEPS: usize = 1 << 20;

/// A register or uniform an instruction names, seen from the traced lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedValue {
    /// As the disassembly names it (`r3`, `r0l`, `u4`).
    pub name: String,
    /// Its value before the instruction ran.
    pub before: u64,
    /// Its value after.
    pub after: u64,
    /// Whether the instruction names it as a destination (an ALU
    /// destination, or a register run it wrote: a load's data).
    pub destination: bool,
}

/// Memory or a fixed-function unit, reached by the traced lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneAccess {
    /// What kind of access (`load`, `store`, `atomic`, `texture load`,
    /// `texture sample`, `image write`).
    pub kind: &'static str,
    /// The GPU virtual address, for memory.
    pub address: Option<u64>,
    /// Bytes at it.
    pub size_bytes: u32,
    /// For the texture unit, the request and the texel it returned; for
    /// an atomic, the operation and the value it found.
    pub detail: String,
}

/// One instruction as the traced lane's SIMD-group executed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// Its address.
    pub pc: u64,
    /// Its disassembly.
    pub text: String,
    /// The execution mask it ran with (bit i: lane i).
    pub exec_mask: u32,
    /// Whether the traced lane was in that mask (a lane out of it runs
    /// nothing: its registers do not change, whatever the others do).
    pub active: bool,
    /// The registers and uniforms it names, in operand order.
    pub values: Vec<NamedValue>,
    /// The memory and units the lane reached, in order.
    pub accesses: Vec<LaneAccess>,
    /// The error it stopped with, if it faulted.
    pub error: Option<String>,
}

/// The record of one lane, filled in as its group runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneTrace {
    /// The lane traced.
    pub lane: usize,
    /// What it executed, in order.
    pub steps: Vec<TraceStep>,
    /// Steps executed past [`MAX_TRACE_STEPS`] and not kept.
    pub steps_dropped: u64,
    /// The accesses of the instruction running.
    pending: Vec<LaneAccess>,
}

impl LaneTrace {
    /// An empty record of `lane`.
    pub fn new(lane: usize) -> LaneTrace {
        LaneTrace {
            lane,
            steps: Vec::new(),
            steps_dropped: 0,
            pending: Vec::new(),
        }
    }
}

/// Instructions each lane of a SIMD-group executed (while it was in the
/// execution mask): what the debugger's maps count. A group counting
/// them runs in the interpreter, as a traced one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneCounts {
    /// Per lane.
    pub instructions: [u64; LANES],
}

impl Default for LaneCounts {
    fn default() -> LaneCounts {
        LaneCounts {
            instructions: [0; LANES],
        }
    }
}

/// A place an operand names, in the traced lane.
#[derive(Debug, Clone, Copy)]
enum Place {
    Register(Reg),
    Uniform { index: usize, size: Size },
}

/// The places `instr` names, each with whether it is a destination.
fn places(instr: &Instr) -> Vec<(Place, bool)> {
    let mut out = Vec::new();
    let value = |v: &Value, out: &mut Vec<(Place, bool)>| match v {
        Value::Reg(reg, _) => out.push((Place::Register(*reg), false)),
        Value::Pair(reg, _) => {
            out.push((Place::Register(*reg), false));
            out.push((
                Place::Register(Reg {
                    half: reg.half + reg.size.halves(),
                    size: reg.size,
                }),
                false,
            ));
        }
        Value::Uniform(u) => out.push((
            Place::Uniform {
                index: usize::from(u.half),
                size: u.size,
            },
            false,
        )),
        _ => {}
    };
    for operand in &instr.operands {
        match operand {
            Operand::Dst(d) => out.push((Place::Register(d.reg), true)),
            Operand::Src(s) => value(&s.value, &mut out),
            Operand::Value(v) => value(v, &mut out),
            Operand::Regs(run) => {
                let step = run.first.size.halves();
                for i in 0..u16::from(run.count.max(1)) {
                    out.push((
                        Place::Register(Reg {
                            half: run.first.half + i * step,
                            size: run.first.size,
                        }),
                        false,
                    ));
                }
            }
            Operand::Uniforms(run) => {
                for i in 0..u16::from(run.count.max(1)) {
                    out.push((
                        Place::Uniform {
                            index: usize::from(run.first.half + 2 * i),
                            size: Size::S32,
                        },
                        false,
                    ));
                }
            }
            Operand::Int(_) => {}
        }
    }
    out
}

/// A uniform's value (`half` counts 16-bit halves), or `None` past the
/// file.
fn uniform_value(uniforms: &[u32; UNIFORMS], half: usize, size: Size) -> Option<u64> {
    let word = |i: usize| uniforms.get(i).copied().map(u64::from);
    Some(match size {
        Size::S16 => (word(half / 2)? >> (16 * (half % 2))) & 0xFFFF,
        Size::S32 => word(half / 2)?,
        Size::S64 => word(half / 2)? | word(half / 2 + 1)? << 32,
    })
}

fn name(place: Place) -> String {
    match place {
        Place::Register(reg) => reg.to_string(),
        Place::Uniform { index, size } => agx_hw::isa::Uniform {
            half: index as u16,
            size,
        }
        .to_string(),
    }
}

/// What an instruction names, read before it runs.
pub(super) struct Before {
    places: Vec<(Place, bool)>,
    values: Vec<Option<u64>>,
    exec_mask: u32,
}

impl SimdGroup {
    /// The traced lane, if `exec` runs it.
    #[inline]
    pub(super) fn traced_in(&self, exec: u32) -> Option<usize> {
        self.trace
            .as_ref()
            .map(|t| t.lane)
            .filter(|&lane| exec & (1 << lane) != 0)
    }

    /// Counts an instruction run with `exec` for each lane in it, if the
    /// group counts.
    pub(super) fn count_instruction(&mut self, exec: u32) {
        if let Some(counts) = self.counts.as_mut() {
            let mut lanes = exec;
            while lanes != 0 {
                counts.instructions[lanes.trailing_zeros() as usize] += 1;
                lanes &= lanes - 1;
            }
        }
    }

    /// Records an access of the traced lane for the running instruction.
    pub(super) fn trace_access(&mut self, access: LaneAccess) {
        if let Some(trace) = self.trace.as_mut() {
            trace.pending.push(access);
        }
    }

    fn place_value(&self, place: Place, lane: usize, uniforms: &[u32; UNIFORMS]) -> Option<u64> {
        match place {
            Place::Register(reg) => {
                let cells = if reg.size == Size::S64 { 2 } else { 1 };
                (usize::from(reg.half / 2) + cells <= GPRS).then(|| self.read(reg, lane))
            }
            Place::Uniform { index, size } => uniform_value(uniforms, index, size),
        }
    }

    /// The traced lane's view of `instr` before it runs.
    pub(super) fn trace_before(&self, instr: &Instr, uniforms: &[u32; UNIFORMS]) -> Option<Before> {
        let lane = self.trace.as_ref()?.lane;
        let places = places(instr);
        let values = places
            .iter()
            .map(|&(place, _)| self.place_value(place, lane, uniforms))
            .collect();
        Some(Before {
            places,
            values,
            exec_mask: self.exec_mask(),
        })
    }

    /// Records the step `before` began, now that it has run (or failed
    /// with `error`).
    pub(super) fn trace_after(
        &mut self,
        before: Before,
        instr: &Instr,
        pc: u64,
        uniforms: &[u32; UNIFORMS],
        error: Option<String>,
    ) {
        let Some(lane) = self.trace.as_ref().map(|t| t.lane) else {
            return;
        };
        let mut values = Vec::with_capacity(before.places.len());
        for (&(place, destination), before_value) in before.places.iter().zip(&before.values) {
            let (Some(before_value), Some(after)) =
                (*before_value, self.place_value(place, lane, uniforms))
            else {
                continue;
            };
            let destination = destination || after != before_value;
            let name = name(place);
            // A register named twice (a destination that is also a
            // source) is listed once.
            match values.iter_mut().find(|v: &&mut NamedValue| v.name == name) {
                Some(seen) => seen.destination |= destination,
                None => values.push(NamedValue {
                    name,
                    before: before_value,
                    after,
                    destination,
                }),
            }
        }
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        let step = TraceStep {
            pc,
            text: agx_hw::isa::text::print(instr, pc),
            exec_mask: before.exec_mask,
            active: before.exec_mask & (1 << lane) != 0,
            values,
            accesses: std::mem::take(&mut trace.pending),
            error,
        };
        if trace.steps.len() < MAX_TRACE_STEPS {
            trace.steps.push(step);
        } else {
            trace.steps_dropped += 1;
        }
    }
}
