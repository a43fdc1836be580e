//! Whole programs assembled from text and run on the shader core, checked
//! against plain Rust; memory formats and faults; threadgroup memory with
//! barriers; the fixed-function interfaces, driven by small in-test units.

mod common;

use std::collections::HashMap;

use agx_firmware_sim::usc::io::{
    BlockStore, Interpolation, LodArgument, TextureHandle, TextureRequest, TileAccess,
};
use agx_firmware_sim::usc::{
    AccessKind, Env, ExecError, Exit, FaultReason, IoError, ProgramCache, ShaderIo, SimdGroup,
    Stack,
};
use agx_hw::isa::Reg;
use common::{Machine, BUDGET, CODE_BASE};

const DATA: u64 = 0x2_0000_0000;

/// Runs `source` on one SIMD-group to its `stop`, with a page of memory
/// at DATA that `u0_u1` points to.
fn run_over_data(source: &str) -> (Machine, SimdGroup) {
    let mut m = Machine::new(source);
    m.memory.map(DATA, 0x1000, true);
    set_pair(&mut m.uniforms, 0, DATA);
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    (m, group)
}

fn set_pair(uniforms: &mut [u32; 256], n: usize, address: u64) {
    uniforms[n] = address as u32;
    uniforms[n + 1] = (address >> 32) as u32;
}

#[test_log::test]
fn a_stop_no_lane_runs_does_nothing_and_one_a_lane_runs_ends_the_group() {
    // A branch no lane takes holds a stop (libagx's abort after a heap
    // overflow): every lane goes on past it and stores 1. Then lanes 0-9
    // take a branch with a stop: the group ends there, and no lane
    // stores 2.
    let source = "
        get_sr r1, sr52
        mov_imm r2, 1
        mov_imm r3, 2
        if_icmp r0l, ugt, r1, 100, 1
        stop
        pop_exec r0l, 1
        device_store 0, i32, x, r2, u0_u1, r1, unsigned, 0
        wait 0
        if_icmp r0l, ult, r1, 10, 1
        stop
        pop_exec r0l, 1
        device_store 0, i32, x, r3, u0_u1, r1, unsigned, 0
        wait 0
        stop";
    let (m, _) = run_over_data(source);
    assert_eq!(m.memory.peek_u32s(DATA, 32), vec![1; 32]);
}

#[test_log::test]
fn saxpy_loop_over_device_memory() {
    // y[i] = a * x[i] + y[i]; each lane strides by 32 until n.
    let source = "
        get_sr r1, sr52
        if_icmp r0l, ult, r1, u5, 1
        jmp_exec_none done
    loop:
        device_load 0, i32, x, r2, u0_u1, r1, unsigned
        device_load 0, i32, x, r3, u2_u3, r1, unsigned
        wait 0
        fmadd32 r3, u4, r2, r3
        device_store 0, i32, x, r3, u2_u3, r1, unsigned, 0
        iadd r1, r1, 32
        while_icmp r0l, ult, r1, u5, 1
        jmp_exec_any loop
    done:
        pop_exec r0l, 1
        stop";
    let n = 100usize;
    let a = 1.75f32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 9.0).collect();
    let y: Vec<f32> = (0..n).map(|i| (i * i) as f32 / 7.0).collect();
    let mut m = Machine::new(source);
    let (x_base, y_base) = (DATA, DATA + 0x1000);
    m.memory.map(DATA, 0x2000, true);
    m.memory
        .poke_u32s(x_base, &x.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    m.memory
        .poke_u32s(y_base, &y.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    set_pair(&mut m.uniforms, 0, x_base);
    set_pair(&mut m.uniforms, 2, y_base);
    m.uniforms[4] = a.to_bits();
    m.uniforms[5] = n as u32;
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    let expected: Vec<u32> = x
        .iter()
        .zip(&y)
        .map(|(x, y)| a.mul_add(*x, *y).to_bits())
        .collect();
    assert_eq!(m.memory.peek_u32s(y_base, n), expected);
    // Past n nothing was written.
    assert_eq!(m.memory.peek_u32s(y_base + 4 * n as u64, 1), [0]);
}

#[test_log::test]
fn four_by_four_matrix_transform() {
    // out[v] = M * in[v], M column-major in u8..u23, one vertex per lane.
    let source = "
        get_sr r1, sr52
        device_load 0, i32, xyzw, r4_r5_r6_r7, u0_u1, r1, unsigned, lsl 2
        wait 0
        fmul32 r8, u8, r4
        fmul32 r9, u9, r4
        fmul32 r10, u10, r4
        fmul32 r11, u11, r4
        fmadd32 r8, u12, r5, r8
        fmadd32 r9, u13, r5, r9
        fmadd32 r10, u14, r5, r10
        fmadd32 r11, u15, r5, r11
        fmadd32 r8, u16, r6, r8
        fmadd32 r9, u17, r6, r9
        fmadd32 r10, u18, r6, r10
        fmadd32 r11, u19, r6, r11
        fmadd32 r8, u20, r7, r8
        fmadd32 r9, u21, r7, r9
        fmadd32 r10, u22, r7, r10
        fmadd32 r11, u23, r7, r11
        device_store 0, i32, xyzw, r8_r9_r10_r11, u2_u3, r1, unsigned, lsl 2, 0
        stop";
    let matrix: [[f32; 4]; 4] = [
        [0.5, 1.0, -2.0, 0.0],
        [3.0, 0.25, 1.5, 0.0],
        [-1.0, 2.0, 0.75, 0.0],
        [10.0, -20.0, 30.0, 1.0],
    ]; // columns
    let vertices: Vec<[f32; 4]> = (0..32)
        .map(|i| [i as f32 * 0.1, 1.0 - i as f32, (i * i) as f32 * 0.01, 1.0])
        .collect();
    let mut m = Machine::new(source);
    m.memory.map(DATA, 0x2000, true);
    let flat: Vec<u32> = vertices.iter().flatten().map(|v| v.to_bits()).collect();
    m.memory.poke_u32s(DATA, &flat);
    set_pair(&mut m.uniforms, 0, DATA);
    set_pair(&mut m.uniforms, 2, DATA + 0x1000);
    for (c, column) in matrix.iter().enumerate() {
        for (r, v) in column.iter().enumerate() {
            m.uniforms[8 + 4 * c + r] = v.to_bits();
        }
    }
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    let got = m.memory.peek_u32s(DATA + 0x1000, 128);
    for (i, v) in vertices.iter().enumerate() {
        for r in 0..4 {
            let mut acc = matrix[0][r] * v[0];
            for c in 1..4 {
                acc = matrix[c][r].mul_add(v[c], acc);
            }
            assert_eq!(got[4 * i + r], acc.to_bits(), "vertex {i} row {r}");
        }
    }
}

fn collatz_steps(mut n: u32) -> u32 {
    let mut steps = 0;
    while n != 1 {
        n = if n % 2 == 1 { 3 * n + 1 } else { n / 2 };
        steps += 1;
    }
    steps
}

#[test_log::test]
fn straight_line_programs_use_r0_as_an_ordinary_register() {
    // Mesa's clear program starts `mov r0, u2` (0.2f), its vertex shaders
    // `iadd r0, ...`: without control flow r0 is a plain register, and
    // every lane keeps running whatever its r0l holds.
    let source = "
        mov_imm r0, 0x3e4ccccd
        get_sr r1, sr52
        iadd r0, r0, r1
        device_store 0, i32, x, r0, u0_u1, r1, unsigned, 0
        stop";
    let (m, group) = run_over_data(source);
    let expected: Vec<u32> = (0..32).map(|lane| 0x3e4c_cccd + lane).collect();
    assert_eq!(m.memory.peek_u32s(DATA, 32), expected);
    assert_eq!(group.exec_mask(), u32::MAX);
}

#[test_log::test]
fn the_exec_mask_changes_only_at_exec_mask_instructions() {
    // r0l = lane & 1 written by an ordinary instruction leaves every lane
    // running; `pop_exec r0l, 0` then takes the mask from the counts (odd
    // lanes off), and `pop_exec r0l, 1` turns them back on.
    let source = "
        get_sr r1, sr52
        and r0, r1, 1
        mov_imm r2, 1
        device_store 0, i32, x, r2, u0_u1, r1, unsigned, 0
        pop_exec r0l, 0
        mov_imm r2, 2
        device_store 0, i32, x, r2, u2_u3, r1, unsigned, 0
        pop_exec r0l, 1
        mov_imm r2, 3
        device_store 0, i32, x, r2, u4_u5, r1, unsigned, 0
        stop";
    let mut m = Machine::new(source);
    m.memory.map(DATA, 0x1000, true);
    for (pair, offset) in [(0, 0), (2, 0x100), (4, 0x200)] {
        set_pair(&mut m.uniforms, pair, DATA + offset);
    }
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(m.memory.peek_u32s(DATA, 32), vec![1; 32]);
    let evens: Vec<u32> = (0..32)
        .map(|lane| if lane % 2 == 0 { 2 } else { 0 })
        .collect();
    assert_eq!(m.memory.peek_u32s(DATA + 0x100, 32), evens);
    assert_eq!(m.memory.peek_u32s(DATA + 0x200, 32), vec![3; 32]);
}

#[test_log::test]
fn a_texture_instruction_no_lane_runs_does_not_reach_the_texture_unit() {
    // Every lane switched off around a sample, in a stage with no texture
    // unit (this machine has none): nothing is asked, nothing fails, and
    // the lanes come back for the store after it.
    let source = "
        mov_imm r0, 1
        get_sr r1, sr52
        pop_exec r0l, 0
        texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r12_r13_r14_r15, None, ts0, ss0, tex_2d, r10_r11, auto_lod, 0, 0, r0
        pop_exec r0l, 1
        mov_imm r2, 7
        device_store 0, i32, x, r2, u0_u1, r1, unsigned, 0
        stop";
    let (m, _) = run_over_data(source);
    assert_eq!(m.memory.peek_u32s(DATA, 32), vec![7; 32]);
}

#[test_log::test]
fn branchy_integer_routine() {
    // Collatz step counts for n = lane + 1 + u0: divergent nested
    // branches inside a loop whose trip count differs per lane.
    let source = "
        get_sr r1, sr52
        iadd r1, r1, u0
        iadd r1, r1, 1
        mov_imm r2, 0
        if_icmp r0l, nueq, r1, 1, 1
        jmp_exec_none done
    loop:
        and r3, r1, 1
        if_icmp r0l, ueq, r3, 1, 1
            imadd r1, r1, 3, 1
        else_icmp r0l, ueq, 0, 0, 1
            bfeil r1, 0, r1, 1
        pop_exec r0l, 1
        iadd r2, r2, 1
        while_icmp r0l, nueq, r1, 1, 1
        jmp_exec_any loop
    done:
        pop_exec r0l, 1
        stop";
    for start in [0u32, 1000] {
        let mut m = Machine::new(source);
        m.uniforms[0] = start;
        let mut group = m.group();
        assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
        for lane in 0..32 {
            let n = start + lane as u32 + 1;
            assert_eq!(
                group.read(Reg::r(2), lane),
                u64::from(collatz_steps(n)),
                "n = {n}"
            );
        }
    }
}

#[test_log::test]
fn memory_formats_convert_on_load_and_store() {
    let source = "
        device_load 0, u8norm, xyzw, r4_r5_r6_r7, u0_u1, 0, signed
        device_load 0, i16, xy, r8l_r8h, u0_u1, 4, signed
        device_load 0, s8norm, xy, r9l_r9h, u0_u1, 0, signed
        device_load 0, srgba8, xyzw, r10_r11_r12_r13, u0_u1, 0, signed
        wait 0
        device_store 0, u16norm, xz, r14_r15, u2_u3, 0, signed, 0
        device_store 0, rgb10a2, xyzw, r16_r17_r18_r19, u2_u3, 4, signed, 0
        device_store 0, rg11b10f, xyz, r20_r21_r22, u2_u3, 8, signed, 0
        device_store 0, rgb9e5, xyz, r20_r21_r22, u2_u3, 9, signed, 0
        device_store 0, rgb9e5, y, r23, u2_u3, 10, signed, 0
        stop";
    let mut m = Machine::new(source);
    m.memory.map(DATA, 0x1000, true);
    m.memory
        .poke(DATA, &[0, 51, 255, 128, 0x34, 0x12, 0xFE, 0xFF]);
    // The word the y-only rgb9e5 store updates holds r = 1.0 (256 at
    // exponent 16), which the store must keep.
    m.memory
        .poke(DATA + 0x128, &(256u32 | 16 << 27).to_le_bytes());
    set_pair(&mut m.uniforms, 0, DATA);
    set_pair(&mut m.uniforms, 2, DATA + 0x100);
    let mut group = SimdGroup::new(CODE_BASE, 1);
    for (r, v) in [
        (14, 0.5f32),
        (15, 2.0),
        (16, 1.0),
        (17, 0.0),
        (18, 1.0),
        (19, 1.0 / 3.0),
        (20, 1.0),
        (21, 2.0),
        (22, 0.5),
        (23, 1.0),
    ] {
        group.write(Reg::r(r), 0, u64::from(v.to_bits()));
    }
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    let r = |n: u16| f32::from_bits(group.read(Reg::r(n), 0) as u32);
    assert_eq!([r(4), r(5), r(6), r(7)], [0.0, 0.2, 1.0, 128.0 / 255.0]);
    // u16norm stores x and z (mask skips y in memory, not in registers).
    let stored = m.memory.peek(DATA + 0x100, 6);
    assert_eq!(stored, [0x00, 0x80, 0, 0, 0xFF, 0xFF]);
    // rgb10a2 packs into one word at byte 16 (offset 4 scaled by 4).
    let word = m.memory.peek_u32s(DATA + 0x110, 1)[0];
    assert_eq!(word, 0x3FF | 0x3FF << 20 | 1 << 30);
    // rg11b10f: 1, 2 and 0.5 are exponents 15, 16 and 14, mantissas 0.
    // rgb9e5: 2 sets the shared exponent to 17 (2^-7 a unit): 128, 256,
    // 64. A store of y = 1.0 alone keeps the word's r = 1.0 (and b = 0).
    let words = m.memory.peek_u32s(DATA + 0x120, 3);
    assert_eq!(
        words,
        [
            15 << 6 | 16 << 17 | 14 << 27,
            128 | 256 << 9 | 64 << 18 | 17 << 27,
            256 | 256 << 9 | 16 << 27
        ]
    );

    // i16 elements at offset 4 (scaled by the element size: byte 8).
    assert_eq!(group.read(Reg::l(8), 0), 0);
    m.memory.poke(DATA + 8, &[0xCD, 0xAB, 0x01, 0x00]);
    let mut group2 = SimdGroup::new(CODE_BASE, 1);
    assert_eq!(m.run(&mut group2), Ok(Exit::Stopped));
    assert_eq!(group2.read(Reg::l(8), 0), 0xABCD);
    assert_eq!(group2.read(Reg::h(8), 0), 1);
    // s8norm 0 and 51/127 as fp16 in 16-bit registers.
    assert_eq!(
        group2.read(Reg::h(9), 0),
        u64::from(half::f16::from_f32(51.0 / 127.0).to_bits())
    );
    // sRGB decodes rgb, alpha stays linear.
    let srgb = |n: u16| f32::from_bits(group2.read(Reg::r(n), 0) as u32);
    assert_eq!(srgb(12), 1.0);
    assert!((srgb(11) - 0.033_104_766).abs() < 1e-6, "{}", srgb(11));
    assert_eq!(srgb(13), 128.0 / 255.0);
}

#[test_log::test]
fn unaligned_addresses_round_down_to_the_element() {
    let mut m = Machine::new("device_load 0, i32, x, r2, u0_u1, 0, signed\nstop");
    m.memory.map(DATA, 0x1000, true);
    m.memory.poke_u32s(DATA, &[0x1111_1111, 0x2222_2222]);
    set_pair(&mut m.uniforms, 0, DATA + 6);
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::r(2), 0), 0x2222_2222);
    // i32 elements cannot go to 16-bit registers, in either memory.
    for source in [
        "device_load 0, i32, x, r2l, u0_u1, 0, signed\nstop",
        "threadgroup_load i32, x, r2l, 0, 0\nstop",
    ] {
        let mut m = Machine::new(source);
        m.threadgroup = vec![0; 16];
        let mut group = m.group();
        assert!(
            matches!(m.run(&mut group), Err(ExecError::Unsupported { .. })),
            "{source}"
        );
    }
}

#[test_log::test]
fn memory_faults_name_the_address_and_access() {
    let mut m = Machine::new("device_load 0, i32, x, r2, u0_u1, r1, unsigned\nstop");
    set_pair(&mut m.uniforms, 0, 0xDEAD_0000);
    let mut group = m.group();
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    let err = m.run(&mut group).unwrap_err();
    assert_eq!(err.fault_address(), Some(0xDEAD_0000));
    assert!(matches!(
        err,
        ExecError::Memory { pc: CODE_BASE, fault } if fault.access == AccessKind::Read && fault.reason == FaultReason::Unmapped
    ));
    // Stores into the (read-only) code.
    let mut m = Machine::new("device_store 0, i32, x, r2, u0_u1, 0, signed, 0\nstop");
    set_pair(&mut m.uniforms, 0, CODE_BASE);
    let mut group = m.group();
    let err = m.run(&mut group).unwrap_err();
    assert!(matches!(
        err,
        ExecError::Memory { fault, .. } if fault.reason == FaultReason::Permission && fault.address == CODE_BASE
    ));
    // A lane-dependent address: the first lane whose address is unmapped.
    let mut m = Machine::new("device_load 0, i32, x, r2, u0_u1, r1, unsigned\nstop");
    m.memory.map(DATA, 0x4000, true);
    set_pair(&mut m.uniforms, 0, DATA);
    let mut group = m.group();
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64 * 0x400);
    }
    let err = m.run(&mut group).unwrap_err();
    assert_eq!(err.fault_address(), Some(DATA + 0x4000));
}

#[test_log::test]
fn threadgroup_memory_with_barrier_across_groups() {
    // Each lane of two groups stores its thread index; after the barrier
    // each reads its mirror's value (index 63 - i).
    let source = "
        get_sr r1l, sr51
        threadgroup_store i32, x, r2, 0, r1l
        threadgroup_barrier
        mov_imm r3l, 63
        iadd r3l, r3l, r1l.neg_is_not_allowed
        stop";
    assert!(agx_hw::isa::text::assemble(source, 0).is_err());
    let source = "
        get_sr r1l, sr51
        get_sr r2, sr51
        threadgroup_store i32, x, r2, 0, r1l
        threadgroup_barrier
        isub r3, 63, r2
        threadgroup_load i32, x, r4, 0, r3l
        stop";
    let mut m = Machine::new(source);
    m.threadgroup = vec![0; 64 * 4];
    let mut groups: Vec<SimdGroup> = (0..2)
        .map(|g| {
            let mut group = m.group();
            group
                .special
                .set_lanes(51, std::array::from_fn(|lane| (32 * g + lane) as u32));
            group
        })
        .collect();
    for group in &mut groups {
        assert_eq!(m.run(group), Ok(Exit::Barrier));
    }
    for group in &mut groups {
        assert_eq!(m.run(group), Ok(Exit::Stopped));
    }
    for (g, group) in groups.iter().enumerate() {
        for lane in 0..32 {
            assert_eq!(group.read(Reg::r(4), lane), (63 - (32 * g + lane)) as u64);
        }
    }
    // Out of bounds is a fault, not a panic.
    let mut m = Machine::new("mov_imm r1l, 64\nthreadgroup_load i32, x, r4, 0, r1l\nstop");
    m.threadgroup = vec![0; 64 * 4];
    let mut group = m.group();
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::ThreadgroupBounds {
            offset_bytes: 256,
            ..
        })
    ));
}

#[test_log::test]
fn uniform_store_writes_halves() {
    let mut m =
        Machine::new("mov_imm r2, 305419896\nuniform_store 2, i16, xy, 0, r2l_r2h, 12\nstop");
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(m.uniforms[6], 0x1234_5678);
    let mut m = Machine::new("uniform_store 2, i16, xy, 0, r2l_r2h, 511\nstop");
    let mut group = m.group();
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::UniformBounds { half: 512, .. })
    ));
}

/// Each atomic operation and the word it leaves from `old` (negative as
/// i32, so that signed and unsigned orders differ) with a small positive
/// `value`; compare-exchange's second register (the value compared) is
/// `old` in the tests, so it swaps.
fn atomic_cases(old: u32, value: u32) -> [(&'static str, u32); 11] {
    assert!((old as i32) < 0 && value < 0x8000_0000 && value < old);
    [
        ("add", old.wrapping_add(value)),
        ("sub", old.wrapping_sub(value)),
        ("xchg", value),
        ("umin", value),
        ("imin", old),
        ("umax", old),
        ("imax", value),
        ("and", old & value),
        ("or", old | value),
        ("xor", old ^ value),
        ("cmpxchg", value),
    ]
}

/// Each atomic operation on one lane, on words with the sign bit set so
/// that signed and unsigned orders differ: the word becomes what the
/// operation says and the destination gets the old word.
#[test_log::test]
fn every_atomic_operation_returns_the_old_word() {
    let old = 0x8000_0005u32; // negative as i32
    let cases = atomic_cases(old, 9);
    let mut source = String::from("mov_imm r2, 9\nmov_imm r3, 2147483653\n");
    for (i, (op, _)) in cases.iter().enumerate() {
        let data = if *op == "cmpxchg" { "r2_r3" } else { "r2" };
        source += &format!(
            "atomic {op}, 0, r{}, u0_u1, {i}, signed, {data}, 1, 1, 1, 1\n",
            10 + i
        );
    }
    // A compare-exchange that finds another value leaves the word.
    source += "mov_imm r3, 1\natomic cmpxchg, 0, r30, u0_u1, 11, signed, r2_r3, 1, 1, 1, 1\nstop";
    let mut m = Machine::new(&source);
    m.memory.map(DATA, 0x1000, true);
    m.memory.poke_u32s(DATA, &[old; 12]);
    set_pair(&mut m.uniforms, 0, DATA);
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    let words = m.memory.peek_u32s(DATA, 12);
    for (i, (op, want)) in cases.iter().enumerate() {
        assert_eq!(words[i], *want, "{op}: the word");
        assert_eq!(
            group.read(Reg::r(10 + i as u16), 0),
            u64::from(old),
            "{op}: the old word"
        );
    }
    assert_eq!(words[11], old, "a failed compare-exchange");
    assert_eq!(group.read(Reg::r(30), 0), u64::from(old));
}

#[test_log::test]
fn each_instruction_is_decoded_once() {
    let source = "
        mov_imm r10, 0
    loop:
        iadd r10, r10, 1
        while_icmp r0l, ult, r10, 50, 1
        jmp_exec_any loop
        pop_exec r0l, 1
        stop";
    let mut m = Machine::new(source);
    for _ in 0..10 {
        let mut group = m.group();
        assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
        assert_eq!(group.read(Reg::r(10), 0), 50);
    }
    assert_eq!(m.cache.decode_count(), 6);
}

/// A fragment-stage stand-in: a 32-pixel tilebuffer row, varyings that
/// are functions of the lane, a texture unit that echoes its inputs.
#[derive(Default)]
struct FragmentUnits {
    tile: HashMap<(usize, u32), [u32; 4]>,
    varyings: Vec<(usize, u32, u32)>,
    textures: Vec<TextureRequest>,
    coverage: Vec<(usize, u32, u32)>,
    depth: Vec<(usize, u32, Option<f32>, Option<u16>)>,
    blocks: Vec<BlockStore>,
}

impl ShaderIo for FragmentUnits {
    fn texture(
        &mut self,
        requests: &[Option<TextureRequest>; agx_firmware_sim::usc::LANES],
        texels: &mut [[u32; 4]; agx_firmware_sim::usc::LANES],
    ) -> Result<(), IoError> {
        for (lane, request) in requests.iter().enumerate() {
            let Some(request) = request else { continue };
            self.textures.push(*request);
            texels[lane] = match request.texture {
                TextureHandle::Index(i) if i < 4 => {
                    [lane as u32, i, request.sampler, request.coords[0]]
                }
                _ => {
                    return Err(IoError::Invalid(
                        "texture index past the bound textures".into(),
                    ))
                }
            };
        }
        Ok(())
    }

    fn tile_load(&mut self, lane: usize, access: &TileAccess) -> Result<[u32; 4], IoError> {
        Ok(self
            .tile
            .get(&(lane, access.offset_bytes))
            .copied()
            .unwrap_or_default())
    }

    fn tile_store(
        &mut self,
        lane: usize,
        access: &TileAccess,
        values: [u32; 4],
    ) -> Result<(), IoError> {
        self.tile.insert((lane, access.offset_bytes), values);
        Ok(())
    }

    fn interpolate(
        &mut self,
        lane: usize,
        cf: u32,
        count: usize,
        interpolation: Interpolation,
        perspective_w: Option<u32>,
    ) -> Result<[f32; 4], IoError> {
        assert_eq!(interpolation, Interpolation::Center);
        let w = perspective_w.map_or(1.0, |w| w as f32);
        let mut out = [0.0; 4];
        for (i, v) in out.iter_mut().enumerate().take(count) {
            *v = (lane as f32 + cf as f32 * 100.0 + i as f32) / w;
        }
        Ok(out)
    }

    fn store_varying(&mut self, lane: usize, slot: u32, value: u32) -> Result<(), IoError> {
        self.varyings.push((lane, slot, value));
        Ok(())
    }

    fn sample_mask(&mut self, lane: usize, which: u32, coverage: u32) -> Result<(), IoError> {
        self.coverage.push((lane, which, coverage));
        Ok(())
    }

    fn depth_stencil(
        &mut self,
        lane: usize,
        which: u32,
        depth: Option<f32>,
        stencil: Option<u16>,
    ) -> Result<(), IoError> {
        self.depth.push((lane, which, depth, stencil));
        Ok(())
    }

    fn block_store(&mut self, request: &BlockStore) -> Result<(), IoError> {
        self.blocks.push(*request);
        Ok(())
    }
}

#[test_log::test]
fn texture_loads_take_16_bit_coordinates() {
    // Mesa's tile reload: the pixel's coordinates as two 16-bit halves.
    let source = "
        get_sr r4l, sr80
        mov_imm r4h, 40000
        texture_load 0, 0b1100, 0, none, xyzw, 0b00, r0_r1_r2_r3, None, ts3, ss0, tex_2d, r4l_r4h, lod_min, r6l, 0, r0
        wait 0
        stop";
    let mut m = Machine::new(source);
    let mut group = m.group();
    group
        .special
        .set_lanes(80, std::array::from_fn(|lane| 0x1_0000 | (7 + lane as u32)));
    let mut io = FragmentUnits::default();
    assert_eq!(m.run_with(&mut group, &mut io), Ok(Exit::Stopped));
    assert_eq!(io.textures.len(), 32);
    for (lane, request) in io.textures.iter().enumerate() {
        assert!(request.load);
        assert_eq!(request.coords[..2], [7 + lane as u32, 40000]);
    }
    // A sample with 16-bit coordinates is refused, not misread.
    let mut m = Machine::new(
        "texture_sample 0, 0b1100, 0, none, x, 0b00, r0, None, ts0, ss0, tex_2d, r4l_r4h, auto_lod, 0, 0, r0\nstop",
    );
    let mut group = m.group();
    let error = m.run_with(&mut group, &mut FragmentUnits::default());
    assert!(
        matches!(&error, Err(ExecError::Unsupported { what, .. }) if what.contains("16-bit")),
        "{error:?}"
    );
}

#[test_log::test]
fn fragment_io_iterates_samples_and_writes_the_tilebuffer() {
    let source = "
        iter r0_r1, cf1, center, 0, 0, 0, 0, 0
        iterproj r2_r3_r4, cf2, cf4, center, 0, 0, 0, 0, 0
        texture_sample 0, 0b1100, 0, none, xyw, 0b00, r8_r9_r10, None, ts2, ss1, tex_2d, r0_r1, auto_lod, 0, 0, r0
        wait 0
        st_tile r8_r9_r10, i32, 0, xyz, 16, 255, r0, 0
        ld_tile r12_r13_r14, i32, 0, xyz, 16, 255, r0, 0
        wait_pix 1, 0
        sample_mask 255, 1
        zs_emit 255, zs, r20l_r20h_r21l, 0
        signal_pix 1, 0
        stop";
    let mut m = Machine::new(source);
    let mut group = m.group();
    for lane in 0..32 {
        group.write(Reg::r(20), lane, u64::from(0.25f32.to_bits()));
        group.write(Reg::l(21), lane, 7);
    }
    let mut io = FragmentUnits::default();
    // iter overwrites r0/r1: without control flow r0 is an ordinary
    // register, and every lane keeps running.
    assert_eq!(m.run_with(&mut group, &mut io), Ok(Exit::Stopped));
    for lane in 0..32usize {
        let lane_f = lane as f32;
        assert_eq!(
            group.read(Reg::r(1), lane),
            u64::from((lane_f + 101.0).to_bits())
        );
        assert_eq!(
            group.read(Reg::r(3), lane),
            u64::from(((lane_f + 201.0) / 4.0).to_bits())
        );
        // xyw of [lane, texture, sampler, coord x] packs into three registers.
        assert_eq!(group.read(Reg::r(8), lane), lane as u64);
        assert_eq!(group.read(Reg::r(9), lane), 2);
        assert_eq!(
            group.read(Reg::r(10), lane),
            u64::from((lane_f + 100.0).to_bits())
        );
        assert_eq!(
            io.tile[&(lane, 16)][..3],
            [lane as u32, 2, (lane_f + 100.0).to_bits()]
        );
        assert_eq!(
            group.read(Reg::r(14), lane),
            u64::from((lane_f + 100.0).to_bits())
        );
    }
    // Auto LOD gets quad derivatives of the coordinates: d(x)/dx = 1
    // (neighbouring lanes differ by one), d(x)/dy = 2.
    let LodArgument::Auto { ddx, ddy, bias } = io.textures[0].lod else {
        panic!("auto lod")
    };
    assert_eq!((ddx[0], ddy[0], bias), (1.0, 2.0, 0.0));
    assert_eq!(io.coverage.len(), 32);
    assert_eq!(io.depth[5], (5, 255, Some(0.25), Some(7)));
}

#[test_log::test]
fn vertex_outputs_and_block_stores_reach_their_units() {
    let source = "
        get_sr r2, sr52
        st_var 1, r2, 4
        st_var_final 1, r2, 7
        mov_imm r4, 64
        mov_imm r5, 3
        image_write_block r4, r5, 0, None, ts1, tex_2d, rte, u8norm, 0, 9, 1
        stop";
    let mut m = Machine::new(source);
    let mut group = SimdGroup::new(CODE_BASE, 0b111);
    let mut io = FragmentUnits::default();
    assert_eq!(m.run_with(&mut group, &mut io), Ok(Exit::Stopped));
    assert_eq!(
        io.varyings,
        [
            (0, 4, 0),
            (1, 4, 1),
            (2, 4, 2),
            (0, 7, 0),
            (1, 7, 1),
            (2, 7, 2)
        ]
    );
    assert_eq!(
        io.blocks.len(),
        1,
        "one block store per instruction, not per lane"
    );
    assert_eq!(io.blocks[0].tilebuffer_offset_bytes, 64);
    assert_eq!(io.blocks[0].coords[0], 3, "the layer");
    assert!(!io.blocks[0].explicit_coords);
    assert_eq!(io.blocks[0].texture, TextureHandle::Index(1));
}

#[test_log::test]
fn units_report_errors_as_faults() {
    // A texture the unit refuses.
    let mut m = Machine::new(
        "texture_sample 0, 0b1100, 0, none, x, 0b00, r8, None, ts9, ss0, tex_2d, r4_r5, auto_lod, 0, 0, r0\nstop",
    );
    let mut group = m.group();
    let err = m
        .run_with(&mut group, &mut FragmentUnits::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::Io {
                pc: CODE_BASE,
                error: IoError::Invalid(_)
            }
        ),
        "{err}"
    );
    // A compute dispatch has no tilebuffer.
    let mut m = Machine::new("st_tile r0, i32, 0, x, 0, 255, r0, 0\nstop");
    let mut group = m.group();
    let err = m.run(&mut group).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::Io {
                error: IoError::Unavailable(_),
                ..
            }
        ),
        "{err}"
    );
}

#[test_log::test]
fn budget_is_shared_across_resumes() {
    let mut m = Machine::new("threadgroup_barrier\nthreadgroup_barrier\nstop");
    let mut group = m.group();
    let mut cache = ProgramCache::new();
    let mut budget = 2u64;
    let mut env = Env {
        memory: &mut m.memory,
        io: &mut agx_firmware_sim::usc::NoIo,
        uniforms: &mut m.uniforms,
        threadgroup: &mut [],
    };
    assert_eq!(
        group.run(&mut cache, &mut env, &mut budget),
        Ok(Exit::Barrier)
    );
    assert_eq!(
        group.run(&mut cache, &mut env, &mut budget),
        Ok(Exit::Barrier)
    );
    assert!(matches!(
        group.run(&mut cache, &mut env, &mut budget),
        Err(ExecError::Timeout { .. })
    ));
    let _ = BUDGET;
}

/// An inclusive prefix sum built from shuffles (Hillis and Steele: five
/// rounds of "add the value `k` lanes below"), as a compiler without a
/// prefix instruction would write it, against the hardware's own
/// exclusive prefix and a plain Rust scan.
#[test_log::test]
fn a_prefix_sum_with_shuffles_matches_the_prefix_instruction_and_a_plain_scan() {
    let mut source = String::from("get_sr r2, sr52\nmov r3, r1\n");
    for k in [1, 2, 4, 8, 16] {
        source += &format!(
            "simd_shuffle_up r4, r3, {k}\nicmpsel ult, r5, r2, {k}, 0, r4\niadd r3, r3, r5\n"
        );
    }
    source += "simd_prefix_iadd r6, r1\niadd r6, r6, r1\nsimd_iadd r7, r1\nstop";
    let mut m = Machine::new(&source);
    let mut group = m.group();
    let value = |lane: usize| (lane as u64 * 2_654_435_761) % 1000;
    for lane in 0..32 {
        group.write(Reg::r(1), lane, value(lane));
    }
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    let mut running = 0;
    for lane in 0..32 {
        running += value(lane);
        assert_eq!(
            group.read(Reg::r(3), lane),
            running,
            "shuffles, lane {lane}"
        );
        assert_eq!(group.read(Reg::r(6), lane), running, "prefix, lane {lane}");
        assert_eq!(group.read(Reg::r(7), lane), (0..32).map(value).sum::<u64>());
    }
}

/// Stack memory as the block registers describe it: two blocks of 32
/// threads x 8 words (size code 1) at `STACK` and `STACK + 0x400`; each
/// thread's word w of a block is at (32 w + lane) x 4, and the stack
/// pointer starts at the top (64 bytes).
#[test_log::test]
fn stack_accesses_interleave_threads_and_stay_inside_the_stack() {
    const STACK: u64 = 0x4000_0000;
    let blocks = [
        (STACK >> 8) as u32 | 1,
        ((STACK + 0x400) >> 8) as u32 | 1,
        0,
        0,
    ];
    let source = "
        stack_adjust 0, 1, 2, 0, 0, 12
        get_sr r2, sr52
        iadd r3, r2, 100
        stack_store i32, 1, 0, xy, 4, r2_r3, 28, 0
        stack_load r6_r7, i32, 1, 0, xy, 4, 28, 0
        mov_imm r8, 4
        stack_store i16, 1, 0, x, 4, r2l, r8, 0
        stack_adjust 0, 1, 2, 0, 0, -12
        stop";
    let mut m = Machine::new(source);
    m.memory.map(STACK, 0x800, true);
    let mut group = m.group();
    group.stack = Stack::mapped(blocks);
    assert_eq!(group.stack.size_bytes(), 64);
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.stack.sp_bytes, 64);
    // sp = 64 - 48 = 16: the pair at bytes 44 and 48 (words 11 and 12:
    // block 1's words 3 and 4), the half at byte 20 (block 0's word 5).
    let words = m.memory.peek_u32s(STACK, 0x200);
    for lane in 0..32u32 {
        let at = |block: usize, word: usize| 256 * block + 32 * word + lane as usize;
        assert_eq!(words[at(1, 3)], lane, "lane {lane}");
        assert_eq!(words[at(1, 4)], lane + 100, "lane {lane}");
        assert_eq!(words[at(0, 5)], lane, "lane {lane}");
        assert_eq!(group.read(Reg::r(6), lane as usize), u64::from(lane));
        assert_eq!(group.read(Reg::r(7), lane as usize), u64::from(lane + 100));
    }
    // Past the top, below the bottom, and without a stack: refused.
    for (body, stack, offset) in [
        ("stack_load r6, i32, 1, 0, x, 4, 0, 0", blocks, 64),
        ("stack_adjust 0, 1, 2, 0, 0, 17", blocks, -4),
        ("stack_adjust 0, 1, 2, 0, 0, -1", blocks, 68),
        ("stack_store i32, 1, 0, x, 4, r2, -4, 0", [0; 4], -4),
    ] {
        let mut m = Machine::new(&format!("{body}\nstop"));
        m.memory.map(STACK, 0x800, true);
        let mut group = m.group();
        group.stack = Stack::mapped(stack);
        assert!(
            matches!(
                m.run(&mut group),
                Err(ExecError::StackBounds { offset_bytes, .. }) if offset_bytes == offset
            ),
            "{body}"
        );
    }
}

/// A stack access is made element by element, lane then component: the
/// elements before the first one outside the stack, or the first that
/// faults, are stored or loaded; none after it.
#[test_log::test]
fn stack_accesses_stop_at_the_first_element_outside_the_stack_or_memory() {
    const STACK: u64 = 0x4000_0000;
    let blocks = [
        (STACK >> 8) as u32 | 1,
        ((STACK + 0x400) >> 8) as u32 | 1,
        0,
        0,
    ];
    // sp = 16 after the adjust; lanes 0-3 at offset 0 (words 4 and 5),
    // lane 4 at 44: its x at byte 60 (block 1's word 7), its y at 64,
    // past the 64-byte stack.
    let store = "
        stack_adjust 0, 1, 2, 0, 0, 12
        stack_store i32, 1, 0, xy, 4, r2_r3, r8, 0
        stop";
    let mut m = Machine::new(store);
    m.memory.map(STACK, 0x800, true);
    let mut group = m.group();
    group.stack = Stack::mapped(blocks);
    for lane in 0..32 {
        group.write(Reg::r(2), lane, 1000 + lane as u64);
        group.write(Reg::r(3), lane, 2000 + lane as u64);
        group.write(Reg::r(8), lane, if lane == 4 { 44 } else { 0 });
    }
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::StackBounds {
            offset_bytes: 64,
            ..
        })
    ));
    let words = m.memory.peek_u32s(STACK, 0x200);
    let at = |block: usize, word: usize, lane: usize| 256 * block + 32 * word + lane;
    for lane in 0..32 {
        let stored = lane < 4;
        assert_eq!(
            words[at(0, 4, lane)],
            if stored { 1000 + lane as u32 } else { 0 }
        );
        assert_eq!(
            words[at(0, 5, lane)],
            if stored { 2000 + lane as u32 } else { 0 }
        );
    }
    assert_eq!(words[at(1, 7, 4)], 1004, "lane 4's x, inside the stack");

    // Block 1 on a page of its own, unmapped: lane 3's x (byte 36, block
    // 1's word 1) faults; lanes 0-2 have loaded both words, lane 3 and on
    // nothing.
    let far = STACK + 0x1_0000;
    let blocks = [blocks[0], (far >> 8) as u32 | 1, 0, 0];
    let load = "
        stack_adjust 0, 1, 2, 0, 0, 12
        stack_load r6_r7, i32, 1, 0, xy, 4, r8, 0
        stop";
    let mut m = Machine::new(load);
    m.memory.map(STACK, 0x400, true);
    let values: Vec<u32> = (0..256).map(|i| 5000 + i).collect();
    m.memory.poke_u32s(STACK, &values);
    let mut group = m.group();
    group.stack = Stack::mapped(blocks);
    for lane in 0..32 {
        group.write(Reg::r(6), lane, 0xDEAD);
        group.write(Reg::r(7), lane, 0xDEAD);
        group.write(Reg::r(8), lane, if lane == 3 { 20 } else { 0 });
    }
    let fault_at = far + (32 + 3) * 4;
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::Memory { fault, .. }) if fault.address == fault_at
    ));
    for lane in 0..32 {
        let (x, y) = if lane < 3 {
            (
                u64::from(values[at(0, 4, lane)]),
                u64::from(values[at(0, 5, lane)]),
            )
        } else {
            (0xDEAD, 0xDEAD)
        };
        assert_eq!(group.read(Reg::r(6), lane), x, "lane {lane}");
        assert_eq!(group.read(Reg::r(7), lane), y, "lane {lane}");
    }
}

/// `stack_map`/`stack_unmap` write and read the block registers; a
/// doorbell hands the group back to its caller with the value rung.
#[test_log::test]
fn helper_instructions_map_blocks_and_ring_the_doorbell() {
    let source = "
        mov_imm r20, 0x40001
        stack_map target0, r20, 0, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
        doorbell 48
        stack_unmap target0, r21, 0, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
        stop";
    let mut m = Machine::new(source);
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert_eq!(m.run(&mut group), Ok(Exit::Doorbell(48)));
    assert_eq!(group.stack.blocks, [0x40001, 0, 0, 0]);
    assert_eq!(group.stack.size_bytes(), 32);
    group.stack.blocks[0] = 0x80003;
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::r(21), 0), 0x80003);
    // A doorbell in a branch no lane takes is jumped over (Mesa puts
    // `jmp_if_skipping_doorbell` before each); with a lane active it rings.
    let mut m = Machine::new(
        "if_icmp r0l, ueq, r1, 1, 1
        jmp_if_skipping_doorbell skipped
        doorbell 49
    skipped:
        pop_exec r0l, 1
        jmp_if_skipping_doorbell rung
        doorbell 48
    rung:
        stop",
    );
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert_eq!(m.run(&mut group), Ok(Exit::Doorbell(48)));
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    // Fields Mesa never sets are refused, not guessed.
    let mut m =
        Machine::new("stack_map target1, r20, 0, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1\nstop");
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::Unsupported { .. })
    ));
}

/// Each threadgroup atomic operation on words of threadgroup memory: the
/// word becomes what the operation says and the destination gets the
/// old word; the lanes of a group apply theirs one after another.
#[test_log::test]
fn threadgroup_atomics_update_words_and_return_the_old_ones() {
    let old = 0x8000_0005u32;
    let cases = atomic_cases(old, 9);
    let mut source = String::from("mov_imm r2, 9\nmov_imm r3, 2147483653\n");
    for (i, (op, _)) in cases.iter().enumerate() {
        let data = if *op == "cmpxchg" { "r2_r3" } else { "r2" };
        let third = if *op == "cmpxchg" { 129 } else { 128 };
        source += &format!(
            "mov_imm r4l, {i}\nthreadgroup_atomic {op}, r{}, 0, r4l, {data}, 0, 2, {third}, 0\n",
            10 + i
        );
    }
    source += "stop";
    let mut m = Machine::new(&source);
    m.threadgroup = old.to_le_bytes().repeat(12);
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    for (i, (op, want)) in cases.iter().enumerate() {
        let word = u32::from_le_bytes(m.threadgroup[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(word, *want, "{op}: the word");
        assert_eq!(group.read(Reg::r(10 + i as u16), 0), u64::from(old), "{op}");
    }
    // 32 lanes adding 1 to one word, with a 16-bit base register
    // (bytes) and no destination: each lane's add lands.
    let mut m = Machine::new(
        "mov_imm r5l, 8\nmov_imm r6, 1\nthreadgroup_atomic add, 0, r5l, 1, r6, 0, 2, 128, 0\nstop",
    );
    m.threadgroup = vec![0; 16];
    let mut group = m.group();
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(&m.threadgroup[12..16], &32u32.to_le_bytes());
    // Past the end: a bounds fault.
    let mut m =
        Machine::new("mov_imm r6, 1\nthreadgroup_atomic add, 0, 0, 4, r6, 0, 2, 128, 0\nstop");
    m.threadgroup = vec![0; 16];
    let mut group = SimdGroup::new(CODE_BASE, 1);
    assert!(matches!(
        m.run(&mut group),
        Err(ExecError::ThreadgroupBounds {
            offset_bytes: 16,
            ..
        })
    ));
}

#[test_log::test]
fn threadgroup_memory_packs_a_packed_format_into_one_word() {
    // rg11b10f at index 2 is the word at byte 8; a y-only store keeps x
    // and z; the load unpacks the three components.
    let source = "
        threadgroup_store rg11b10f, xyz, r2_r3_r4, 0, 2
        threadgroup_store rg11b10f, y, r5, 0, 2
        threadgroup_load rg11b10f, xyz, r6_r7_r8, 0, 2
        stop";
    let mut m = Machine::new(source);
    m.threadgroup = vec![0; 16];
    let mut group = SimdGroup::new(CODE_BASE, 1);
    for (r, v) in [(2, 1.0f32), (3, 2.0), (4, 0.5), (5, 4.0)] {
        group.write(Reg::r(r), 0, u64::from(v.to_bits()));
    }
    assert_eq!(m.run(&mut group), Ok(Exit::Stopped));
    // 1, 4 and 0.5: exponents 15, 17, 14, mantissas 0.
    let word = u32::from_le_bytes(m.threadgroup[8..12].try_into().unwrap());
    assert_eq!(word, 15 << 6 | 17 << 17 | 14 << 27);
    assert_eq!(m.threadgroup[..8], [0; 8]);
    let r = |n: u16| f32::from_bits(group.read(Reg::r(n), 0) as u32);
    assert_eq!([r(6), r(7), r(8)], [1.0, 4.0, 0.5]);
}

/// A group reset for the next dispatch (tile programs run their groups
/// one after another in one register file) is the group `new` makes:
/// what the last one left in its registers, special registers and mask
/// is gone, and it runs a program the same.
#[test]
fn a_reset_group_runs_as_a_new_one() {
    let source = "
        if_icmp r0l, ueq, r2, 0, 1
        iadd r3, r2, 5
        fadd32 r4, r3, 0.5
        pop_exec r0l, 1
        stop";
    let mut m = Machine::new(source);
    let mut used = SimdGroup::new(CODE_BASE, 0b1111);
    for lane in 0..4 {
        used.write(Reg::r(2), lane, 7 * (lane as u64 % 2));
        used.write(Reg::r(100), lane, 0xDEAD);
    }
    used.special.set_all(60, 9);
    assert_eq!(m.run(&mut used), Ok(Exit::Stopped));
    used.reset(CODE_BASE, 0b11);
    let mut fresh = SimdGroup::new(CODE_BASE, 0b11);
    assert_eq!(used.exec_mask(), 0b11);
    assert_eq!(used.special.lane(60, 0), None);
    assert_eq!(used.executed_instructions, 0);
    for r in 0..128 {
        for lane in 0..32 {
            assert_eq!(used.read(Reg::r(r), lane), 0, "r{r} lane {lane}");
        }
    }
    assert_eq!(m.run(&mut used), m.run(&mut fresh));
    for r in [3, 4] {
        for lane in 0..32 {
            assert_eq!(
                used.read(Reg::r(r), lane),
                fresh.read(Reg::r(r), lane),
                "r{r} lane {lane}"
            );
        }
    }
    // Lane 2 ran the `if` before the reset, and is not present after it.
    assert_eq!(used.read(Reg::r(3), 0), 5);
    assert_eq!(used.read(Reg::r(3), 2), 0);

    // Again with only what the program writes (integer and fp32 results)
    // to clear: lane 2's r3 and r4 from the four-lane run must go.
    used.reset(CODE_BASE, 0b1111);
    for lane in 0..4 {
        used.write(Reg::r(2), lane, 7 * (lane as u64 % 2));
    }
    assert_eq!(m.run(&mut used), Ok(Exit::Stopped));
    assert_eq!(used.read(Reg::r(4), 2), u64::from(0.5f32.to_bits()));
    used.reset(CODE_BASE, 0b11);
    let mut fresh = SimdGroup::new(CODE_BASE, 0b11);
    assert_eq!(m.run(&mut used), m.run(&mut fresh));
    for r in 0..128 {
        for lane in 0..32 {
            assert_eq!(
                used.read(Reg::r(r), lane),
                fresh.read(Reg::r(r), lane),
                "r{r} lane {lane}, second round"
            );
        }
    }
}
