//! Shader-core interpreter throughput on an ALU-heavy program.
//!
//! The number reported as "elements" is SIMD-group instructions; each
//! executes for 32 lanes. Results are recorded in Documentation/isa.md.

use std::hint::black_box;

use agx_firmware_sim::usc::{
    AccessKind, Env, Exit, FaultReason, GpuMemory, MemoryFault, NoIo, ProgramCache, ShaderEngine,
    SimdGroup, UNIFORMS,
};
use agx_hw::isa::{text::assemble, Reg};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const CODE_BASE: u64 = 0x1000_0000;

/// A loop of dependent float and integer ALU work: 10 instructions per
/// iteration, `r1` iterations.
const ALU_LOOP: &str = "
    mov_imm r2, 0
    mov_imm r3, 1065353216
    mov_imm r4, 0
loop:
    fmadd32 r3, r3, 0.5, 1.0
    fmul32 r5, r3, r3
    fadd32 r6, r5, r3.neg
    iadd r4, r4, r2
    xor r7, r4, r2
    bfi r8, r7, r2, 3, mask 0xFF
    icmpsel ult, r9, r8, r7, r8, r7
    iadd r2, r2, 1
    while_icmp r0l, ult, r2, r1, 1
    jmp_exec_any loop
    pop_exec r0l, 1
    stop";

struct CodeMemory {
    code: Vec<u8>,
}

impl GpuMemory for CodeMemory {
    fn read(&self, address: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemoryFault> {
        let start = address.wrapping_sub(CODE_BASE) as usize;
        match self.code.get(start..start + buf.len()) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(MemoryFault {
                address,
                access,
                reason: FaultReason::Unmapped,
            }),
        }
    }

    fn write(&mut self, address: u64, _: &[u8]) -> Result<(), MemoryFault> {
        Err(MemoryFault {
            address,
            access: AccessKind::Write,
            reason: FaultReason::Permission,
        })
    }
}

fn alu_throughput(c: &mut Criterion) {
    let iterations = 256u64;
    let code = assemble(ALU_LOOP, CODE_BASE).expect("benchmark program assembles");
    let mut memory = CodeMemory { code };
    let mut uniforms = Box::new([0u32; UNIFORMS]);
    let instructions = 3 + iterations * 10 + 2;
    let mut group = c.benchmark_group("usc");
    group.throughput(Throughput::Elements(instructions));
    for (name, engine) in [
        ("alu_loop_simd_instructions", ShaderEngine::Interpreter),
        (
            "alu_loop_simd_instructions_compiled",
            ShaderEngine::Compiled,
        ),
    ] {
        let mut cache = ProgramCache::with_engine(engine);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut simd = SimdGroup::new(CODE_BASE, u32::MAX);
                for lane in 0..32 {
                    simd.write(Reg::r(1), lane, iterations);
                }
                let mut budget = u64::MAX;
                let mut env = Env {
                    memory: &mut memory,
                    io: &mut NoIo,
                    uniforms: &mut uniforms,
                    threadgroup: &mut [],
                };
                let exit = simd.run(&mut cache, &mut env, &mut budget);
                assert_eq!(exit, Ok(Exit::Stopped));
                assert_eq!(simd.executed_instructions, instructions);
                black_box(simd.read(Reg::r(9), 0))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, alu_throughput);
criterion_main!(benches);
