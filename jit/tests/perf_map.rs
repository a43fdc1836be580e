//! The perf map: each compiled block's host address range and name, one
//! line per block, as `perf report` reads them.

use agx_hw::isa::{decode, text::assemble, Instr};
use agx_jit::{Compiler, Helpers};

extern "C" fn fma(x: f32, y: f32, z: f32) -> f32 {
    x.mul_add(y, z)
}

extern "C" fn widen(_: u32) -> f32 {
    0.0
}

extern "C" fn narrow(_: f32) -> u32 {
    0
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

fn block(text: &str) -> Vec<(Instr, bool)> {
    let code = assemble(text, 0).expect("the block assembles");
    let mut at = 0;
    let mut out = Vec::new();
    while at < code.len() {
        let decoded = decode(&code[at..]).expect("the block decodes");
        at += decoded.length_bytes;
        out.push((decoded.instr, false));
    }
    out
}

/// Under `perf record` (which sets `PERF_BUILDID_DIR`), each compiled
/// block is listed in `/tmp/perf-<pid>.map` by a name that says which
/// block it is. (This test is its own process: the variable and the map
/// are nobody else's.)
#[test]
fn each_compiled_block_is_named_in_the_perf_map() {
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let _ = std::fs::remove_file(&path);
    // (This binary runs one test: no other thread reads the environment.)
    std::env::set_var("PERF_BUILDID_DIR", std::env::temp_dir());
    let mut compiler = Compiler::new(Helpers {
        fma_f32: fma,
        half_to_f32: widen,
        f32_to_half: narrow,
        convert,
        half_arithmetic: half,
        unary_f32: unary,
    })
    .expect("a compiler for this host");
    let first = block("iadd r4, r4, r2\nxor r7, r4, r2");
    let second = block("fmul32 r5, r3, r3\nfadd32 r6, r5, r3.neg\niadd r2, r2, 1");
    for code in [&first, &second] {
        let refs: Vec<(&Instr, bool)> = code.iter().map(|(i, s)| (i, *s)).collect();
        compiler.compile(&refs).expect("the block compiles");
    }
    let map = std::fs::read_to_string(&path).expect("read the map");
    std::fs::remove_file(&path).expect("remove the map");
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 2, "{map}");
    let mut ranges = Vec::new();
    for (n, (line, (first_instruction, count))) in lines
        .iter()
        .zip([("iadd r4, r4, r2", 2), ("fmul32 r5, r3, r3", 3)])
        .enumerate()
    {
        let mut fields = line.splitn(3, ' ');
        let start = u64::from_str_radix(fields.next().unwrap(), 16).expect("a hex address");
        let size = u64::from_str_radix(fields.next().unwrap(), 16).expect("a hex size");
        assert!(start != 0 && size > 0, "{line}");
        assert_eq!(
            fields.next().unwrap(),
            format!("agx-block {n}: {first_instruction} ({count} instructions)")
        );
        ranges.push((start, start + size));
    }
    assert!(
        ranges[0].1 <= ranges[1].0 || ranges[1].1 <= ranges[0].0,
        "the blocks' code does not overlap: {ranges:x?}"
    );
}
