//! The UAPI render command carries raw hardware words (ZLS control, the
//! Counts word of each tilebuffer program). The formats in agx-hw must
//! produce the hardware's encoding of them (checked against encodings
//! written out by hand from the bit positions in Mesa's cmdbuf.xml), and
//! the words must sit where the kernel's `drm_asahi_cmd_render` has them.

use agx_hw::formats::{Counts, SamplerStates, ZlsControl, ZlsFormat};
use agx_uapi::asahi::{BgEot, CmdRender};
use agx_uapi::field_size_bytes;
use zerocopy::IntoBytes;

#[test]
fn field_sizes_match_the_formats() {
    assert_eq!(
        field_size_bytes(|c: &CmdRender| &c.zls_ctrl),
        ZlsControl::SIZE_BYTES
    );
    assert_eq!(
        field_size_bytes(|b: &BgEot| &b.rsrc_spec),
        Counts::SIZE_BYTES
    );
}

#[test]
fn hw_words_have_the_hardware_encoding_at_the_uapi_offsets() {
    let zls = ZlsControl {
        z_load_enable: true,
        z_store_enable: true,
        s_store_enable: true,
        z_format: ZlsFormat::Unorm16,
        ..ZlsControl::default()
    };
    // Z load 15, S store 18, Z store 19, Z format 25..26 (16-bit unorm 2).
    let zls_word: u64 = (1 << 15) | (1 << 18) | (1 << 19) | (2 << 25);
    assert_eq!(u64::from_le_bytes(zls.pack().unwrap()), zls_word);

    let counts = Counts {
        uniform_register_count: 128,
        texture_state_register_count: 16,
        sampler_state_register_count: SamplerStates::Compact4,
        preshader_register_count: 16,
        cf_binding_count: 3,
        ..Counts::default()
    };
    // Uniforms in groups of 64 at 1..3, textures in 8s at 4..8, sampler
    // states at 9..11 (4 compact = 1), preshader in 16s at 12..15,
    // coefficient bindings at 16..22.
    let counts_word: u32 = (2 << 1) | (2 << 4) | (1 << 9) | (1 << 12) | (3 << 16);
    assert_eq!(u32::from_le_bytes(counts.pack().unwrap()), counts_word);

    let render = CmdRender {
        zls_ctrl: zls_word,
        partial_bg: BgEot {
            usc: 0x1004,
            rsrc_spec: counts_word,
        },
        width_px: 64,
        height_px: 64,
        ..CmdRender::default()
    };
    let bytes = render.as_bytes();
    // ZLS control sits at byte 120 of the 240-byte command, the partial
    // background program's Counts word 4 bytes into its BgEot.
    assert_eq!(bytes.len(), 240);
    assert_eq!(&bytes[120..128], &zls_word.to_le_bytes());
    let partial_bg = std::mem::offset_of!(CmdRender, partial_bg);
    assert_eq!(
        &bytes[partial_bg + 4..partial_bg + 8],
        &counts_word.to_le_bytes()
    );
}
