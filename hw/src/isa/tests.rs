//! Known answers, round trips and refusals for the instruction table.

use proptest::prelude::*;

use super::bits::length_mask;
use super::form::Length;
use super::table::FORMS;
use super::text::{assemble, disassemble, parse, print};
use super::*;

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Encodings packed from the public layouts (applegpu and Mesa agree on
/// all of these), with applegpu's text for them.
const KNOWN: &[(&str, &str)] = &[
    ("2a8142422400", "fadd32 r0, r1, r2"),
    ("2a8142020300", "fadd32 r0, r1, 1.0"),
    ("1a8d4246a400", "fmul32 r3, r1.abs, r2.neg"),
    ("268041200400", "fadd16 r0l, r0h, r1l"),
    ("2a0142c2", "fadd32 r0, r1, 0.1875"),
    ("2a8142021d02", "fadd32 r0, r1, u200"),
    ("3a81424224460200", "fmadd32 r0, r1, r2, r3"),
    ("0e01424200001000", "iadd r0, r1, 4, lsl 2"),
    ("0e01424e24000000", "isub r0, r1.sx, r2"),
    ("1e01424224460200", "imadd r0, r1, r2, r3"),
    ("3e810a242400", "convert u32_to_f, r0, r1, rte"),
    ("7e014242a400", "and r0, r1, r2"),
    ("7e01420a8000", "mov r0, r1"),
    ("2e01002024040800", "bfi r0, 0, r1, 4, mask 0xFF"),
    ("2e81423600000000", "asr r0, r1, 3"),
    ("1201424224468024", "icmpsel ult, r0, r1, r2, r3, r4"),
    ("02014202004200f0", "fcmpsel gtn, r0, r1, 0.0, r1, 0"),
    ("0a014202", "floor r0, r1"),
    ("0a014282", "rcp r0, r1"),
    ("0a8142020100", "ceil r0, r1"),
    ("522842422400", "if_icmp r0l, ult, r1, r2, 1"),
    ("520e00000000", "pop_exec r0l, 1"),
    ("1402", "ret r1"),
    ("3800", "wait 0"),
    ("6800", "threadgroup_barrier"),
    ("f596", "memory_barrier 1, 2, 9"),
    ("72011004", "get_sr r0, sr80 (thread_position_in_grid.x)"),
    ("62023412", "mov_imm r0h, 4660"),
    ("62010000803f", "mov_imm r0, 1065353216"),
    ("8800", "stop"),
    // Mesa's no_var word, in applegpu's notation (the st_var fields).
    ("51000080", "no_var 1, r0, r0l"),
    // Subgroup operations as Mesa's agx_pack.c packs them: 0x6F, the
    // length bit, the window and prefix bits 29-30, the operation in bits
    // 28, 38-40 and 47 (fadd = 1, iadd = 16, umax = 30)...
    ("6f8142320000", "simd_fadd r0, r1"),
    ("6f8142420080", "quad_prefix_iadd r0, r1"),
    ("6f804262c081", "simd_prefix_max.u r0l, r1"),
    // ...shuffles: bit 26 the SIMD-group window, bits 38-39 the kind...
    ("6f0042466400", "simd_shuffle_xor r0l, r1, r2"),
    ("6f0042000400", "quad_shuffle r0l, r1l, r0l"),
    // ...and compare ballots: 0x22 float or 0x32 integer, bits 48-60 one
    // for the SIMD-group, the condition in bits 61-63 with bit 47 its
    // inversion.
    ("3201424224000120", "icmp_ballot r0, ult, r1, r2"),
    ("2201424224000040", "fcmp_quad_ballot r0, gt, r1, r2"),
    // Words from Mesa's Vulkan driver (a compressed-image clear): a find
    // of the highest set bit and a preamble binding a heap descriptor to
    // texture state 0.
    ("be05c20e0000", "ffs r1.cache, r1.discard"),
    ("ed0010c00000000c", "tex_state_store 0, u2_u3, 48, 0"),
    // Packed as Mesa's agx_pack.c packs atomics: an add returning the
    // old value, and a compare-exchange with no destination.
    (
        "1510608c00d00a00",
        "atomic add, 0, r2, u0_u1, r3, signed, r5, 1, 1, 1, 1",
    ),
    (
        "d500608c00500a00",
        "atomic cmpxchg, 0, 0, u0_u1, r3, signed, r5_r6, 1, 1, 1, 1",
    ),
    // Packed as Mesa packs local_atomic (the 10-byte form, its fields
    // 0, 2, 0x80, 0): an add returning the old value to r3, and a
    // compare-exchange with no destination at base r2l.
    (
        "198d8000548000000800",
        "threadgroup_atomic add, r3, 0, 0, r4, 0, 2, 128, 0",
    ),
    (
        "19800403148000000800",
        "threadgroup_atomic cmpxchg, 0, r2l, 0, r4_r5, 0, 2, 128, 0",
    ),
    // The stack, as Mesa packs it: adjustments by 16 words and -16
    // (the 8-byte form even when the short one would do), a load and a
    // store at byte offsets (an immediate, a register), a 16-bit store,
    // and the helper's block-register moves.
    ("b500010521800000", "stack_adjust.long 0, 1, 2, 0, 0, 16"),
    ("b50001052f8000ff", "stack_adjust 0, 1, 2, 0, 0, -16"),
    (
        "3522c00500c07200",
        "stack_load r4_r5_r6, i32, 1, 0, xyz, 4, 12, 0",
    ),
    ("b522400400c01200", "stack_store i32, 1, 0, x, 4, r4, r2, 0"),
    (
        "b525000500c03001",
        "stack_store i16, 1, 0, xy, 4, r4h_r5l, 256, 0",
    ),
    (
        "7520200500c01000",
        "stack_unmap target0, r4, 2, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1",
    ),
    (
        "7528310500c01000",
        "stack_map target0, r5, 3, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1",
    ),
    // Mesa's 6-byte doorbell is these two: a jump over the doorbell when
    // the firmware skips it, and the doorbell.
    ("20000600", "jmp_if_skipping_doorbell 0x6"),
    ("2820", "doorbell 32"),
    // Mesa's texture_sample for a shadow gather of g with texel offsets
    // (compare in r6, offsets in r7), a bias with a minimum LOD (one
    // register, two fp16 halves) and offsets, gradients with a minimum
    // and sparse residency (bit 70), and the uniform bias-minimum form.
    (
        "31a1840003620f0100008c09",
        "texture_sample 1, 0b1100, 0, gather_g, xyzw, 0b00, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, auto_lod, 0, 1, r6_r7",
    ),
    (
        "31a1040a0362df0100000c08",
        "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, auto_lod_bias_min, r5, 1, r6",
    ),
    (
        "31a104140362cf0140000000",
        "texture_sample 0, 0b1100, 0, none, xyzw, 0b10, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, lod_grad_min, r10_r11_r12_r13_r14, 0, r0",
    ),
    (
        "3121040803629f01",
        "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, auto_lod_bias_min_uniform, u4, 0, r0",
    ),
    // applegpu's decode-only forms, packed by hand from its layouts.
    // Asynchronous copies: 0x25/0x65, bit 47 the dimension, the address
    // pair's half index at 9-14 (uniform at bit 8), the descriptor's
    // whole-register index at 16-19 + 36-39 (uniforms at bit 25).
    ("2510080000000000", "async_load copy_1d, r4_r5, r8_r9_r10"),
    (
        "6519040210800000",
        "async_store copy_2d, u6_u7, u20_u21_u22_u23_u24",
    ),
    // Matrix multiply-add: 0x6F, bits 27 and 63, bit 26 the width;
    // operands as ALU fields, each register a pair, A's abs/neg at 52-53.
    (
        "6f11506e18581080",
        "simd_matrix_fmadd32 r4_r5, r8_r9.abs, u3, r12l_r12h",
    ),
    (
        "ef12500a02582480",
        "simd_matrix_fmadd16 r4h_r5l.cache, r8_r9.neg, 0.5, r12l_r12h.abs",
    ),
    // device_load/device_store with bits 44-46 (45-46) not the known form's
    // 4 (2).
    (
        "0521840d00d01200",
        "device_load.TODO 0, i32, x, r4, u2_u3, 8, signed, 1, 0, 5, 0",
    ),
    (
        "4521840d00e01200",
        "device_store.TODO 0, i32, x, r4, u2_u3, 8, signed, 0, 1, 0, 3, 0",
    ),
];

#[test]
fn a_fragment_programs_pass_type_follows_what_it_does_with_the_tile() {
    use crate::formats::PassType;
    let store = "st_tile r4_r5_r6_r7, u8norm, 0, xyzw, 0, 255, r0, 0\n";
    let load = "ld_tile r8_r9_r10_r11, u8norm, 0, xyzw, 0, 255, r0, 0\nwait 0\n";
    let kill = "sample_mask 0, 0\n";
    for (body, want) in [
        (store.to_owned(), PassType::Opaque),
        (format!("{load}{store}"), PassType::Translucent),
        (format!("{kill}{store}"), PassType::PunchThrough),
        (
            format!("{kill}{load}{store}"),
            PassType::TranslucentPunchThrough,
        ),
        // After the stop too: the whole code is the program.
        (format!("{store}stop\n{load}"), PassType::Translucent),
    ] {
        let code = assemble(&format!("{body}stop"), 0).unwrap();
        assert_eq!(fragment_pass_type(&code), want, "{body}");
    }
}

#[test]
fn known_encodings_decode_print_and_assemble() {
    for (bytes_hex, text) in KNOWN {
        let bytes = hex(bytes_hex);
        let decoded = decode(&bytes).unwrap_or_else(|e| panic!("{bytes_hex}: {e}"));
        assert_eq!(decoded.length_bytes, bytes.len(), "{text}");
        assert_eq!(decoded.unknown_bits, 0, "{text}");
        assert_eq!(print(&decoded.instr, 0), *text, "{bytes_hex}");
        let reassembled = assemble(text, 0).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(reassembled, bytes, "{text}");
    }
}

#[test]
fn applegpus_none_for_an_absent_atomic_destination_assembles() {
    for (applegpu, ours) in [
        (
            "threadgroup_atomic add, None, 0, 0, r4, 0, 2, 128, 0",
            "threadgroup_atomic add, 0, 0, 0, r4, 0, 2, 128, 0",
        ),
        (
            "atomic add, 0, None, u0_u1, r3, signed, r5, 1, 1, 1, 1",
            "atomic add, 0, 0, u0_u1, r3, signed, r5, 1, 1, 1, 1",
        ),
    ] {
        assert_eq!(assemble(applegpu, 0).unwrap(), assemble(ours, 0).unwrap());
    }
}

#[test]
fn branch_targets_print_as_absolute_addresses() {
    let bytes = hex("20c020000000");
    let decoded = decode(&bytes).unwrap();
    assert_eq!(print(&decoded.instr, 0x10), "jmp_exec_none 0x30");
    let instr = parse("jmp_exec_none 0x30", 0x10).unwrap();
    assert_eq!(instr, decoded.instr);
}

#[test]
fn memory_and_graphics_forms_round_trip_from_text() {
    let texts = [
        "device_load 0, i32, xyzw, r4_r5_r6_r7, u2_u3, r1, unsigned",
        "device_load 1, i16, x, r3l, r0_r1, 8, signed, lsl 1",
        "device_store 0, i32, xy, r2_r3, u4_u5, r6, unsigned, 0",
        "uniform_store 2, i16, xy, 0, r0l_r0h, 12",
        "threadgroup_load i32, xyzw, r0_r1_r2_r3, 0, r2l",
        "threadgroup_store i16, x, r5l, r1l, 4",
        "texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r0_r1_r2_r3, None, ts0, ss0, tex_2d, r4_r5, auto_lod, 0, 0, r0",
        "texture_load 0, 0b1100, 0, none, xyzw, 0b00, r0_r1_r2_r3, None, ts3, ss0, tex_2d, r4_r5, lod_min, r6l, 0, r0",
        "texture_sample 1, 0b1100, 1, none, xy, 0b00, r0l_r0h, u4_u5, r7, ss2, tex_2d_array, r8_r9_r10, lod_grad, r12_r13_r14_r15, 0, r20",
        "image_write r0_r1_r2_r3, r4_r5, 0, None, ts1, tex_2d, rte, 9, 1",
        "image_write_block r2, r4, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1",
        "st_tile r0_r1_r2_r3, u8norm, 0, xyzw, 0, 255, r0, 0",
        "ld_tile r0l_r0h_r1l_r1h, u8norm, 1, xyzw, 8, 255, r0, 0",
        "iter r0_r1_r2_r3, cf1, center, 0, 0, 0, 0, 0",
        "iterproj r4_r5, cf2, cf0, center, 0, 0, 0, 0, 0",
        "ldcf r0_r1_r2, cf4, 0",
        "st_var 1, r3, 4",
        "st_var_final 1, r2, 7",
        "sample_mask 255, 0",
        "sample_mask r4l, 0",
        "zs_emit 255, zs, r2l_r2h_r3l, 0",
        "wait_pix 1, 0",
        "signal_pix 1, 0",
        "call r15",
    ];
    for text in texts {
        let instr = parse(text, 0).unwrap_or_else(|e| panic!("{text}: {e}"));
        let (bytes, len) = encode(&instr).unwrap();
        let decoded = decode(&bytes[..len]).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(decoded.length_bytes, len);
        assert_eq!(decoded.unknown_bits, 0, "{text}");
        assert_eq!(print(&decoded.instr, 0), text);
    }
}

#[test]
fn texture_coordinates_are_16_bit_when_bit_47_is_set() {
    // Bit 9 of Mesa's `coord` operand (instruction bit 47) makes the
    // coordinate registers 16-bit; Mesa's tile reload programs use it.
    let text = "texture_load 0, 0b1100, 0, none, xyzw, 0b00, r0_r1_r2_r3, None, ts3, ss0, tex_2d, r4l_r4h, lod_min, r6l, 0, r0";
    let (bytes, len) = encode(&parse(text, 0).unwrap()).unwrap();
    let word = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(word >> 47 & 1, 1);
    assert_eq!(word >> 16 & 0x3F, 8, "r4l is half 8");
    let decoded = decode(&bytes[..len]).unwrap();
    assert_eq!(decoded.unknown_bits, 0);
    assert_eq!(print(&decoded.instr, 0), text);
    // Clear, the same registers read as 32-bit.
    let mut clear = bytes;
    clear[5] &= !0x80;
    let decoded = decode(&clear[..len]).unwrap();
    assert!(print(&decoded.instr, 0).contains("tex_2d, r4_r5, lod_min"));
}

#[test]
fn block_store_coordinates_are_one_register_each_when_explicit() {
    // Mesa's compute blits store a block at explicit x, y (and the layer
    // of array dimensions), one register each; without the explicit bit
    // the one register is the layer.
    for (text, count) in [
        (
            "image_write_block r11, r12_r13, 0, None, ts0, tex_2d, rte, u8norm, 1, 9, 1",
            2,
        ),
        (
            "image_write_block r11, r12_r13_r14, 0, None, ts0, tex_2d_array, rte, u8norm, 1, 9, 1",
            3,
        ),
        (
            "image_write_block r11, r12, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1",
            1,
        ),
    ] {
        let (bytes, len) = encode(&parse(text, 0).unwrap()).unwrap();
        let decoded = decode(&bytes[..len]).unwrap();
        assert_eq!(print(&decoded.instr, 0), text);
        let Some(Operand::Regs(coords)) = decoded.instr.operands.get(1) else {
            panic!("coordinates are a register run");
        };
        assert_eq!(coords.count, count, "{text}");
    }
    // The wrong length is refused.
    let wrong = "image_write_block r11, r12, 0, None, ts0, tex_2d, rte, u8norm, 1, 9, 1";
    let refused = match parse(wrong, 0) {
        Err(_) => true,
        Ok(instr) => encode(&instr).is_err(),
    };
    assert!(refused, "{wrong}");
}

#[test]
fn device_load_matches_the_documented_layout() {
    let instr = parse(
        "device_load 0, i32, xyzw, r4_r5_r6_r7, u2_u3, r1, unsigned",
        0,
    )
    .unwrap();
    let (bytes, len) = encode(&instr).unwrap();
    assert_eq!(len, 8);
    let word = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(word & 0x7F, 0x05);
    assert_eq!(word >> 7 & 7, 2, "format i32");
    assert_eq!(word >> 10 & 0x3F, 8, "r4 is half 8");
    assert_eq!(word >> 49 & 1, 1, "32-bit registers");
    assert_eq!(word >> 16 & 0xF, 4, "u2 is half 4");
    assert_eq!(word >> 27 & 1, 1, "uniform base");
    assert_eq!(word >> 20 & 0xF, 2, "r1 is half 2");
    assert_eq!(word >> 24 & 1, 0, "register offset");
    assert_eq!(word >> 25 & 1, 1, "unsigned");
    assert_eq!(word >> 26 & 1, 1);
    assert_eq!(word >> 44 & 7, 4);
    assert_eq!(word >> 47 & 1, 1, "long form");
    assert_eq!(word >> 52 & 0xF, 0xF, "mask xyzw");
}

#[test]
fn short_forms_are_chosen_when_the_operands_fit() {
    let short = parse("fadd32 r0, r1, 1.0", 0).unwrap();
    assert_eq!(
        encode(&short).unwrap().1,
        6,
        "1.0 needs type bits past byte 4"
    );
    let short = parse("fadd32 r0, r1, 0.1875", 0).unwrap();
    assert_eq!(encode(&short).unwrap().1, 4);
    let long = parse("fadd32 r40, r1, 0.1875", 0).unwrap();
    assert_eq!(encode(&long).unwrap().1, 6, "r40 needs the extension bits");
    let forced = parse("fadd32.long r0, r1, 0.1875", 0).unwrap();
    let (bytes, len) = encode(&forced).unwrap();
    assert_eq!(len, 6);
    let decoded = decode(&bytes[..len]).unwrap();
    assert!(decoded.instr.long);
    assert_eq!(print(&decoded.instr, 0), "fadd32.long r0, r1, 0.1875");
}

#[test]
fn undecodable_bytes_say_so() {
    assert!(matches!(
        decode(&[0x01, 0x00]),
        Err(DecodeError::NoMatch { .. })
    ));
    // The float unary family with an operation that has no row of its
    // own (op 2) decodes as the generic form, the operation raw.
    assert_eq!(
        print(&decode(&hex("0a014222")).unwrap().instr, 0),
        "funop r0, r1, 0b000010"
    );
    assert!(matches!(
        decode(&[0x2A]),
        Err(DecodeError::Truncated { .. })
    ));
    assert!(matches!(
        decode(&hex("2a8142")),
        Err(DecodeError::Truncated {
            needed_bytes: 6,
            available_bytes: 3
        })
    ));
}

#[test]
fn encodings_without_a_defined_meaning_decode_and_round_trip() {
    // fadd32 with source type 1000 (32-bit size, no hint): applegpu
    // prints `None`; it is an operand, printed raw.
    let mut bytes = hex("2a8142422400");
    bytes[2] &= !0xC0;
    bytes[3] = (bytes[3] & !0x03) | 0x02;
    let decoded = decode(&bytes).unwrap();
    let text = print(&decoded.instr, 0);
    assert_eq!(text, "fadd32 r0, undef_1000_2, r2");
    assert_eq!(
        decoded.instr.undefined_operand(),
        Some((1, "source type with no known meaning"))
    );
    assert_eq!(assemble(&text, 0).unwrap(), bytes);
    // A 32-bit destination at an odd half is the register below, the low
    // bit reported as unknown (bit 9), as applegpu reads it.
    let mut bytes = hex("2a8142422400");
    bytes[1] |= 0x02;
    let decoded = decode(&bytes).unwrap();
    assert_eq!(print(&decoded.instr, 0), "fadd32 r0, r1, r2");
    assert_eq!(decoded.unknown_bits, 1 << 9);
    // A 64-bit register type in a 32-bit source reads as 32 bits (the
    // type's bit 2, instruction bit 24, unknown).
    let mut bytes = hex("2a8142422400");
    bytes[3] |= 0x01;
    let decoded = decode(&bytes).unwrap();
    assert_eq!(print(&decoded.instr, 0), "fadd32 r0, r1, r2");
    assert_eq!(decoded.unknown_bits, 1 << 24);
    // A pair past the register file decodes, prints and assembles; it is
    // the simulator that refuses it.
    let instr = parse("iadd r127_r128, r0, 1", 0).unwrap();
    let (bytes, len) = encode(&instr).unwrap();
    let decoded = decode(&bytes[..len]).unwrap();
    assert_eq!(print(&decoded.instr, 0), "iadd r127_r128, r0, 1");
    assert_eq!(
        decoded.instr.undefined_operand(),
        Some((0, "register past r127"))
    );
    // applegpu's mov_imm with its kill-helpers bit set.
    let instr = parse("mov_imm r3, 7, 0b1", 0).unwrap();
    let (bytes, len) = encode(&instr).unwrap();
    assert_eq!(len, 8);
    assert_eq!(
        print(&decode(&bytes[..len]).unwrap().instr, 0),
        "mov_imm r3, 7, 0b1"
    );
}

#[test]
fn encoder_refuses_out_of_range_operands() {
    for bad in [
        "fadd32 r0, r1, 0.1",
        "iadd r0, r1, 256",
        "mov_imm r0l, 65536",
        "device_load 0, i32, xyzw, r4_r5, u2_u3, r1, unsigned",
        "fadd16 r0, r1l, r2l",
        "fadd32 r200, r1, r2",
        "wait 2",
        "frobnicate r0",
        "fadd32 r0, r1",
        "fadd32 r0, r1, r2, r3",
    ] {
        assert!(parse(bad, 0).is_err(), "{bad} should not assemble");
    }
}

#[test]
fn text_errors_come_from_the_form_the_text_names() {
    // A dot with no flag after it is refused.
    assert!(parse("fadd32. r0, r1, r2", 0).is_err());
    assert!(parse("fadd32 r0, r1, r2", 0).is_ok());
    // An operand error in a TODO form is that form's, not "device_load
    // takes no .TODO".
    let err = parse(
        "device_load.TODO 0, i32, x, r4, u2_u3, 8, signed, 1, 0, 9, 0",
        0,
    )
    .unwrap_err();
    assert!(!err.contains("takes no"), "{err}");
    assert!(err.contains("range"), "{err}");
}

#[test]
fn assembled_code_reads_back_as_written() {
    // A 6-byte simd_shuf_op with bit 27 set is the 8-byte
    // simd_matrix_fmadd16 when bit 63, the top bit of the next
    // instruction's second byte, is set: jmp_exec_any's is, stop's is not.
    let shuffle = "simd_shuf_op 0b0, 0b00, 0b10, r20, r1, r2";
    let err = assemble(&format!("{shuffle}\njmp_exec_any 0x0"), 0).unwrap_err();
    assert_eq!(err.line, 1);
    assert!(err.message.contains("simd_matrix_fmadd16"), "{err}");
    let code = assemble(&format!("{shuffle}\nstop"), 0).unwrap();
    assert_eq!(decode(&code).unwrap().instr.op, Op::SimdShufOp);
    // Text that names a TODO form with the values the known form pins
    // assembles to the known form's bytes (an alias, like `xor`).
    let code = assemble(
        "device_load.TODO 0, i32, x, r4, u2_u3, 8, signed, 1, 0, 4, 0",
        0,
    )
    .unwrap();
    assert_eq!(decode(&code).unwrap().instr.op, Op::DeviceLoad);
}

#[test]
fn assembler_resolves_labels_and_reads_listings() {
    let source = "
        start:
            mov_imm r0l, 0          ; exec stack
        loop:
            iadd r2, r2, 1
            jmp_exec_any loop
            call sub
            stop
        sub: ret r1
    ";
    let code = assemble(source, 0x1000).unwrap();
    let lines = disassemble(&code, 0x1000, false);
    assert!(lines.iter().all(|l| l.ok));
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "mov_imm r0l, 0",
            "iadd r2, r2, 1",
            "jmp_exec_any 0x1004",
            "call 0x101a",
            "stop",
            "ret r1"
        ]
    );
    let listing: String = lines.iter().map(|l| text::listing_line(l) + "\n").collect();
    assert_eq!(assemble(&listing, 0x1000).unwrap(), code);
    // `call r15` is the 2-byte register form in both passes, so the label
    // after it is where it should be.
    let code = assemble("call r15\nat_2: jmp_exec_any at_2", 0).unwrap();
    assert_eq!(
        print(&decode(&code[2..]).unwrap().instr, 2),
        "jmp_exec_any 0x2"
    );
    // Bad text never panics.
    for bad in [
        "mov_imm r0, -0x8000000000000000",
        "device_load 0, i32, xy, r65535_r0, u2_u3, r1, unsigned",
        "st_tile r32767h_r0l, i16, 0, xy, 0, 255, r0, 0",
        "bfi r0, 0, r1, 4, mask 0x7fffffffffffffff",
    ] {
        assert!(parse(bad, 0).is_err(), "{bad}");
    }
    let mut instr = parse("bfi r0, 0, r1, 4", 0).unwrap();
    instr.operands[4] = Operand::Int(70);
    let _ = print(&instr, 0);
    let err = assemble("jmp_exec_any nowhere", 0).unwrap_err();
    assert_eq!(err.line, 1);
    assert!(err.message.contains("nowhere"));
}

/// The bits each form's fields may hold (everything but the opcode).
fn field_bits(op: Op) -> u128 {
    let form = op.form();
    let mut all = 0;
    for kind in form.operands {
        all |= codec_covered(kind);
    }
    for (bit, _) in form.modifiers {
        all |= 1 << bit;
    }
    all & !form.mask
}

use super::codec::covered as codec_covered;

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// For every form: random field contents that decode as a valid
    /// instruction print to text that assembles back to the same bytes.
    #[test]
    fn bytes_text_bytes_is_the_identity(seeds in proptest::collection::vec(any::<u128>(), 64)) {
        for (index, form) in FORMS.iter().enumerate() {
            let op = Op::ALL[index];
            let mut decoded_any = false;
            // Three densities of set bits (1/2, 1/4, 1/8): sparse words
            // reach the forms whose fields have many undefined codes.
            let variants = seeds.iter().flat_map(|&s| {
                let quarter = s & s.rotate_left(17);
                [s, quarter, quarter & s.rotate_left(41)]
            });
            for (seed, long) in variants.flat_map(|s| [(s, false), (s, true)]) {
                let mut word = (seed & field_bits(op)) | form.value;
                let len = match form.length {
                    Length::Fixed(n) => usize::from(n),
                    Length::Toggle { short, long: long_len, bit } => {
                        if long {
                            word |= 1 << bit;
                            usize::from(long_len)
                        } else {
                            word &= length_mask(usize::from(short)) & !(1 << bit);
                            usize::from(short)
                        }
                    }
                };
                word &= length_mask(len);
                let bytes = &word.to_le_bytes()[..len];
                let Ok(decoded) = decode(bytes) else { continue };
                decoded_any |= decoded.instr.op == op;
                // Field bits decoding ignores (the low index bit of a
                // 32-bit register at an odd half...) are reported, and
                // the text reproduces every other bit.
                prop_assert_eq!(decoded.unknown_bits & !field_bits(op), 0, "{}", form.mnemonic);
                let text = print(&decoded.instr, 0x4000);
                let instr = parse(&text, 0x4000).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                let (again, again_len) = encode(&instr).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                let expected = (word ^ decoded.unknown_bits).to_le_bytes();
                prop_assert_eq!(&again[..again_len], &expected[..len], "{}", text);
            }
            // Every form must be reachable from random field contents.
            prop_assert!(decoded_any, "{} never decoded", form.mnemonic);
        }
    }
}
