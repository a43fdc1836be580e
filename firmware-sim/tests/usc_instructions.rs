//! Per-instruction semantics of the shader core: every lane of a
//! SIMD-group computes a hand-derived value, and lanes the exec mask
//! disables (r0l != 0, taken into the mask by `pop_exec r0l, 0`) keep their
//! registers untouched.

mod common;

use agx_firmware_sim::usc::{ExecError, Exit, SimdGroup};
use agx_hw::isa::Reg;
use common::Machine;
use half::f16;

/// Lanes 2, 5, 8, ... start disabled.
fn disabled(lane: usize) -> bool {
    lane % 3 == 2
}

const SENTINEL: u32 = 0xDEAD_BEEF;

/// Runs `body` + `stop` with r10-r20 preset to a sentinel, `init` applied
/// per lane, and every third lane disabled: its r0l count is 1, and a
/// `pop_exec r0l, 0` before the body makes the counts the exec mask.
fn run_lanes(body: &str, init: impl Fn(&mut SimdGroup, usize)) -> SimdGroup {
    let mut machine = Machine::new(&format!("pop_exec r0l, 0\n{body}\nstop"));
    let mut group = machine.group();
    for lane in 0..32 {
        for r in 10..=20 {
            group.write(Reg::r(r), lane, u64::from(SENTINEL));
        }
        init(&mut group, lane);
        group.write(Reg::l(0), lane, u64::from(disabled(lane)));
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    group
}

/// Checks `reg` in every lane: `expected(lane)` where enabled, the
/// sentinel (or its half) where disabled.
fn check(group: &SimdGroup, reg: Reg, expected: impl Fn(usize) -> u64) {
    for lane in 0..32 {
        let got = group.read(reg, lane);
        if disabled(lane) {
            let sentinel = group_sentinel(reg);
            assert_eq!(
                got, sentinel,
                "{reg} lane {lane} is disabled and must keep its value"
            );
        } else {
            assert_eq!(got, expected(lane), "{reg} lane {lane}: got {got:#x}");
        }
    }
}

fn group_sentinel(reg: Reg) -> u64 {
    let mut g = SimdGroup::new(0, 1);
    g.write(Reg::r(reg.half / 2), 0, u64::from(SENTINEL));
    if reg.size == agx_hw::isa::Size::S64 {
        g.write(Reg::r(reg.half / 2 + 1), 0, u64::from(SENTINEL));
    }
    g.read(reg, 0)
}

fn f(v: f32) -> u64 {
    u64::from(v.to_bits())
}

fn h(v: f32) -> u64 {
    u64::from(f16::from_f32(v).to_bits())
}

#[test_log::test]
fn float32_arithmetic_with_modifiers_and_saturation() {
    let g = run_lanes(
        "fadd32 r10, r1, r2\nfmul32 r11, r1.neg, 0.5\nfadd32.sat r12, r1.abs.neg, 1.0\nfmadd32 r13, r1, r2, r1",
        |g, lane| {
            g.write(Reg::r(1), lane, f(lane as f32 * 1.5));
            g.write(Reg::r(2), lane, f(0.25));
        },
    );
    check(&g, Reg::r(10), |l| f(l as f32 * 1.5 + 0.25));
    // Lane 0's product is -0, as IEEE signs it.
    check(&g, Reg::r(11), |l| f(-(l as f32 * 1.5) * 0.5));
    check(
        &g,
        Reg::r(12),
        |l| f((1.0 - l as f32 * 1.5).clamp(0.0, 1.0)),
    );
    check(&g, Reg::r(13), |l| {
        f((l as f32 * 1.5).mul_add(0.25, l as f32 * 1.5))
    });
}

#[test_log::test]
fn fp32_flushes_denormals_and_fma_rounds_once() {
    let g = run_lanes(
        "fmul32 r10, r1, 0.5\nfadd32 r11, r2, 0.0\nfadd32 r12, r2.neg, 0.0\nfmadd32 r13, r3, r4, r5",
        |g, lane| {
            g.write(Reg::r(1), lane, f(f32::MIN_POSITIVE)); // result would be denormal
            g.write(Reg::r(2), lane, 1); // denormal input
            g.write(Reg::r(3), lane, f(1.0 + f32::EPSILON));
            g.write(Reg::r(4), lane, f(1.0 - f32::EPSILON));
            g.write(Reg::r(5), lane, f(-1.0));
        },
    );
    check(&g, Reg::r(10), |_| 0);
    check(&g, Reg::r(11), |_| 0);
    // -0 + 0 is +0 under round-to-nearest.
    check(&g, Reg::r(12), |_| 0);
    // (1 + e)(1 - e) - 1 = -e^2 exactly when fused; 0 if rounded twice.
    check(&g, Reg::r(13), |_| f(-(f32::EPSILON * f32::EPSILON)));
}

#[test_log::test]
fn fp16_arithmetic_keeps_denormals_and_mixes_with_fp32() {
    let g = run_lanes(
        "fadd16 r10l, r1l, r1h\nfmul16 r11l, r2l, 0.5\nfmadd16 r12l, r1l, r1l, r1h\nfadd32 r13l, r1l, 1.0\nfmul32 r14, r1l, 2.0",
        |g, lane| {
            g.write(Reg::l(1), lane, h(lane as f32));
            g.write(Reg::h(1), lane, h(0.5));
            g.write(Reg::l(2), lane, 0x0400); // smallest normal fp16
        },
    );
    let keep_high = |low: u64| (u64::from(SENTINEL) & 0xFFFF_0000) | low;
    check(&g, Reg::r(10), |l| keep_high(h(l as f32 + 0.5)));
    check(&g, Reg::r(11), |_| keep_high(0x0200));
    check(&g, Reg::r(12), |l| keep_high(h((l * l) as f32 + 0.5)));
    check(&g, Reg::r(13), |l| keep_high(h(l as f32 + 1.0)));
    check(&g, Reg::r(14), |l| f(l as f32 * 2.0));
}

#[test_log::test]
fn float_unary_operations() {
    let g = run_lanes(
        "floor r10, r1\nceil r11, r1\ntrunc r12, r1\nrint r13, r1\nrcp r14, r2\nrsqrt r15, r2\nlog2 r16, r2\nexp2 r17, r3\nfloor.sat r18, r4",
        |g, lane| {
            g.write(Reg::r(1), lane, f(lane as f32 * 0.5 - 4.25));
            g.write(Reg::r(2), lane, f(4.0 * (1 << (lane % 4)) as f32));
            g.write(Reg::r(3), lane, f(lane as f32 - 3.0));
            g.write(Reg::r(4), lane, f(lane as f32 * 0.25));
        },
    );
    let x = |l: usize| l as f32 * 0.5 - 4.25;
    let y = |l: usize| 4.0 * (1 << (l % 4)) as f32;
    check(&g, Reg::r(10), |l| f(x(l).floor()));
    check(&g, Reg::r(11), |l| f(x(l).ceil()));
    check(&g, Reg::r(12), |l| f(x(l).trunc()));
    check(&g, Reg::r(13), |l| f(x(l).round_ties_even()));
    check(&g, Reg::r(14), |l| f(1.0 / y(l)));
    check(&g, Reg::r(15), |l| f(1.0 / y(l).sqrt()));
    check(&g, Reg::r(16), |l| f(2.0 + (l % 4) as f32));
    check(&g, Reg::r(17), |l| f(2f32.powi(l as i32 - 3)));
    check(&g, Reg::r(18), |l| f((l as f32 * 0.25).floor().min(1.0)));
}

#[test_log::test]
fn mesa_sine_sequence_and_single_roundings() {
    // Mesa's fsin_agx: fixup = sin_pt_1(q), sine = sin_pt_2(fixup) * fixup,
    // for q = 0, 0.5, ... 3.5 quadrants: 0, +-sqrt(2)/2, +-1.
    let g = run_lanes(
        "sin_pt_1 r10, r1\nsin_pt_2 r11, r10\nfmul32 r12, r11, r10\nrsqrt r14, r5",
        |g, lane| {
            g.write(Reg::r(1), lane, f((lane % 8) as f32 * 0.5));
            // 1/sqrt of 0x46294da5 is 0x3c1d65b5; 1/sqrtf rounds twice
            // to 0x3c1d65b4.
            g.write(Reg::r(5), lane, 0x4629_4DA5);
        },
    );
    let fixups = [0.0, 0.5, 1.0, 0.5, 0.0, -0.5, -1.0, -0.5];
    check(&g, Reg::r(10), |l| f(fixups[l % 8]));
    // sin(tau/8) / 0.5 = sqrt(2), rounded: 0x3fb504f3; sinc(0) = tau/4.
    let sincs = [
        std::f32::consts::FRAC_PI_2,
        f32::from_bits(0x3FB5_04F3),
        1.0,
        f32::from_bits(0x3FB5_04F3),
    ];
    check(
        &g,
        Reg::r(11),
        |l| f(sincs[[0, 1, 2, 1, 0, 1, 2, 1][l % 8]]),
    );
    let sines = [0x0, 0x3F35_04F3, 0x3F80_0000, 0x3F35_04F3, 0x0];
    check(&g, Reg::r(12), |l| match l % 8 {
        k @ 0..=4 => sines[k],
        k => 0x8000_0000 | sines[8 - k],
    });
    check(&g, Reg::r(14), |_| 0x3C1D_65B5);
}

#[test_log::test]
fn fmadd16_rounds_once_from_fp32_uniforms() {
    // -(1 + 2^-23)(1 - 2^-23) + 2050 is 2049 + 2^-46, just above the fp16
    // tie between 2048 and 2050. The sum in f64 would land on the tie,
    // which goes to even, 2048; rounded once it is 2050.
    let mut machine = Machine::new("fmadd16 r1l, u0, u1, r2l\nstop");
    machine.uniforms[0] = (-(1.0 + f32::EPSILON)).to_bits();
    machine.uniforms[1] = (1.0 - f32::EPSILON).to_bits();
    let mut group = machine.group();
    for lane in 0..32 {
        group.write(Reg::l(2), lane, h(2050.0));
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::l(1), 0), h(2050.0));
}

#[test_log::test]
fn special_square_root_and_high_word_shift() {
    let g = run_lanes(
        "rsqrt_special r10, r1\nfmul32 r11, r1, r10\nasrh r12, r2, 40",
        |g, lane| {
            g.write(Reg::r(1), lane, f((lane * lane) as f32));
            g.write(Reg::r(2), lane, (-(lane as i32) * 1024) as u32 as u64);
        },
    );
    check(
        &g,
        Reg::r(10),
        |l| if l == 0 { 0 } else { f(1.0 / l as f32) },
    );
    // Mesa's sqrt(x) = x * srsqrt(x), which is 0 at 0 (not 0 * inf).
    check(&g, Reg::r(11), |l| {
        if l == 0 {
            0
        } else {
            f((l * l) as f32 * (1.0 / l as f32))
        }
    });
    // (x << 32) >> 40 = x >> 8, arithmetically.
    check(&g, Reg::r(12), |l| {
        u64::from(((-(l as i32) * 1024) >> 8) as u32)
    });
}

#[test_log::test]
fn quad_derivatives() {
    // Lanes form 2x2 quads: bit 0 of the lane is x, bit 1 is y.
    let g = run_lanes("dfdx r10, r1\ndfdy r11, r1", |g, lane| {
        let x = (lane & 1) as f32;
        let y = ((lane >> 1) & 1) as f32;
        g.write(Reg::r(1), lane, f(3.0 * x + 5.0 * y + lane as f32));
    });
    // Within a quad, lane + 1 adds 1 and lane + 2 adds 2 to `lane`.
    check(&g, Reg::r(10), |_| f(4.0));
    check(&g, Reg::r(11), |_| f(7.0));
}

#[test_log::test]
fn integer_add_subtract_multiply() {
    let g = run_lanes(
        "iadd r10, r1, r2, lsl 2\nisub r11, r1, r2\niadd.sat r12, r3, r3\nisub.sat r13, r4.sx, 1\niadd r14l, r5l, 1\nimadd r15, r1, r1, 7\nimsub r16, r1, 3, r2",
        |g, lane| {
            g.write(Reg::r(1), lane, lane as u64);
            g.write(Reg::r(2), lane, 100);
            g.write(Reg::r(3), lane, 0x8000_0000 + lane as u64);
            g.write(Reg::r(4), lane, 0x8000_0000 + (lane as u64 % 2));
            g.write(Reg::l(5), lane, 0xFFFF - lane as u64 % 2);
        },
    );
    check(&g, Reg::r(10), |l| l as u64 + 400);
    check(&g, Reg::r(11), |l| (l as u32).wrapping_sub(100) as u64);
    check(&g, Reg::r(12), |_| 0xFFFF_FFFF);
    // MIN - 1 saturates to MIN; (MIN + 1) - 1 is MIN.
    check(&g, Reg::r(13), |_| 0x8000_0000);
    check(&g, Reg::r(14), |l| {
        (u64::from(SENTINEL) & 0xFFFF_0000) | ((0xFFFF - l as u64 % 2 + 1) & 0xFFFF)
    });
    check(&g, Reg::r(15), |l| (l * l + 7) as u64);
    check(&g, Reg::r(16), |l| (3 * l as u32).wrapping_sub(100) as u64);
}

#[test_log::test]
fn saturation_needs_narrow_operands() {
    // A 64-bit source makes .sat a plain (wrapping) add.
    let g = run_lanes(
        "iadd.sat r10, r12_r13, r12_r13\niadd.sat r11, r14, r14",
        |g, lane| {
            g.write(Reg::pair(12), lane, 0xFFFF_FFFF);
            g.write(Reg::r(14), lane, 0xFFFF_FFFF);
        },
    );
    check(&g, Reg::r(10), |_| 0xFFFF_FFFE);
    check(&g, Reg::r(11), |_| 0xFFFF_FFFF);
}

#[test_log::test]
fn sixty_four_bit_add_carries_and_sign_extends() {
    let g = run_lanes(
        "iadd r10_r11, r12_r13, 1\niadd r14_r15, r16_r17, r1.sx",
        |g, lane| {
            g.write(Reg::pair(12), lane, 0xFFFF_FFFF);
            g.write(Reg::pair(16), lane, 1000);
            g.write(Reg::r(1), lane, (-(lane as i64)) as u32 as u64);
        },
    );
    check(&g, Reg::pair(10), |_| 0x1_0000_0000);
    check(&g, Reg::pair(14), |l| 1000 - l as u64);
}

#[test_log::test]
fn bit_operations_and_shifts() {
    let g = run_lanes(
        "and r10, r1, r2\nor r11, r1, r2\nxor r12, r1, r2\nnot r13, r1\nmov r14, r1\nxnor r15, r1, r2\nbfi r16, r3, r1, 8, mask 0xFF\nbfeil r17, 0, r1, 4\nextr r18, r1, r2, 8\nasr r19, r4, 4\nbfi r20, 0, r1, 3",
        |g, lane| {
            g.write(Reg::r(1), lane, lane as u64 * 0x0101_0101);
            g.write(Reg::r(2), lane, 0x0F0F_00FF);
            g.write(Reg::r(3), lane, 0xAAAA_AAAA);
            g.write(Reg::r(4), lane, (-(lane as i32) * 256) as u32 as u64);
        },
    );
    let a = |l: usize| l as u32 * 0x0101_0101;
    let b = 0x0F0F_00FFu32;
    check(&g, Reg::r(10), |l| u64::from(a(l) & b));
    check(&g, Reg::r(11), |l| u64::from(a(l) | b));
    check(&g, Reg::r(12), |l| u64::from(a(l) ^ b));
    check(&g, Reg::r(13), |l| u64::from(!a(l)));
    check(&g, Reg::r(14), |l| u64::from(a(l)));
    check(&g, Reg::r(15), |l| u64::from(!(a(l) ^ b)));
    check(&g, Reg::r(16), |l| {
        u64::from((0xAAAA_AAAA & !0xFF00) | ((a(l) & 0xFF) << 8))
    });
    check(&g, Reg::r(17), |l| u64::from(a(l) >> 4));
    check(&g, Reg::r(18), |l| {
        u64::from((((u64::from(b) << 32) | u64::from(a(l))) >> 8) as u32)
    });
    check(&g, Reg::r(19), |l| {
        u64::from(((-(l as i32) * 256) >> 4) as u32)
    });
    check(&g, Reg::r(20), |l| u64::from(a(l) << 3));
}

/// The integer unary family and `intl`, against references computed bit
/// by bit (applegpu's descriptions).
#[test_log::test]
fn bit_counting_reversal_and_interleaving() {
    let value = |lane: usize| -> u32 {
        match lane {
            0 => 0,
            1 => 1,
            2 => u32::MAX,
            3 => 0x8000_0000,
            _ => (lane as u32).wrapping_mul(0x9E37_79B9) >> (lane % 7),
        }
    };
    let other = |lane: usize| -> u32 { (lane as u32).wrapping_mul(0x85EB_CA6B) };
    let g = run_lanes(
        "bitrev r10, r1\npopcount r11, r1\nffs r12, r1\nintl r13, r1, r2\nffs r14l, r1\nintl r15, r1l, r2h",
        |g, lane| {
            g.write(Reg::r(1), lane, u64::from(value(lane)));
            g.write(Reg::r(2), lane, u64::from(other(lane)));
        },
    );
    let bits = |x: u32| (0..32).map(move |i| x >> i & 1);
    check(&g, Reg::r(10), |l| {
        u64::from(bits(value(l)).fold(0u32, |r, b| r << 1 | b))
    });
    check(&g, Reg::r(11), |l| u64::from(bits(value(l)).sum::<u32>()));
    // The highest set bit's index; all ones for zero.
    let highest = |x: u32| {
        (0..32)
            .rev()
            .find(|&i| x >> i & 1 != 0)
            .map_or(u32::MAX, |i| i)
    };
    check(&g, Reg::r(12), |l| u64::from(highest(value(l))));
    check(&g, Reg::l(14), |l| u64::from(highest(value(l)) & 0xFFFF));
    let interleave = |even: u32, odd: u32| {
        (0..16).fold(0u64, |r, i| {
            r | u64::from(even >> i & 1) << (2 * i) | u64::from(odd >> i & 1) << (2 * i + 1)
        })
    };
    check(&g, Reg::r(13), |l| interleave(value(l), other(l)));
    check(&g, Reg::r(15), |l| {
        interleave(value(l) & 0xFFFF, other(l) >> 16)
    });
}

#[test_log::test]
fn compare_and_select() {
    let g = run_lanes(
        "icmpsel slt, r10, r5, r6, r1, r2\nicmpsel ult, r11, r5, r6, r1, r2\nfcmpsel gtn, r12, r7, r8, r7, r8\nfcmpsel ltn, r13, r8, r7, r8, r7\nicmpsel ueq, r14l, r3l, 3, 200, 100",
        |g, lane| {
            g.write(Reg::r(1), lane, 111);
            g.write(Reg::r(2), lane, 222);
            g.write(Reg::r(5), lane, (lane as i32 - 16) as u32 as u64);
            g.write(Reg::r(6), lane, 0);
            g.write(Reg::r(7), lane, f(lane as f32 - 10.0));
            let other = if lane % 4 == 0 { f32::NAN } else { 0.0 };
            g.write(Reg::r(8), lane, f(other));
            g.write(Reg::l(3), lane, lane as u64 % 5);
        },
    );
    check(&g, Reg::r(10), |l| if l < 16 { 111 } else { 222 });
    check(&g, Reg::r(11), |_| 222); // unsigned: negative values are huge
                                    // fmax/fmin that return the non-NaN operand.
    check(&g, Reg::r(12), |l| {
        if l % 4 == 0 {
            f(l as f32 - 10.0)
        } else {
            f((l as f32 - 10.0).max(0.0))
        }
    });
    check(&g, Reg::r(13), |l| {
        if l % 4 == 0 {
            f(l as f32 - 10.0)
        } else {
            f((l as f32 - 10.0).min(0.0))
        }
    });
    check(&g, Reg::r(14), |l| {
        (u64::from(SENTINEL) & 0xFFFF_0000) | if l % 5 == 3 { 200 } else { 100 }
    });
}

#[test_log::test]
fn conversions() {
    let g = run_lanes(
        "convert u32_to_f, r10, r1, rte\nconvert u32_to_f, r11, r1, rtz\nconvert s32_to_f, r12, r2, rte\nconvert f_to_s32, r13, r3, rtz\nconvert f_to_s32, r14, r3, rte\nconvert f_to_u16, r15l, r4, rtz\nconvert u8_to_f, r16, r5, rte\nconvert s16_to_f, r17l, r6l, rte",
        |g, lane| {
            g.write(Reg::r(1), lane, 16_777_216 + 2 * lane as u64 + 1);
            g.write(Reg::r(2), lane, (-(lane as i32) - 1) as u32 as u64);
            g.write(Reg::r(3), lane, f(lane as f32 * 0.5 - 4.0));
            g.write(Reg::r(4), lane, f(lane as f32 * 4096.0 - 1000.0));
            g.write(Reg::r(5), lane, 0x1234_5600 + lane as u64);
            g.write(Reg::l(6), lane, (-(lane as i16)) as u16 as u64);
        },
    );
    // Odd integers above 2^24 are halfway: nearest-even vs toward zero.
    check(
        &g,
        Reg::r(10),
        |l| f((16_777_216 + 2 * l as u64 + 1) as f32),
    );
    check(&g, Reg::r(11), |l| f((16_777_216 + 2 * l as u64) as f32));
    check(&g, Reg::r(12), |l| f(-(l as f32) - 1.0));
    check(&g, Reg::r(13), |l| {
        ((l as f32 * 0.5 - 4.0).trunc() as i32) as u32 as u64
    });
    check(&g, Reg::r(14), |l| {
        ((l as f32 * 0.5 - 4.0).round_ties_even() as i32) as u32 as u64
    });
    let high = u64::from(SENTINEL) & 0xFFFF_0000;
    check(&g, Reg::r(15), |l| {
        high | ((l as f32 * 4096.0 - 1000.0).clamp(0.0, 65535.0) as u64)
    });
    check(&g, Reg::r(16), |l| f(l as f32));
    check(&g, Reg::r(17), |l| high | h(-(l as i32) as f32));
}

#[test_log::test]
fn immediates_and_special_registers() {
    let mut machine = Machine::new("pop_exec r0l, 0\nmov_imm r10, 3735928559\nmov_imm r11l, 4660\nget_sr r12, sr52\nget_sr r13, sr80\nget_sr r14, sr58\nstop");
    let mut group = machine.group();
    group
        .special
        .set_lanes(80, std::array::from_fn(|lane| 100 + lane as u32));
    for lane in 0..32 {
        group.write(Reg::l(0), lane, u64::from(disabled(lane)));
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    let mut active_before = 0;
    for lane in 0..32 {
        if disabled(lane) {
            assert_eq!(group.read(Reg::r(12), lane), 0);
            continue;
        }
        assert_eq!(group.read(Reg::r(10), lane), 0xDEAD_BEEF);
        assert_eq!(group.read(Reg::l(11), lane), 4660);
        assert_eq!(group.read(Reg::r(12), lane), lane as u64);
        assert_eq!(group.read(Reg::r(13), lane), 100 + lane as u64);
        assert_eq!(group.read(Reg::r(14), lane), active_before);
        active_before += 1;
    }
    // A special register the dispatch did not provide is an error.
    let mut machine = Machine::new("get_sr r1, sr0\nstop");
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert!(
        matches!(err, ExecError::SpecialRegister { sr: 0, .. }),
        "{err}"
    );
}

#[test_log::test]
fn nested_if_else() {
    let source = "
        mov_imm r10, 0
        if_icmp r0l, ult, r1, 16, 1
            and r2, r1, 1
            if_icmp r0l, ueq, r2, 1, 1
                mov_imm r10, 1
            else_icmp r0l, ueq, 0, 0, 1
                mov_imm r10, 2
            pop_exec r0l, 1
        else_icmp r0l, ueq, 0, 0, 1
            mov_imm r10, 3
        pop_exec r0l, 1
        stop";
    let mut machine = Machine::new(source);
    let mut group = machine.group();
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32 {
        let expected = if lane >= 16 {
            3
        } else if lane % 2 == 1 {
            1
        } else {
            2
        };
        assert_eq!(group.read(Reg::r(10), lane), expected, "lane {lane}");
        assert_eq!(
            group.read(Reg::l(0), lane),
            0,
            "exec stack balanced in lane {lane}"
        );
    }
}

#[test_log::test]
fn jmp_exec_none_skips_a_body_no_lane_takes() {
    let source = "
        if_icmp r0l, ugt, r1, 100, 1
        jmp_exec_none skip
        trap
    skip:
        pop_exec r0l, 1
        mov_imm r10, 7
        stop";
    let mut machine = Machine::new(source);
    let mut group = machine.group();
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::r(10), 31), 7);
}

#[test_log::test]
fn while_loop_with_jmp_exec_any() {
    let source = "
        mov_imm r10, 0
        mov_imm r11, 0
        if_icmp r0l, ult, r11, r1, 1
        jmp_exec_none done
    loop:
        iadd r10, r10, r11
        iadd r11, r11, 1
        while_icmp r0l, ult, r11, r1, 1
        jmp_exec_any loop
    done:
        pop_exec r0l, 1
        stop";
    let mut machine = Machine::new(source);
    let mut group = machine.group();
    for lane in 0..32 {
        group.write(Reg::r(1), lane, lane as u64);
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32u64 {
        assert_eq!(
            group.read(Reg::r(10), lane as usize),
            lane * lane.saturating_sub(1) / 2
        );
        assert_eq!(group.read(Reg::r(11), lane as usize), lane);
    }
}

#[test_log::test]
fn call_and_return() {
    let source = "
        mov_imm r10, 5
        call double
        call double
        stop
    double:
        iadd r10, r10, r10
        ret r1";
    let mut machine = Machine::new(source);
    let mut group = machine.group();
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    assert_eq!(group.read(Reg::r(10), 0), 20);
}

#[test_log::test]
fn decode_only_forms_are_refused_by_name() {
    // applegpu's readings of words no compiler output shows: they
    // disassemble, and the simulator refuses them rather than guess.
    for line in [
        "async_load copy_1d, r4_r5, r8_r9_r10",
        "async_store copy_2d, u6_u7, u20_u21_u22_u23_u24",
        "simd_matrix_fmadd32 r4_r5, r8_r9.abs, u3, r12l_r12h",
        "simd_matrix_fmadd16 r4h_r5l.cache, r8_r9.neg, 0.5, r12l_r12h.abs",
        "device_load.TODO 0, i32, x, r4, u2_u3, 8, signed, 1, 0, 5, 0",
        "device_store.TODO 0, i32, x, r4, u2_u3, 8, signed, 0, 1, 0, 3, 0",
    ] {
        let mnemonic = line.split_whitespace().next().unwrap();
        let mut machine = Machine::new(&format!("{line}\nstop"));
        let mut group = machine.group();
        let err = machine.run(&mut group).unwrap_err();
        assert!(
            matches!(&err, ExecError::Unsupported { what, .. } if what.contains(mnemonic)),
            "{line}: {err}"
        );
        assert_eq!(err.pc(), common::CODE_BASE);
    }
    // A device load in a format applegpu names but nobody has seen run.
    let mut machine =
        Machine::new("device_load 0, rg11b10f.rtz, xyz, r4_r5_r6, u2_u3, 0, signed\nstop");
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert!(matches!(err, ExecError::Unsupported { .. }), "{err}");
}

#[test_log::test]
fn bad_programs_fault_instead_of_panicking() {
    // Falls off the end into zero bytes, which decode (as applegpu's
    // `jmp_incomplete`) but are not modelled.
    let mut machine = Machine::new("mov_imm r1, 1");
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert!(
        matches!(&err, ExecError::Unsupported { what, .. } if what.contains("jmp_incomplete")),
        "{err}"
    );
    assert_eq!(err.pc(), common::CODE_BASE + 6);

    // Never stops.
    let mut machine = Machine::new("loop: jmp_exec_any loop");
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::Timeout {
                executed_instructions: common::BUDGET,
                ..
            }
        ),
        "{err}"
    );

    // Jumps to an unmapped address.
    let mut machine = Machine::new("jmp_exec_any pc+0x100000\nstop");
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert_eq!(err.fault_address(), Some(common::CODE_BASE + 0x100000));

    // Trap.
    let mut machine = Machine::new("trap");
    let mut group = machine.group();
    assert!(matches!(
        machine.run(&mut group),
        Err(ExecError::Trap { .. })
    ));

    // Bits no field explains (bit 46 of convert): refused, not guessed.
    let mut code = agx_hw::isa::text::assemble("convert u32_to_f, r0, r1, rte\nstop", 0).unwrap();
    code[5] |= 0x40;
    let mut machine = Machine::new("stop");
    machine
        .memory
        .map(common::CODE_BASE, code.len() as u64, true);
    machine.memory.poke(common::CODE_BASE, &code);
    let mut group = machine.group();
    let err = machine.run(&mut group).unwrap_err();
    assert!(err.to_string().contains("bits 0x400000000000"), "{err}");

    // An undefined condition code.
    let mut machine = Machine::new("icmpsel 3, r1, r2, r3, r4, r5\nstop");
    let mut group = machine.group();
    assert!(matches!(
        machine.run(&mut group),
        Err(ExecError::Unsupported { .. })
    ));
}

#[test_log::test]
fn float_results_follow_the_hardwares_rules() {
    let g = run_lanes(
        "fadd32 r10, r1, r2\n\
         fmul32 r11, r3, 0.0\n\
         fadd16 r12l, r4l, 0.0\n\
         fmul32 r13, r3.neg, 0.0\n\
         fmul16 r14l, r5l, 0.0\n\
         fmadd32 r15, r3.neg, 0.0, r6\n\
         fmul32 r16, r7, r8\n\
         fadd32.sat r17, r6, r6\n\
         bitop 0011, r18, r1, r2\n\
         bitop 1100, r19, r1, r2\n\
         bitop 0101, r20, r1, r2",
        |g, lane| {
            // A NaN with a sign and payload.
            g.write(Reg::r(1), lane, 0xFFC1_2345);
            g.write(Reg::r(2), lane, f(lane as f32));
            g.write(Reg::r(3), lane, f(f32::INFINITY));
            g.write(Reg::l(4), lane, 0xFE12);
            g.write(Reg::l(5), lane, h(-3.0));
            g.write(Reg::r(6), lane, f(-0.0));
            // An exact product just below the smallest normal, which
            // rounds (to even) up to it.
            g.write(Reg::r(7), lane, f(1.0 - f32::EPSILON / 2.0));
            g.write(Reg::r(8), lane, f(f32::MIN_POSITIVE));
        },
    );
    // Every NaN result is the default NaN, whatever the input NaN.
    check(&g, Reg::r(10), |_| 0x7FC0_0000);
    check(&g, Reg::r(11), |_| 0x7FC0_0000);
    check(&g, Reg::l(12), |_| 0x7E00);
    // A zero product keeps IEEE's sign (-3 * 0 = -0; -inf * 0 is NaN).
    check(&g, Reg::r(13), |_| 0x7FC0_0000);
    check(&g, Reg::l(14), |_| 0x8000);
    check(&g, Reg::r(15), |_| 0x7FC0_0000);
    // Flushed before rounding: the product rounds to the smallest normal
    // but its exact value is below it.
    check(&g, Reg::r(16), |_| 0);
    // Saturation sends -0 to +0.
    check(&g, Reg::r(17), |_| 0);
    // The truth tables of B alone give A; 0101 is a plain A too.
    check(&g, Reg::r(18), |_| 0xFFC1_2345);
    check(&g, Reg::r(19), |_| 0xFFC1_2345);
    check(&g, Reg::r(20), |_| 0xFFC1_2345);
    // A fused multiply-add keeps IEEE's sign of zero (-0 + -0 = -0), and
    // so does fmul (-2 * 0 = -0).
    let g = run_lanes(
        "fmadd32 r10, r1.neg, 0.0, r2\nfmul32 r11, r1.neg, 0.0",
        |g, lane| {
            g.write(Reg::r(1), lane, f(2.0));
            g.write(Reg::r(2), lane, f(-0.0));
        },
    );
    check(&g, Reg::r(10), |_| 0x8000_0000);
    check(&g, Reg::r(11), |_| 0x8000_0000);
}

#[test_log::test]
fn fp16_operations_flush_fp32_denormal_sources() {
    // -denormal + +0: unflushed it rounds to -0 in fp16; the hardware
    // flushes the fp32 source first, and -0 + +0 is +0.
    let mut machine = Machine::new("pop_exec r0l, 0\nfadd16 r10l, u0, r1l\nstop");
    machine.uniforms[0] = 0x8000_0001;
    let mut group = machine.group();
    for lane in 0..32 {
        group.write(Reg::l(1), lane, 0);
        group.write(Reg::r(10), lane, u64::from(SENTINEL));
    }
    assert_eq!(machine.run(&mut group), Ok(Exit::Stopped));
    for lane in 0..32 {
        assert_eq!(group.read(Reg::l(10), lane), 0, "lane {lane}");
    }
}

#[test_log::test]
fn imadd_reads_32_bits_of_a_64_bit_multiplicand() {
    let g = run_lanes(
        "imadd r10_r11, r2_r3, 3, 0\niadd r12_r13, r2_r3, 0",
        |g, lane| {
            g.write(Reg::r(2), lane, 5 + lane as u64);
            g.write(Reg::r(3), lane, 7);
        },
    );
    check(&g, Reg::pair(10), |l| 3 * (5 + l as u64));
    // iadd's 64-bit sources are 64 bits.
    check(&g, Reg::pair(12), |l| 7 << 32 | (5 + l as u64));
}

/// The lanes `run_lanes` leaves active.
fn active_mask() -> u32 {
    (0..32).filter(|&l| !disabled(l)).fold(0, |m, l| m | 1 << l)
}

#[test_log::test]
fn reductions_and_prefixes_combine_the_active_lanes() {
    let value = |lane: usize| (lane as u32 * 7 + 3) % 23;
    let g = run_lanes(
        "simd_iadd r10, r1\n\
         simd_prefix_iadd r11, r1\n\
         quad_iadd r12, r1\n\
         quad_prefix_iadd r13, r1\n\
         simd_max.u r14, r1\n\
         simd_min.s r15, r2\n\
         simd_fadd r16, r3\n\
         simd_prefix_fmul r17, r4\n\
         quad_xor r18, r1\n\
         simd_and r19, r5\n\
         quad_prefix_iadd r20l, r1l",
        |g, lane| {
            g.write(Reg::r(1), lane, u64::from(value(lane)));
            g.write(Reg::r(2), lane, (value(lane) as i32 - 11) as u32 as u64);
            g.write(Reg::r(3), lane, f(lane as f32 * 0.5));
            g.write(Reg::r(4), lane, f(if lane % 4 == 0 { 2.0 } else { 1.0 }));
            g.write(Reg::r(5), lane, u64::from(!(1u32 << lane)));
        },
    );
    let active = active_mask();
    let is_active = |l: usize| active & (1 << l) != 0;
    let window = |lane: usize, size: usize| (lane & !(size - 1))..(lane & !(size - 1)) + size;
    let sum = |lanes: std::ops::Range<usize>, below: usize| -> u32 {
        lanes
            .filter(|&l| is_active(l) && l < below)
            .map(value)
            .sum()
    };
    check(&g, Reg::r(10), |l| u64::from(sum(window(l, 32), 32)));
    check(&g, Reg::r(11), |l| u64::from(sum(window(l, 32), l)));
    check(&g, Reg::r(12), |l| u64::from(sum(window(l, 4), 32)));
    check(&g, Reg::r(13), |l| u64::from(sum(window(l, 4), l)));
    let max = (0..32).filter(|&l| is_active(l)).map(value).max().unwrap();
    check(&g, Reg::r(14), |_| u64::from(max));
    let min = (0..32)
        .filter(|&l| is_active(l))
        .map(|l| value(l) as i32 - 11)
        .min()
        .unwrap();
    check(&g, Reg::r(15), |_| u64::from(min as u32));
    // Float sums are exact here (halves of small integers), so the order
    // of additions does not show.
    let fsum: f32 = (0..32)
        .filter(|&l| is_active(l))
        .map(|l| l as f32 * 0.5)
        .sum();
    check(&g, Reg::r(16), |_| f(fsum));
    check(&g, Reg::r(17), |l| {
        let twos = (0..l).filter(|&k| is_active(k) && k % 4 == 0).count();
        f(2f32.powi(twos as i32))
    });
    check(&g, Reg::r(18), |l| {
        u64::from(
            window(l, 4)
                .filter(|&k| is_active(k))
                .map(value)
                .fold(0, |a, v| a ^ v),
        )
    });
    // The and of "all bits but lane l" over the active lanes clears
    // exactly their bits.
    check(&g, Reg::r(19), |_| u64::from(!active));
    // A 16-bit destination works on 16 bits.
    check(&g, Reg::l(20), |l| u64::from(sum(window(l, 4), l) & 0xFFFF));
}

#[test_log::test]
fn shuffles_read_other_lanes() {
    let g = run_lanes(
        "quad_shuffle_xor r10, r1, 1\n\
         quad_shuffle_xor r11, r1, 3\n\
         simd_shuffle r12, r1, 4\n\
         simd_shuffle_down r13, r1, 1\n\
         simd_shuffle_up r14, r1, 5\n\
         simd_shuffle_xor r15, r1, 16\n\
         quad_shuffle r16, r1, 2\n\
         simd_shuffle_rotate_up r17, r1, 3",
        |g, lane| g.write(Reg::r(1), lane, 100 + lane as u64),
    );
    // Inactive lanes' values are read too: shuffles are not masked on
    // the side of the lane read.
    let v = |l: usize| 100 + l as u64;
    check(&g, Reg::r(10), |l| v(l ^ 1));
    check(&g, Reg::r(11), |l| v(l ^ 3));
    check(&g, Reg::r(12), |_| v(4));
    check(&g, Reg::r(13), |l| v((l + 1).min(31)));
    check(&g, Reg::r(14), |l| if l >= 5 { v(l - 5) } else { v(l) });
    check(&g, Reg::r(15), |l| v(l ^ 16));
    check(&g, Reg::r(16), |l| v((l & !3) + 2));
    check(&g, Reg::r(17), |l| v((l + 29) % 32));
}

#[test_log::test]
fn shuffle_indices_are_ored_across_each_quad() {
    // Lane l asks for lane l & 3 of quad 0 (the low bits differ within a
    // quad): the hardware ORs the quad's low index bits (0|1|2|3 = 3), so
    // every lane reads lane 3, as applegpu's hardware test shows and Mesa's
    // agx_lower_divergent_shuffle works around.
    let g = run_lanes("simd_shuffle r10, r1, r2", |g, lane| {
        g.write(Reg::r(1), lane, 100 + lane as u64);
        g.write(Reg::r(2), lane, (lane & 3) as u64);
    });
    check(&g, Reg::r(10), |_| 103);
}

#[test_log::test]
fn ballots_collect_the_active_lanes_where_a_compare_holds() {
    let g = run_lanes(
        "icmp_ballot r10, ult, r1, 20\n\
         icmp_ballot r11, ugte, r1, 20\n\
         fcmp_ballot r12, gt, r2, 0.5\n\
         icmp_quad_ballot r13l, ueq, r1, r1\n\
         get_sr r14, sr59\n\
         get_sr r15, sr57",
        |g, lane| {
            g.write(Reg::r(1), lane, lane as u64);
            g.write(Reg::r(2), lane, f(if lane % 2 == 0 { 1.0 } else { 0.0 }));
        },
    );
    let active = active_mask();
    let lanes_where =
        |p: &dyn Fn(usize) -> bool| (0..32).filter(|&l| p(l)).fold(0u32, |m, l| m | 1 << l);
    check(&g, Reg::r(10), |_| {
        u64::from(active & lanes_where(&|l| l < 20))
    });
    // The inverted condition covers only active lanes too.
    check(&g, Reg::r(11), |_| {
        u64::from(active & lanes_where(&|l| l >= 20))
    });
    check(&g, Reg::r(12), |_| {
        u64::from(active & lanes_where(&|l| l % 2 == 0))
    });
    // A quad ballot: the quad's active lanes in bits 0-3.
    check(&g, Reg::l(13), |l| u64::from(active >> (l & !3) & 0xF));
    check(&g, Reg::r(14), |_| u64::from(active.count_ones()));
    check(&g, Reg::r(15), |l| {
        u64::from((active >> (l & !3) & 0xF).count_ones())
    });
}

#[test_log::test]
fn operands_past_the_register_file_are_refused() {
    let mut machine = Machine::new("iadd r127_r128, r0, 1\nstop");
    let mut group = machine.group();
    match machine.run(&mut group) {
        Err(ExecError::Unsupported { what, .. }) => {
            assert!(what.contains("register past r127"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    let mut machine = Machine::new("fadd32 r0, undef_1000_2, r2\nstop");
    let mut group = machine.group();
    assert!(matches!(
        machine.run(&mut group),
        Err(ExecError::Unsupported { .. })
    ));
    // Bit patterns Mesa never emits, which the table prints as numbers,
    // are refused rather than run as if they were Mesa's.
    for source in [
        "atomic add, 0, r2, u0_u1, r3, signed, r5, 1, 0, 1, 1",
        "zs_emit 255, z, r2l_r2h, 1",
        "image_write r0_r1_r2_r3, r4_r5, 0, None, ts1, tex_2d, rte, 9, 0",
        "mov_imm r3, 7, 0b1",
        "simd_op 0b0, 0b0000000000000011, r20, r1",
    ] {
        let mut machine = Machine::new(&format!("{source}\nstop"));
        let mut group = machine.group();
        assert!(
            matches!(machine.run(&mut group), Err(ExecError::Unsupported { .. })),
            "{source}"
        );
    }
}

#[test_log::test]
fn float_reductions_convert_their_source_and_follow_the_alu_rules() {
    let g = run_lanes(
        "simd_fadd r10, r1l\nquad_fmul r11, r2\nquad_fadd r12l, r3\nsimd_max.f r13, r4",
        |g, lane| {
            g.write(Reg::l(1), lane, h(1.5));
            g.write(Reg::r(2), lane, f(if lane % 4 == 0 { -2.0 } else { 0.0 }));
            g.write(Reg::r(3), lane, f(0.25));
            // One NaN with a payload, and the lane index elsewhere.
            g.write(
                Reg::r(4),
                lane,
                if lane == 0 {
                    0xFFC1_2345
                } else {
                    f(lane as f32)
                },
            );
        },
    );
    let active = active_mask();
    let is_active = |l: usize| active & (1 << l) != 0;
    // An fp16 source widens exactly into the fp32 sum.
    check(&g, Reg::r(10), |_| f(1.5 * active.count_ones() as f32));
    // fmul's rule: a zero product keeps IEEE's sign (-2 * 0 = -0, where
    // the quad's first lane, the -2, is active).
    check(&g, Reg::r(11), |l| {
        if is_active(l & !3) {
            0x8000_0000
        } else {
            0
        }
    });
    // An fp32 source narrows to fp16 for a 16-bit destination.
    check(&g, Reg::l(12), |l| {
        h(0.25 * (0..4).filter(|k| is_active((l & !3) + k)).count() as f32)
    });
    // max returns the non-NaN operand.
    check(&g, Reg::r(13), |_| {
        f((0..32).filter(|&l| is_active(l) && l > 0).max().unwrap() as f32)
    });
}
