//! `decode_fields` (the hot-path decode without unknown-bit bookkeeping)
//! gives exactly what `unpack` gives, for the formats the simulator
//! decodes per access.

use agx_hw::formats::{Pbe, Sampler, Texture, UatPte};

/// xorshift64*: deterministic test bytes.
fn bytes<const N: usize>(state: &mut u64) -> [u8; N] {
    std::array::from_fn(|_| {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
    })
}

#[test]
fn decode_fields_matches_unpack_on_random_encodings() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..20_000 {
        let b = bytes::<8>(&mut state);
        assert_eq!(
            UatPte::decode_fields(&b),
            UatPte::unpack(&b).value,
            "{b:02x?}"
        );
        assert_eq!(
            Sampler::decode_fields(&b),
            Sampler::unpack(&b).value,
            "{b:02x?}"
        );
        let b = bytes::<24>(&mut state);
        assert_eq!(
            Texture::decode_fields(&b),
            Texture::unpack(&b).value,
            "{b:02x?}"
        );
        assert_eq!(Pbe::decode_fields(&b), Pbe::unpack(&b).value, "{b:02x?}");
    }
}
