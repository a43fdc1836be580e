//! Tests of the generated formats as a whole.

use proptest::prelude::*;

use crate::formats::*;
use crate::spec::{write_stored, FieldKind, Format, PackError, UnpackIssue};

/// Checks, for any input bytes, that decoding and re-encoding reproduces
/// exactly the bits the format explains, that exactly the other bits are
/// reported, and that a decoded value survives pack/unpack unchanged.
fn round_trip<T: Format>(bytes: &[u8]) -> Result<(), TestCaseError> {
    let name = T::INFO.name;
    let unpacked = T::unpack_from(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let packed = unpacked
        .value
        .pack_to_vec()
        .map_err(|e| TestCaseError::fail(format!("{name}: decoded value does not pack: {e}")))?;

    // What pack must produce: the input without the reported unknown bits,
    // with every constant at its expected value.
    let mut expected = bytes[..T::SIZE_BYTES].to_vec();
    for issue in &unpacked.issues {
        if let UnpackIssue::UnknownBits { word, mask, .. } = *issue {
            for (i, byte) in mask.to_le_bytes().iter().enumerate() {
                if let Some(b) = expected.get_mut(word * 4 + i) {
                    *b &= !byte;
                }
            }
        }
    }
    for field in T::INFO.fields {
        if let FieldKind::Const { value, .. } = field.kind {
            write_stored(&mut expected, field, value);
        }
    }
    prop_assert_eq!(
        &packed,
        &expected,
        "{}: pack(unpack(bytes)) lost or invented bits",
        name
    );

    let again = T::unpack_from(&packed).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        again.is_clean(),
        "{}: repacked bytes have issues: {:?}",
        name,
        again.issues
    );
    // unpack(pack(x)) == x, compared bit-exactly (floats may hold NaN).
    let repacked = again
        .value
        .pack_to_vec()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&repacked, &packed, "{}: unpack(pack(x)) != x", name);
    if values_comparable(&unpacked.value) {
        prop_assert_eq!(
            &again.value,
            &unpacked.value,
            "{}: unpack(pack(x)) != x",
            name
        );
    }
    Ok(())
}

/// False for values holding a NaN float, which `==` cannot compare.
fn values_comparable<T: PartialEq>(value: &T) -> bool {
    #[allow(clippy::eq_op)]
    let reflexive = value == value;
    reflexive
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_format_round_trips(bytes in proptest::collection::vec(any::<u8>(), 32)) {
        macro_rules! check {
            ($t:ident) => {
                round_trip::<$t>(&bytes)?;
            };
        }
        crate::formats::for_each_format!(check);
    }

    /// The fast decode sequences use agrees with `unpack` for every format.
    #[test]
    fn decode_from_matches_unpack(bytes in proptest::collection::vec(any::<u8>(), 32)) {
        macro_rules! check {
            ($t:ident) => {
                let fast = $t::decode_from(&bytes).unwrap();
                let full = $t::unpack_from(&bytes).unwrap().value;
                // Through Debug: a NaN float is not == itself.
                prop_assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{}", stringify!($t));
                prop_assert!($t::decode_from(&bytes[..$t::SIZE_BYTES - 1]).is_err());
            };
        }
        crate::formats::for_each_format!(check);
    }

    #[test]
    fn sparse_inputs_round_trip(bits in proptest::collection::vec(0usize..256, 0..4)) {
        let mut bytes = vec![0u8; 32];
        for bit in bits {
            bytes[bit / 8] |= 1 << (bit % 8);
        }
        macro_rules! check {
            ($t:ident) => {
                round_trip::<$t>(&bytes)?;
            };
        }
        crate::formats::for_each_format!(check);
    }
}

/// Every single bit of every format is either reproduced by pack (some
/// field explains it) or reported as unknown. Exhaustive, not sampled.
#[test]
fn every_bit_is_explained_or_reported() {
    fn check<T: Format>() {
        for bit in 0..T::SIZE_BYTES * 8 {
            let mut bytes = vec![0u8; T::SIZE_BYTES];
            bytes[bit / 8] = 1 << (bit % 8);
            if let Err(e) = round_trip::<T>(&bytes) {
                panic!("{} bit {bit}: {e}", T::INFO.name);
            }
        }
    }
    macro_rules! each {
        ($t:ident) => {
            check::<$t>();
        };
    }
    crate::formats::for_each_format!(each);
}

#[test]
fn defaults_pack() {
    macro_rules! each {
        ($t:ident) => {
            let packed = $t::default().pack();
            assert!(packed.is_ok(), "{}: {:?}", stringify!($t), packed);
            let back = $t::unpack(&packed.unwrap());
            assert!(back.is_clean(), "{}", stringify!($t));
            assert_eq!(back.value, $t::default(), "{}", stringify!($t));
        };
    }
    crate::formats::for_each_format!(each);
}

#[test]
fn tables_are_complete() {
    assert!(crate::ALL_FORMATS.len() >= 50);
    let mut names: Vec<_> = crate::ALL_FORMATS.iter().map(|f| f.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), crate::ALL_FORMATS.len());
    for f in crate::ALL_FORMATS {
        assert!(!f.doc.is_empty(), "{} has no doc", f.name);
        for field in f.fields {
            assert!(
                !field.doc.is_empty(),
                "{}.{} has no doc",
                f.name,
                field.name
            );
        }
    }
}

// ---- Known answers: bit positions computed by hand, not by the generator.

fn word(bytes: &[u8], index: usize) -> u32 {
    u32::from_le_bytes(bytes[index * 4..index * 4 + 4].try_into().unwrap())
}

#[test]
fn usc_uniform_known_encoding() {
    let w = UscUniform {
        start_halfs: 4,
        size_halfs: 8,
        buffer: 0x1_2345_6788,
    };
    let bytes = w.pack().unwrap();
    let expected: u64 = 0x1d | 4 << 8 | 8 << 20 | (0x1_2345_6788u64 >> 2) << 26;
    assert_eq!(u64::from_le_bytes(bytes), expected);
    // 64 halves is the all-groups value, stored as 0.
    let full = UscUniform {
        size_halfs: 64,
        ..w
    }
    .pack()
    .unwrap();
    assert_eq!(u64::from_le_bytes(full) >> 20 & 0x3f, 0);
}

#[test]
fn texture_known_encoding() {
    let t = Texture {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 256,
        height: 128,
        address: 0x10_0000_4000,
        stride: 1024,
        ..Texture::default()
    };
    let b = t.pack().unwrap();
    let lo = u64::from_le_bytes(b[0..8].try_into().unwrap());
    assert_eq!(lo & 0xf, 2);
    assert_eq!(lo >> 4 & 0x3, 0);
    assert_eq!(lo >> 6 & 0x7f, 0x28);
    assert_eq!(
        lo >> 16 & 0xfff,
        1 << 3 | 2 << 6 | 3 << 9,
        "identity swizzle"
    );
    assert_eq!(lo >> 28 & 0x3fff, 255);
    assert_eq!(lo >> 42 & 0x3fff, 127);
    let hi = u128::from_le_bytes(b[8..24].try_into().unwrap());
    // Bits 64.. of the descriptor: address >> 4 at bit 66, stride at bit 110.
    assert_eq!(hi >> 2 & ((1 << 36) - 1), 0x10_0000_4000 >> 4);
    assert_eq!(hi >> (110 - 64) & ((1 << 18) - 1), (1024 - 16) >> 4);
}

#[test]
fn pbe_linear_stride_is_bytes_minus_four() {
    let p = Pbe {
        layout: Layout::Linear,
        stride: 1024,
        ..Pbe::default()
    };
    let b = p.pack().unwrap();
    let w3 = word(&b, 3);
    assert_eq!(w3 >> 8 & ((1 << 21) - 1), 1020);
}

#[test]
fn zls_control_known_encoding() {
    let z = ZlsControl {
        z_load_enable: true,
        z_store_enable: true,
        s_store_enable: true,
        z_format: ZlsFormat::Unorm16,
        ..ZlsControl::default()
    };
    assert_eq!(
        u64::from_le_bytes(z.pack().unwrap()),
        1 << 15 | 1 << 19 | 1 << 18 | 2 << 25
    );
}

#[test]
fn control_stream_words_known_encoding() {
    assert_eq!(
        VdmStreamTerminate::default().pack().unwrap(),
        [0, 0, 0, 0xc0, 0, 0, 0, 0]
    );
    assert_eq!(
        CdmStreamTerminate::default().pack().unwrap(),
        [0, 0, 0, 0x40, 0, 0, 0, 0]
    );
    let link = VdmStreamLink {
        target: 0xAB_1234_5678,
        with_return: false,
    }
    .pack()
    .unwrap();
    assert_eq!(word(&link, 0), 4 << 29 | 0xAB);
    assert_eq!(word(&link, 1), 0x1234_5678);
    let ppp = PppState {
        pointer: 0x15_0000_0100,
        size_words: 7,
    }
    .pack()
    .unwrap();
    assert_eq!(word(&ppp, 0), 0x15 | 7 << 8);
    assert_eq!(word(&ppp, 1), 0x100);
    let indirect = CdmIndirect {
        address: 0x12_8000_0004,
    }
    .pack()
    .unwrap();
    assert_eq!(word(&indirect, 0), 0x12);
    assert_eq!(word(&indirect, 1), 0x8000_0004);
    let counts = Counts {
        uniform_register_count: 128,
        texture_state_register_count: 16,
        sampler_state_register_count: SamplerStates::Compact4,
        ..Counts::default()
    };
    assert_eq!(
        u32::from_le_bytes(counts.pack().unwrap()),
        2 << 1 | 2 << 4 | 1 << 9 | 1 << 12
    );
    let regs = UscRegisters::default().pack().unwrap();
    assert_eq!(u32::from_le_bytes(regs), 0x8d | 1 << 8 | 1 << 24);
}

#[test]
fn pack_rejects_what_does_not_fit() {
    let t = Texture {
        width: 0,
        ..Texture::default()
    };
    assert!(matches!(
        t.pack(),
        Err(PackError::OutOfRange {
            field: "width",
            min: 1,
            ..
        })
    ));
    let t = Texture {
        width: 16385,
        ..Texture::default()
    };
    assert!(matches!(
        t.pack(),
        Err(PackError::OutOfRange {
            field: "width",
            max: 16384,
            ..
        })
    ));
    let t = Texture {
        address: 0x1008,
        ..Texture::default()
    };
    assert!(matches!(
        t.pack(),
        Err(PackError::NotMultiple {
            field: "address",
            multiple: 16,
            ..
        })
    ));
    // A twiddled texture has no stride: its bits hold the depth.
    let t = Texture {
        layout: Layout::Twiddled,
        stride: 64,
        ..Texture::default()
    };
    assert!(matches!(
        t.pack(),
        Err(PackError::InactiveField {
            field: "stride",
            ..
        })
    ));
    // Enum values must fit their field: One/Zero cannot be stored in the
    // PBE's 2-bit swizzle.
    let p = Pbe {
        swizzle_a: Channel::One,
        ..Pbe::default()
    };
    assert!(matches!(
        p.pack(),
        Err(PackError::OutOfRange {
            field: "swizzle_a",
            ..
        })
    ));
    let s = Sampler {
        max_anisotropy: 3,
        ..Sampler::default()
    };
    assert!(matches!(s.pack(), Err(PackError::NotPowerOfTwo { .. })));
    let r = UscRegisters {
        register_count: 12,
        ..UscRegisters::default()
    };
    assert!(matches!(
        r.pack(),
        Err(PackError::NotMultiple { multiple: 8, .. })
    ));
    let mut small = [0u8; 4];
    assert!(matches!(
        Sampler::default().pack_into(&mut small),
        Err(PackError::BufferTooSmall {
            size_bytes: 8,
            len: 4,
            ..
        })
    ));
}

#[test]
fn unpack_reports_unknown_bits_and_bad_constants() {
    // Sampler bit 50 is not a known field.
    let mut bytes = Sampler::default().pack().unwrap();
    bytes[6] |= 1 << 2;
    let u = Sampler::unpack(&bytes);
    assert_eq!(
        u.issues,
        vec![UnpackIssue::UnknownBits {
            word: 1,
            value: 1 << 18,
            mask: 1 << 18
        }]
    );

    let mut bytes = UscUniform::default().pack().unwrap();
    bytes[0] = 0x1e;
    let u = UscUniform::unpack(&bytes);
    assert_eq!(
        u.issues,
        vec![UnpackIssue::ConstMismatch {
            field: "tag",
            expected: 0x1d,
            found: 0x1e
        }]
    );
    assert!(UscUniform::unpack_from(&bytes[..4]).is_err());
}

#[test]
fn display_names_values_and_shows_unknown_ones() {
    let t = Texture {
        channels: Channels::Unknown(0x7f),
        layout: Layout::Twiddled,
        width: 64,
        ..Texture::default()
    };
    let text = t.to_string();
    assert!(text.starts_with("Texture\n"), "{text}");
    assert!(text.contains("  dimension: 2D\n"), "{text}");
    assert!(text.contains("  channels: unknown 0x7f\n"), "{text}");
    assert!(text.contains("  width: 64\n"), "{text}");
    assert!(text.contains("  address: 0x0\n"), "{text}");
    assert!(text.contains("  depth: 1\n"), "{text}");
    assert!(
        !text.contains("stride"),
        "inactive fields are not printed: {text}"
    );

    let mut bytes = Sampler::default().pack().unwrap();
    bytes[7] |= 0x80;
    let printed = Sampler::unpack(&bytes).to_string();
    assert!(printed.contains("XXX: unknown bits in word 1"), "{printed}");
}
