//! The compiled engine against the interpreter: random ALU, conversion and
//! exec-mask programs on random states (nesting counts included), and the
//! rare paths of the fp32 arithmetic, must leave
//! every register of every lane the same (`common::Machine::run` runs
//! each program on both engines and compares everything).

mod common;

use agx_firmware_sim::usc::{ExecError, Exit, SimdGroup, Stack};
use agx_hw::isa::Reg;
use common::{Machine, CODE_BASE};
use proptest::prelude::*;

/// fp32 values where the arithmetic's special cases live, as bits.
const SPECIAL_FLOATS: [u32; 16] = [
    0x0000_0000, // +0
    0x8000_0000, // -0
    0x0080_0000, // the smallest normal
    0x8080_0000,
    0x0000_0001, // denormals
    0x807F_FFFF,
    0x3F80_0000, // 1
    0xBF00_0000, // -0.5
    0x7F80_0000, // infinities
    0xFF80_0000,
    0x7FC0_0001, // NaNs, quiet and signalling
    0xFF80_0001,
    0x7F7F_FFFF, // the largest finite
    0x0080_0001,
    0x3F80_0001,
    0x01ED_1C37, // with 0x8cd81616, a product that flushes in fma
];

fn register() -> impl Strategy<Value = u16> {
    1u16..24
}

/// An integer source: a register of any size, a uniform, or an immediate,
/// with or without `.sx`.
fn int_source() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        register().prop_map(|r| format!("r{r}")),
        (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
        (1u16..22).prop_map(|r| format!("r{r}_r{}", r + 1)),
        (0u16..8).prop_map(|u| format!("u{u}")),
        (0u16..8, any::<bool>()).prop_map(|(u, h)| format!("u{u}{}", if h { "h" } else { "l" })),
        (0i64..256).prop_map(|i| i.to_string()),
    ];
    (value, any::<bool>()).prop_map(|(v, sx)| {
        if sx && !v.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            format!("{v}.sx")
        } else {
            v
        }
    })
}

/// A bitwise source: any register or uniform, or an immediate.
fn raw_source() -> impl Strategy<Value = String> {
    prop_oneof![
        register().prop_map(|r| format!("r{r}")),
        (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
        (0u16..8).prop_map(|u| format!("u{u}")),
        (0i64..256).prop_map(|i| i.to_string()),
    ]
}

/// A destination of the integer ALU.
fn int_destination() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => register().prop_map(|r| format!("r{r}")),
        1 => (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
        1 => (1u16..22).prop_map(|r| format!("r{r}_r{}", r + 1)),
    ]
}

/// A 32- or 16-bit destination.
fn narrow_destination() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => register().prop_map(|r| format!("r{r}")),
        1 => (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
    ]
}

/// A float source drawn from `value`, with `.abs` and `.neg` where it is
/// not an immediate.
fn with_float_modifiers(value: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (value, any::<bool>(), any::<bool>()).prop_map(|(v, abs, neg)| {
        let mut s = v;
        if !s.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            if abs {
                s.push_str(".abs");
            }
            if neg {
                s.push_str(".neg");
            }
        }
        s
    })
}

/// A float source with its modifiers (fp16 halves among them: the
/// compiled engine leaves those to the interpreter).
fn float_source() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        6 => register().prop_map(|r| format!("r{r}")),
        1 => (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
        2 => (0u16..8).prop_map(|u| format!("u{u}")),
        2 => prop::sample::select(vec!["0.5", "1.0", "2.0", "0.0", "0.25", "4.0"]).prop_map(str::to_string),
    ];
    with_float_modifiers(value)
}

/// An fp16 source: a register's or uniform's half, or a float
/// immediate, with its modifiers.
fn half_source() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        5 => (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" })),
        2 => (0u16..8, any::<bool>()).prop_map(|(u, h)| format!("u{u}{}", if h { "h" } else { "l" })),
        2 => prop::sample::select(vec!["0.5", "1.0", "2.0", "0.0", "0.25", "4.0"]).prop_map(str::to_string),
    ];
    with_float_modifiers(value)
}

/// A 16-bit destination: a register's half.
fn half_destination() -> impl Strategy<Value = String> {
    (register(), any::<bool>()).prop_map(|(r, h)| format!("r{r}{}", if h { "h" } else { "l" }))
}

/// The float ALU of one width (`bits` 32 or 16): `fadd`, `fmul` and
/// `fmadd`, with or without `.sat`, to `destination` from `source`s.
fn float_arithmetic<D, S>(
    bits: u32,
    destination: fn() -> D,
    source: fn() -> S,
) -> impl Strategy<Value = String>
where
    D: Strategy<Value = String> + 'static,
    S: Strategy<Value = String> + 'static,
{
    let sat = || prop::sample::select(vec!["", "", ".sat"]);
    prop_oneof![
        (
            prop::sample::select(vec!["fadd", "fmul"]),
            sat(),
            destination(),
            source(),
            source()
        )
            .prop_map(move |(op, sat, d, a, b)| format!("{op}{bits}{sat} {d}, {a}, {b}")),
        (sat(), destination(), source(), source(), source())
            .prop_map(move |(sat, d, a, b, c)| format!("fmadd{bits}{sat} {d}, {a}, {b}, {c}")),
    ]
}

/// The fp16 ALU: `fadd16`, `fmul16`, `fmadd16`.
fn half_instruction() -> impl Strategy<Value = String> {
    float_arithmetic(16, half_destination, half_source)
}

fn instruction() -> impl Strategy<Value = String> {
    let sat = || prop::sample::select(vec!["", "", ".sat"]);
    prop_oneof![
        (register(), any::<u32>()).prop_map(|(r, i)| format!("mov_imm r{r}, {i}")),
        (register(), any::<bool>(), any::<u16>())
            .prop_map(|(r, h, i)| format!("mov_imm r{r}{}, {i}", if h { "h" } else { "l" })),
        (
            prop::sample::select(vec!["iadd", "isub"]),
            sat(),
            int_destination(),
            int_source(),
            int_source(),
            0u32..6
        )
            .prop_map(|(op, sat, d, a, b, shift)| {
                if shift == 0 {
                    format!("{op}{sat} {d}, {a}, {b}")
                } else {
                    format!("{op}{sat} {d}, {a}, {b}, lsl {shift}")
                }
            }),
        (
            prop::sample::select(vec!["imadd", "imsub"]),
            sat(),
            int_destination(),
            int_source(),
            int_source(),
            int_source()
        )
            .prop_map(|(op, sat, d, a, b, c)| format!("{op}{sat} {d}, {a}, {b}, {c}")),
        (
            prop::sample::select(vec!["and", "or", "xor", "nand", "nor", "xnor"]),
            int_destination(),
            raw_source(),
            raw_source()
        )
            .prop_map(|(op, d, a, b)| format!("{op} {d}, {a}, {b}")),
        (
            prop::sample::select(vec!["mov", "not"]),
            int_destination(),
            raw_source()
        )
            .prop_map(|(op, d, a)| format!("{op} {d}, {a}")),
        (0u32..16, int_destination(), raw_source(), raw_source())
            .prop_map(|(t, d, a, b)| format!("bitop {t:04b}, {d}, {a}, {b}")),
        float_arithmetic(32, narrow_destination, float_source),
        // The single-source fp32 functions (through the reference's own
        // function in both engines), on special and random values.
        (
            prop::sample::select(vec![
                "floor", "ceil", "trunc", "rint", "rcp", "rsqrt", "log2", "exp2",
                "rsqrt_special", "sin_pt_1", "sin_pt_2"
            ]),
            sat(),
            narrow_destination(),
            float_source()
        )
            .prop_map(|(op, sat, d, a)| format!("{op}{sat} {d}, {a}")),
        (
            prop::sample::select(vec!["ueq", "ult", "ugt", "seq", "slt", "sgt", "3"]),
            narrow_destination(),
            raw_source(),
            raw_source(),
            raw_source(),
            raw_source()
        )
            .prop_map(|(cc, d, a, b, x, y)| format!("icmpsel {cc}, {d}, {a}, {b}, {x}, {y}")),
        (
            prop::sample::select(vec!["eq", "lt", "gt", "ltn", "gte", "lte", "gtn"]),
            narrow_destination(),
            float_source(),
            float_source(),
            raw_source(),
            raw_source()
        )
            .prop_map(|(cc, d, a, b, x, y)| format!("fcmpsel {cc}, {d}, {a}, {b}, {x}, {y}")),
        (
            prop::sample::select(vec!["bfi", "bfeil", "extr", "shlhi", "shrhi"]),
            narrow_destination(),
            raw_source(),
            raw_source(),
            prop_oneof![raw_source(), (0u32..128).prop_map(|s| s.to_string())],
            0u32..32
        )
            .prop_map(|(op, d, a, b, sh, m)| {
                if m == 0 {
                    format!("{op} {d}, {a}, {b}, {sh}")
                } else {
                    format!("{op} {d}, {a}, {b}, {sh}, mask {:#x}", (1u64 << m) - 1)
                }
            }),
        (
            prop::sample::select(vec!["asr", "asrh"]),
            narrow_destination(),
            raw_source(),
            prop_oneof![raw_source(), (0u32..128).prop_map(|s| s.to_string())]
        )
            .prop_map(|(op, d, a, b)| format!("{op} {d}, {a}, {b}")),
        (
            prop::sample::select(vec!["bitrev", "popcount", "ffs"]),
            narrow_destination(),
            raw_source()
        )
            .prop_map(|(op, d, a)| format!("{op} {d}, {a}")),
        (narrow_destination(), raw_source(), raw_source())
            .prop_map(|(d, a, b)| format!("intl {d}, {a}, {b}")),
        // The exec-mask instructions, on every lane's random r0l ("3" and
        // "11", "4" and "12" are undefined conditions, refused by both).
        (
            prop::sample::select(vec!["if_icmp", "else_icmp", "while_icmp"]),
            prop::sample::select(vec![
                "ueq", "ult", "ugt", "seq", "slt", "sgt", "nueq", "ugte", "ulte", "nseq", "sgte",
                "slte", "3", "11"
            ]),
            raw_source(),
            raw_source(),
            0u32..4
        )
            .prop_map(|(op, cc, a, b, n)| format!("{op} r0l, {cc}, {a}, {b}, {n}")),
        (
            prop::sample::select(vec!["if_fcmp", "else_fcmp", "while_fcmp"]),
            prop::sample::select(vec![
                "eq", "lt", "gt", "ltn", "gte", "lte", "gtn", "neq", "nlt", "ngt", "nltn", "ngte",
                "nlte", "ngtn", "4", "12"
            ]),
            float_source(),
            float_source(),
            0u32..4
        )
            .prop_map(|(op, cc, a, b, n)| format!("{op} r0l, {cc}, {a}, {b}, {n}")),
        (0u32..4).prop_map(|n| format!("pop_exec r0l, {n}")),
        // Conversions, every mode and rounding (mode 2 is undefined,
        // refused by both), and the waits that change no register.
        (
            prop::sample::select(vec![
                "u8_to_f", "s8_to_f", "f_to_u16", "f_to_s16", "u16_to_f", "s16_to_f", "f_to_u32",
                "f_to_s32", "u32_to_f", "s32_to_f", "2"
            ]),
            narrow_destination(),
            prop_oneof![
                4 => raw_source(),
                1 => prop::sample::select(vec!["0.5", "-1.0", "65535.5", "4294967296.0"]).prop_map(str::to_string),
            ],
            prop::sample::select(vec!["rtz", "rte"])
        )
            .prop_map(|(m, d, s, r)| format!("convert {m}, {d}, {s}, {r}")),
        Just("wait 0".to_string()),
        Just("memory_barrier 1, 2, 9".to_string()),
    ]
}

/// A register's starting value in a lane: a special float or any bits.
fn word() -> impl Strategy<Value = u32> {
    prop_oneof![prop::sample::select(SPECIAL_FLOATS.to_vec()), any::<u32>()]
}

/// Runs `program` (which must assemble) on both engines from the state
/// given; `Machine::run` asserts that they agree.
fn run_both(
    program: &str,
    present: u32,
    registers: &[u32],
    uniforms: &[u32],
) -> Result<Exit, ExecError> {
    run_both_within(program, present, registers, uniforms, common::BUDGET)
}

/// [`run_both`] with an instruction budget of `budget_instructions`.
fn run_both_within(
    program: &str,
    present: u32,
    registers: &[u32],
    uniforms: &[u32],
    budget_instructions: u64,
) -> Result<Exit, ExecError> {
    let mut machine = Machine::new(program);
    machine.budget_instructions = budget_instructions;
    machine.uniforms[..uniforms.len()].copy_from_slice(uniforms);
    let mut group = SimdGroup::new(CODE_BASE, present);
    for (i, value) in registers.iter().enumerate() {
        let (n, lane) = ((i / 32) as u16, i % 32);
        group.write(Reg::r(n), lane, u64::from(*value));
    }
    machine.run(&mut group)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_alu_programs_agree_on_both_engines(
        body in prop::collection::vec(prop_oneof![6 => instruction(), 1 => half_instruction()], 1..12),
        present in prop_oneof![Just(u32::MAX), any::<u32>()],
        registers in prop::collection::vec(word(), 24 * 32),
        uniforms in prop::collection::vec(word(), 8),
    ) {
        let program = format!("{}\nstop", body.join("\n"));
        // A combination the assembler has no encoding for is skipped.
        let assembled = agx_hw::isa::text::assemble(&program, CODE_BASE);
        prop_assume!(assembled.is_ok());
        // Both engines agree (`run_both` asserts it), errors included
        // (an undefined condition code is refused by both).
        let _ = run_both(&program, present, &registers, &uniforms);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Loops: a random body (ALU and exec-mask instructions, a `while`
    /// whose condition decides when each lane leaves) ending with a jump
    /// on the mask back to the start, which the compiled engine runs as
    /// one block called once for all its runs. Loops that never end run
    /// out of the instruction budget: both engines time out at the same
    /// instruction with the same count.
    #[test]
    fn random_loops_agree_on_both_engines(
        body in prop::collection::vec(instruction(), 1..8),
        step in prop_oneof![Just("iadd r1, r1, 1".to_string()), instruction()],
        until in prop::sample::select(vec!["ult", "ugt", "ueq", "nueq", "slt"]),
        limit in prop_oneof![(0u32..40).prop_map(|l| l.to_string()), raw_source()],
        jump in prop::sample::select(vec!["jmp_exec_any", "jmp_exec_none"]),
        present in prop_oneof![Just(u32::MAX), any::<u32>()],
        registers in prop::collection::vec(word(), 24 * 32),
        uniforms in prop::collection::vec(word(), 8),
    ) {
        let program = format!(
            "top:\n{}\n{step}\nwhile_icmp r0l, {until}, r1, {limit}, 1\n{jump} top\npop_exec r0l, 1\nstop",
            body.join("\n")
        );
        let assembled = agx_hw::isa::text::assemble(&program, CODE_BASE);
        prop_assume!(assembled.is_ok());
        let mut registers = registers;
        // Most lanes start inside the loop, with small counters.
        for lane in 0..32 {
            registers[lane] &= 0xFFFF_0001;
            registers[32 + lane] &= 0x3F;
        }
        // A budget that loops which do not end spend quickly, and that
        // is not a multiple of the loops' lengths.
        let _ = run_both_within(&program, present, &registers, &uniforms, 4_999);
    }
}

/// A loop the compiled engine runs as one block: the whole loop in one
/// call, its count of instructions the interpreter's.
#[test]
fn a_loop_runs_as_one_compiled_block() {
    let program = "
        top:
        iadd r2, r2, r1
        iadd r1, r1, 1
        while_icmp r0l, ult, r1, 100, 1
        jmp_exec_any top
        pop_exec r0l, 1
        stop";
    let mut machine = Machine::new(program);
    let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32u64 {
        let want: u64 = (lane..100).sum();
        assert_eq!(
            group.read(Reg::r(2), lane as usize),
            want & 0xFFFF_FFFF,
            "lane {lane}"
        );
    }
    // The loop (four instructions, the jump included) is one block, run
    // 100 times by one call; pop_exec and stop are interpreted.
    assert_eq!(machine.compiled_cache.compiled_blocks(), 1);
    assert_eq!(group.executed_instructions, 4 * 100 + 2);
}

/// The fused multiply-add's rare path (a result of the smallest normal's
/// magnitude): the compiled code asks the reference, which knows whether
/// the exact value was below it.
#[test]
fn an_fma_at_the_smallest_normal_flushes_as_the_interpreter_does() {
    let program = "fmadd32 r10, r1, r2, r3\nfmadd32 r11, r1, r2.neg, r3\nfmadd32 r12, r1.neg, r2, r3.neg\nstop";
    let mut registers = vec![0u32; 4 * 32];
    for lane in 0..32 {
        registers[32 + lane] = 0x01ED_1C37;
        registers[64 + lane] = 0x8CD8_1616;
        registers[96 + lane] = 0x0080_0000;
    }
    let mut machine = Machine::new(program);
    let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
    for (i, value) in registers.iter().enumerate() {
        group.write(Reg::r((i / 32) as u16), i % 32, u64::from(*value));
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::r(10), 0), 0, "flushed to +0");
    assert_eq!(group.read(Reg::r(11), 0), 0x0080_0000, "stays");
    assert_eq!(group.read(Reg::r(12), 0), 0x8000_0000, "-0");
    assert_eq!(
        machine.compiled_cache.compiled_blocks(),
        1,
        "one block, compiled"
    );
}

/// A block that would run past the instruction budget is interpreted up
/// to the timeout, which then names the same instruction on both.
#[test]
fn a_block_the_budget_ends_inside_times_out_where_the_interpreter_does() {
    use agx_firmware_sim::usc::{Env, NoIo, ProgramCache, ShaderEngine};
    let program = "iadd r1, r1, 1\niadd r2, r2, r1\niadd r3, r3, r2\niadd r4, r4, r3\nstop";
    let mut results = Vec::new();
    for engine in [ShaderEngine::Interpreter, ShaderEngine::Compiled] {
        let mut machine = Machine::new(program);
        let mut cache = ProgramCache::with_engine(engine);
        let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
        let mut budget = 3;
        let mut env = Env {
            memory: &mut machine.memory,
            io: &mut NoIo,
            uniforms: &mut machine.uniforms,
            threadgroup: &mut machine.threadgroup,
        };
        let result = group.run(&mut cache, &mut env, &mut budget);
        results.push((
            result,
            group.read(Reg::r(3), 0),
            group.executed_instructions,
        ));
    }
    assert_eq!(results[0], results[1]);
    assert!(matches!(results[0].0, Err(ExecError::Timeout { .. })));
    assert_eq!(results[0].2, 3);
}

/// Runs `program` from a fresh group with `cache`, returning r1..r4 of
/// lane 0.
fn run_with_cache(program: &str, cache: &mut agx_firmware_sim::usc::ProgramCache) -> [u64; 4] {
    use agx_firmware_sim::usc::{Env, NoIo};
    let mut machine = Machine::new(program);
    let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
    for lane in 0..32 {
        group.write(Reg::r(1), lane, 5 + lane as u64);
    }
    let mut budget = 1000;
    let mut env = Env {
        memory: &mut machine.memory,
        io: &mut NoIo,
        uniforms: &mut machine.uniforms,
        threadgroup: &mut machine.threadgroup,
    };
    assert_eq!(group.run(cache, &mut env, &mut budget), Ok(Exit::Stopped));
    std::array::from_fn(|i| group.read(Reg::r(i as u16 + 1), 0))
}

const SHARED_PROGRAM: &str = "iadd r2, r1, 3\nimadd r3, r2, r2, r1\nxor r4, r3, r2\nstop";

/// Program caches of one GPU (a thread's, a command's) share the code
/// cache: a block is compiled once, by its bytes, whoever runs it next.
#[test]
fn caches_sharing_a_code_cache_compile_a_block_once() {
    use agx_firmware_sim::usc::{new_code_cache, ProgramCache};
    let code = new_code_cache().expect("a code generator for this host");
    let mut first = ProgramCache::with_code(Some(code.clone()));
    let mut second = ProgramCache::with_code(Some(code.clone()));
    let expected = [5, 8, 8 * 8 + 5, (8 * 8 + 5) ^ 8];
    assert_eq!(run_with_cache(SHARED_PROGRAM, &mut first), expected);
    assert_eq!(run_with_cache(SHARED_PROGRAM, &mut second), expected);
    let stats = code.stats();
    assert_eq!((stats.blocks, stats.compiles, stats.hits), (1, 1, 1));
    assert_eq!((first.compiled_blocks(), second.compiled_blocks()), (1, 1));
}

/// A full code cache compiles nothing more: the runs are interpreted,
/// with the same results.
#[test]
fn a_full_code_cache_leaves_new_blocks_to_the_interpreter() {
    use agx_firmware_sim::usc::ProgramCache;
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
    let helpers = agx_jit::Helpers {
        fma_f32: fma,
        half_to_f32: widen,
        f32_to_half: narrow,
        convert,
        half_arithmetic: half,
        unary_f32: unary,
    };
    let code = agx_jit::CodeCache::new(helpers, 0).unwrap();
    let mut cache = ProgramCache::with_code(Some(code.clone()));
    assert_eq!(
        run_with_cache(SHARED_PROGRAM, &mut cache),
        [5, 8, 8 * 8 + 5, (8 * 8 + 5) ^ 8]
    );
    assert_eq!(code.stats().blocks, 0);
    assert_eq!((cache.compiled_blocks(), cache.compile_failures()), (0, 0));
}

/// Where the load tests' data lives: four pages, the third unmapped, the
/// fourth writable.
const DATA_BASE: u64 = 0x2_0000_0000;

/// A register run of `count` registers from `first`, 32- or 16-bit.
fn run_of(first: u16, count: u32, half: bool) -> String {
    (0..count as u16)
        .map(|i| {
            if half {
                let h = first * 2 + i;
                format!("r{}{}", h / 2, if h.is_multiple_of(2) { "l" } else { "h" })
            } else {
                format!("r{}", first + i)
            }
        })
        .collect::<Vec<_>>()
        .join("_")
}

/// A `device_load` of whole elements: any such format, mask and register
/// size (i32 into 16-bit registers is refused by both), a base in
/// uniforms or registers, an index in a register (either half), a
/// uniform or an immediate, either signedness, a shift.
fn load_instruction() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["i8", "i16", "i32", "f16"]),
        1u32..16,
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop::sample::select(vec!["u0_u1", "r2_r3", "u4_u5"]),
        prop::sample::select(vec!["r4", "r4l", "r5", "u2", "0", "3", "100", "r2"]),
        prop::sample::select(vec!["signed", "unsigned"]),
        0u32..3,
        prop::sample::select(vec![8u16, 12, 4]),
    )
        .prop_map(|(format, mask, half, base, index, sign, shift, first)| {
            let mask_text: String = "xyzw"
                .chars()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, c)| c)
                .collect();
            let data = run_of(first, mask.count_ones(), half);
            let lsl = if shift > 0 {
                format!(", lsl {shift}")
            } else {
                String::new()
            };
            format!("device_load 0, {format}, {mask_text}, {data}, {base}, {index}, {sign}{lsl}")
        })
}

/// A `device_store` of whole elements, as [`load_instruction`] draws a
/// load.
fn store_instruction() -> impl Strategy<Value = String> {
    load_instruction()
        .prop_map(|load| format!("{}, 0", load.replacen("device_load", "device_store", 1)))
}

/// A `stack_load` or `stack_store` of whole elements: any such format,
/// mask and register size, at an immediate offset or a lane's register
/// (inside the stack, across its two blocks, or outside it).
fn stack_instruction() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop::sample::select(vec!["i8", "i16", "i32", "f16"]),
        1u32..16,
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![
            3 => Just("r5".to_string()),
            2 => (-8i32..52).prop_map(|o| o.to_string()),
        ],
        prop::sample::select(vec![8u16, 12, 4]),
    )
        .prop_map(|(store, format, mask, half, offset, first)| {
            let mask_text: String = "xyzw"
                .chars()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, c)| c)
                .collect();
            let data = run_of(first, mask.count_ones(), half);
            if store {
                format!("stack_store {format}, 1, 0, {mask_text}, 4, {data}, {offset}, 0")
            } else {
                format!("stack_load {data}, {format}, 1, 0, {mask_text}, 4, {offset}, 0")
            }
        })
}

/// Runs `program` on both engines with the data pages mapped and filled
/// from `seed`, lanes' registers from `registers`.
fn run_loads(program: &str, present: u32, registers: &[u32], uniforms: &[u32], seed: u64) {
    let (mut machine, mut group) = loads_machine(program, present, registers, uniforms, seed);
    // `Machine::run` asserts that both engines agree on everything,
    // memory and faults included.
    let _ = machine.run(&mut group);
}

/// [`run_loads`]'s machine and SIMD-group, before the run.
fn loads_machine(
    program: &str,
    present: u32,
    registers: &[u32],
    uniforms: &[u32],
    seed: u64,
) -> (Machine, SimdGroup) {
    let mut machine = Machine::new(program);
    machine.uniforms[..uniforms.len()].copy_from_slice(uniforms);
    let page = common::PAGE_BYTES;
    machine.memory.map(DATA_BASE, 2 * page, true);
    machine.memory.map(DATA_BASE + 3 * page, page, true);
    let mut state = seed | 1;
    let mut bytes = vec![0u8; 4 * page as usize];
    for byte in &mut bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    machine.memory.poke(DATA_BASE, &bytes[..2 * page as usize]);
    machine
        .memory
        .poke(DATA_BASE + 3 * page, &bytes[3 * page as usize..]);
    machine.memory.map(DATA_BASE, 2 * page, false);
    let mut group = SimdGroup::new(CODE_BASE, present);
    for (i, value) in registers.iter().enumerate() {
        group.write(Reg::r((i / 32) as u16), i % 32, u64::from(*value));
    }
    // A stack of two blocks of 8 words per thread: block 0 in the
    // writable page, block 1 in a read-only one.
    group.stack = Stack::mapped([
        ((DATA_BASE + 3 * page) >> 8) as u32 | 1,
        ((DATA_BASE + page) >> 8) as u32 | 1,
        0,
        0,
    ]);
    (machine, group)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Device loads and stores and stack accesses, compiled (through the
    /// page cache and host addresses) and interpreted: random ones
    /// between random ALU instructions, at addresses across read-only
    /// pages, an unmapped one, a writable one and the space's other end,
    /// and stack offsets inside and outside the stack, must leave the same
    /// registers and memory and meet the same first fault.
    #[test]
    fn random_memory_accesses_agree_on_both_engines(
        loads in prop::collection::vec(prop_oneof![
            2 => load_instruction(),
            1 => store_instruction(),
            2 => stack_instruction(),
        ], 1..4),
        between in prop::collection::vec(instruction(), 0..3),
        present in prop_oneof![Just(u32::MAX), any::<u32>()],
        offsets in prop::collection::vec(prop_oneof![
            8 => 0u32..(2 * 16384),
            1 => (2 * 16384u32)..(4 * 16384),
            1 => any::<u32>(),
        ], 32),
        indices in prop::collection::vec(prop_oneof![
            4 => 0u32..64,
            1 => (0u32..64).prop_map(|i| i.wrapping_neg()),
            1 => any::<u32>(),
        ], 64),
        uniform_offsets in (0u32..(2 * 16384), 0u32..(4 * 16384), 0u32..64),
        seed in any::<u64>(),
    ) {
        let mut body = Vec::new();
        for (i, load) in loads.iter().enumerate() {
            body.push(load.clone());
            body.push("wait 0".to_string());
            if let Some(alu) = between.get(i) {
                body.push(alu.clone());
            }
        }
        // The stack pointer at byte 16 of 64.
        let program = format!(
            "stack_adjust 0, 1, 2, 0, 0, 12\n{}\niadd r30, r8, r9\nstop",
            body.join("\n")
        );
        let assembled = agx_hw::isa::text::assemble(&program, CODE_BASE);
        prop_assume!(assembled.is_ok());
        // r2_r3: each lane's 64-bit base; r4, r5: its indices.
        let mut registers = vec![0u32; 8 * 32];
        for lane in 0..32 {
            let base = DATA_BASE + u64::from(offsets[lane]);
            registers[2 * 32 + lane] = base as u32;
            registers[3 * 32 + lane] = (base >> 32) as u32;
            registers[4 * 32 + lane] = indices[lane];
            registers[5 * 32 + lane] = indices[32 + lane];
        }
        let (u_low, u_high, u_index) = uniform_offsets;
        let uniform_base = |offset: u32| DATA_BASE + u64::from(offset);
        let uniforms = [
            uniform_base(u_low) as u32,
            (uniform_base(u_low) >> 32) as u32,
            u_index,
            0,
            uniform_base(u_high) as u32,
            (uniform_base(u_high) >> 32) as u32,
        ];
        run_loads(&program, present, &registers, &uniforms, seed);
    }
}

/// A loop that loads as it goes runs compiled whole: one block, the loads
/// read through host addresses, the sums the interpreter's.
#[test]
fn a_loop_of_loads_runs_as_one_compiled_block() {
    let program = "
        top:
        device_load 0, i32, x, r6, u0_u1, r1, unsigned, lsl 0
        wait 0
        iadd r2, r2, r6
        iadd r1, r1, 1
        while_icmp r0l, ult, r1, 100, 1
        jmp_exec_any top
        pop_exec r0l, 1
        stop";
    let mut machine = Machine::new(program);
    machine.memory.map(DATA_BASE, 4096, true);
    let words: Vec<u32> = (0..100u32).map(|i| i * i + 7).collect();
    machine.memory.poke_u32s(DATA_BASE, &words);
    machine.uniforms[0] = DATA_BASE as u32;
    machine.uniforms[1] = (DATA_BASE >> 32) as u32;
    let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32usize {
        let want: u64 = words[lane..].iter().map(|&w| u64::from(w)).sum();
        assert_eq!(
            group.read(Reg::r(2), lane),
            want & 0xFFFF_FFFF,
            "lane {lane}"
        );
    }
    // Had a load stopped the block, the interpreter would have run it and
    // a second block would have formed after it.
    assert_eq!(machine.compiled_cache.compiled_blocks(), 1);
    assert_eq!(group.executed_instructions, 6 * 100 + 2);
}

/// The program of the page-cache tests: each lane loads the word at
/// `DATA_BASE` + 4 x its lane number into r6 and adds it to r2.
const LANE_LOAD: &str = "
    device_load 0, i32, x, r6, u0_u1, r1, unsigned
    wait 0
    iadd r2, r2, r6
    stop";

/// A machine for [`LANE_LOAD`], its data page holding `word` everywhere.
fn lane_load_machine(word: u32) -> Machine {
    let mut machine = Machine::new(LANE_LOAD);
    machine.memory.map(DATA_BASE, 4096, true);
    machine.memory.poke_u32s(DATA_BASE, &[word; 64]);
    machine.uniforms[0] = DATA_BASE as u32;
    machine.uniforms[1] = (DATA_BASE >> 32) as u32;
    machine
}

/// Runs [`LANE_LOAD`] on the compiled engine with `cache` and `memory`
/// (the machine's uniforms): its result and lane 31's r2.
fn run_lane_load(
    machine: &mut Machine,
    cache: &mut agx_firmware_sim::usc::ProgramCache,
    memory: &mut dyn agx_firmware_sim::usc::GpuMemory,
) -> (Result<Exit, ExecError>, u64) {
    use agx_firmware_sim::usc::{Env, NoIo};
    let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    let mut budget = common::BUDGET;
    let mut env = Env {
        memory,
        io: &mut NoIo,
        uniforms: &mut machine.uniforms,
        threadgroup: &mut machine.threadgroup,
    };
    let result = group.run(cache, &mut env, &mut budget);
    (result, group.read(Reg::r(2), 31))
}

/// A page unmapped after compiled loads read it (the page tables change:
/// cached translations are shot down) faults on the next load, as in the
/// interpreter: the page cache does not outlive the translation.
#[test]
fn compiled_loads_fault_on_a_page_unmapped_since_they_last_read_it() {
    use agx_firmware_sim::usc::{MemoryFault, ProgramCache, ShaderEngine};
    let mut machine = lane_load_machine(41);
    let mut memory = common::HostMemory::from_paged(&machine.memory);
    let mut cache = ProgramCache::with_engine(ShaderEngine::Compiled);
    assert_eq!(
        run_lane_load(&mut machine, &mut cache, &mut memory),
        (Ok(Exit::Stopped), 41)
    );
    memory.unmap(DATA_BASE);
    let (result, _) = run_lane_load(&mut machine, &mut cache, &mut memory);
    assert!(
        matches!(
            result,
            Err(ExecError::Memory {
                fault: MemoryFault {
                    address: DATA_BASE,
                    ..
                },
                ..
            })
        ),
        "{result:?}"
    );
}

/// A program cache whose compiled loads read one memory through its host
/// window, then run on a memory without one, reads the second memory:
/// pages cached for the first are not used (they may belong to a window
/// that is gone).
#[test]
fn compiled_loads_on_a_memory_without_a_window_do_not_use_pages_cached_for_another() {
    use agx_firmware_sim::usc::{ProgramCache, ShaderEngine};
    let mut machine = lane_load_machine(41);
    let mut windowed = common::HostMemory::from_paged(&machine.memory);
    machine.memory.poke_u32s(DATA_BASE, &[7; 64]);
    let mut plain = machine.memory.clone();
    let mut cache = ProgramCache::with_engine(ShaderEngine::Compiled);
    assert_eq!(
        run_lane_load(&mut machine, &mut cache, &mut windowed),
        (Ok(Exit::Stopped), 41)
    );
    assert_eq!(
        run_lane_load(&mut machine, &mut cache, &mut plain),
        (Ok(Exit::Stopped), 7)
    );
}

/// Every fp16 value as an fp32 operand (`fmul32` by 1, exact for every
/// one of them: widened fp16 values are fp32 normals or zeros), and every
/// comparison of one: the compiled engine's own widening agrees with the
/// interpreter's on all 65,536.
#[test]
fn every_fp16_operand_widens_as_the_interpreter_widens_it() {
    let program = (1..=16)
        .map(|r| {
            format!(
                "fmul32 r{d}, r{r}l, 1.0\nfmul32 r{e}, r{r}h, 1.0\nfcmpsel lt, r{f}, r{r}l, r{r}h, 1, 2",
                d = 16 + r,
                e = 32 + r,
                f = 48 + r
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\nstop";
    // 16 registers x 32 lanes x 2 halves per run.
    let per_run = 16 * 32 * 2;
    for run in 0..(65_536 / per_run) {
        let mut machine = Machine::new(&program);
        let mut group = SimdGroup::new(CODE_BASE, u32::MAX);
        for r in 0..16u32 {
            for lane in 0..32u32 {
                let first = (run * per_run) as u32 + (r * 32 + lane) * 2;
                group.write(
                    Reg::r(1 + r as u16),
                    lane as usize,
                    u64::from(first | (first + 1) << 16),
                );
            }
        }
        // `Machine::run` compares every register of both engines.
        assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
        assert_eq!(machine.compiled_cache.compiled_blocks(), 1);
    }
}

/// Stack stores and loads of words at immediate offsets (each component
/// one row of the interleaved stack, four lanes a host vector): only the
/// lanes of the mask are written, for masks that fill, split and skip
/// quads.
#[test]
fn stack_word_rows_store_and_load_the_lanes_of_the_mask_only() {
    let program = "
        stack_adjust 0, 1, 2, 0, 0, 12
        mov_imm r9, 7
        stack_store i32, 1, 0, xy, 4, r12_r13, 0, 0
        stack_load r14_r15_r16, i32, 1, 0, xyz, 4, -4, 0
        iadd r17, r14, r16
        stop";
    let registers: Vec<u32> = (0..24 * 32)
        .map(|i: u32| i.wrapping_mul(0x9E37_79B9))
        .collect();
    for present in [
        u32::MAX,
        0x0000_FFFF,
        0x1248_8421,
        0x8000_0001,
        0xFFFF_FFFE,
        0x0F0F_0F0E,
    ] {
        run_loads(program, present, &registers, &[], u64::from(present));
    }
}

/// Stack words at a register's offset: where every lane of the mask
/// holds the same offset, the compiled engine takes the rows; where one
/// lane of the mask differs, each lane its own word. Both must write and
/// read exactly the interpreter's words.
#[test]
fn stack_words_at_a_register_offset_shared_or_not_by_the_lanes_of_the_mask() {
    let program = "
        stack_adjust 0, 1, 2, 0, 0, 12
        mov_imm r9, 7
        stack_store i32, 1, 0, xy, 4, r12_r13, r5, 0
        stack_load r14_r15_r16, i32, 1, 0, xyz, 4, r6, 0
        iadd r17, r14, r16
        stop";
    let base: Vec<u32> = (0..24 * 32)
        .map(|i: u32| i.wrapping_mul(0x9E37_79B9))
        .collect();
    let present = 0x7FFF_FFF6;
    // r5 and r6 per lane: the same in every lane; the same in the lanes
    // of the mask only (lanes 0, 3 and 31 differ); one lane of the mask
    // differing; a pair straddling the stack's writable block.
    type Offsets = fn(usize) -> u32;
    let cases: [(Offsets, Offsets); 4] = [
        (|_| 4, |_| (-4i32) as u32),
        (
            |lane| if [0, 3, 31].contains(&lane) { 40 } else { 0 },
            |_| 0,
        ),
        (
            |lane| if lane == 17 { 8 } else { 4 },
            |lane| if lane == 0 { 12 } else { 0 },
        ),
        (|_| 12, |_| 12),
    ];
    for (r5, r6) in cases {
        let mut registers = base.clone();
        for lane in 0..32 {
            registers[5 * 32 + lane] = r5(lane);
            registers[6 * 32 + lane] = r6(lane);
        }
        run_loads(program, present, &registers, &[], 7);
    }
}

/// A loop that spills to the stack at a register offset runs compiled,
/// its stack accesses included: had the compiled code stopped at them
/// (no stack frame given to the block), the interpreter would have run
/// each, and more blocks would have formed after them.
#[test]
fn a_loop_of_stack_stores_runs_compiled_with_its_stack_accesses() {
    let program = "
        stack_adjust 0, 1, 2, 0, 0, 12
        mov_imm r1, 0
        top:
        iadd r5, 0, r1.sx, lsl 2
        stack_store i32, 1, 0, x, 4, r1, r5, 0
        iadd r1, r1, 1
        while_icmp r0l, ult, r1, 4, 1
        jmp_exec_any top
        pop_exec r0l, 1
        stack_load r8_r9_r10_r11, i32, 1, 0, xyzw, 4, 0, 0
        iadd r12, r8, r11
        stop";
    let (mut machine, mut group) = loads_machine(program, u32::MAX, &[], &[], 1);
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32 {
        let words: Vec<u64> = (8..12).map(|r| group.read(Reg::r(r), lane)).collect();
        assert_eq!(words, [0, 1, 2, 3], "lane {lane}");
    }
    assert_eq!(machine.compiled_cache.compiled_blocks(), 3);
}
