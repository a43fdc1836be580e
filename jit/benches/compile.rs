//! What compiling costs: making a compiler (one per program cache, so one
//! per host thread per command) and compiling a block of the shader-core
//! benchmark's ALU loop (8 instructions). Numbers are recorded in
//! Documentation/performance.md.

use std::hint::black_box;

use agx_hw::isa::{decode, text::assemble, Instr};
use agx_jit::{Compiler, Helpers};
use criterion::{criterion_group, criterion_main, Criterion};

/// The ALU loop's body (`firmware-sim/benches/usc.rs`).
const BLOCK: &str = "
    fmadd32 r3, r3, 0.5, 1.0
    fmul32 r5, r3, r3
    fadd32 r6, r5, r3.neg
    iadd r4, r4, r2
    xor r7, r4, r2
    bfi r8, r7, r2, 3, mask 0xFF
    icmpsel ult, r9, r8, r7, r8, r7
    iadd r2, r2, 1";

extern "C" fn fma(x: f32, y: f32, z: f32) -> f32 {
    x.mul_add(y, z)
}

extern "C" fn widen(_: u32) -> f32 {
    0.0
}

extern "C" fn narrow(_: f32) -> u32 {
    0
}

fn instructions() -> Vec<(Instr, bool)> {
    let code = assemble(BLOCK, 0).expect("the block assembles");
    let mut at = 0;
    let mut out = Vec::new();
    while at < code.len() {
        let decoded = decode(&code[at..]).expect("the block decodes");
        at += decoded.length_bytes;
        let saturate = decoded.instr.has_modifier("sat");
        out.push((decoded.instr, saturate));
    }
    out
}

extern "C" fn convert(_: u32, _: u64, _: u32, _: u32) -> u64 {
    0
}

extern "C" fn half(_: u32, _: f64, _: f64, _: f64, _: u32) -> u32 {
    0
}

extern "C" fn unary(_: u32, _: f32) -> f32 {
    0.0
}

fn compile(c: &mut Criterion) {
    let helpers = Helpers {
        fma_f32: fma,
        half_to_f32: widen,
        f32_to_half: narrow,
        convert,
        half_arithmetic: half,
        unary_f32: unary,
    };
    let block = instructions();
    let refs: Vec<(&Instr, bool)> = block.iter().map(|(i, s)| (i, *s)).collect();
    assert!(refs.iter().all(|(i, s)| agx_jit::supports(i, *s)));
    let mut group = c.benchmark_group("jit");
    group.bench_function("compiler_new", |b| {
        b.iter(|| black_box(Compiler::new(helpers).expect("a compiler")))
    });
    group.bench_function("compile_alu_loop_block_8_instructions", |b| {
        let mut compiler = Compiler::new(helpers).expect("a compiler");
        let mut compiled = 0;
        b.iter(|| {
            // A fresh compiler now and then, so that its code memory stays
            // small.
            compiled += 1;
            if compiled % 1000 == 0 {
                compiler = Compiler::new(helpers).expect("a compiler");
            }
            black_box(compiler.compile(&refs).expect("the block compiles"))
        });
    });
    group.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);
