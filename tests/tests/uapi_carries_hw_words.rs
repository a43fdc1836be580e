//! The UAPI render command carries raw hardware words (ZLS control, the
//! Counts word of each tilebuffer program). Their sizes must agree with the
//! formats in agx-hw, and a word packed by hw must come back bit-exact after
//! travelling through the UAPI struct's bytes.

use agx_hw::formats::{Counts, SamplerStates, ZlsControl, ZlsFormat};
use agx_uapi::asahi::{BgEot, CmdRender};
use agx_uapi::field_size_bytes;
use zerocopy::{FromBytes, IntoBytes};

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
fn hw_words_survive_the_uapi_bytes() {
    let zls = ZlsControl {
        z_load_enable: true,
        z_store_enable: true,
        z_format: ZlsFormat::F32,
        ..ZlsControl::default()
    };
    let counts = Counts {
        uniform_register_count: 64,
        texture_state_register_count: 8,
        sampler_state_register_count: SamplerStates::Compact4,
        ..Counts::default()
    };
    let render = CmdRender {
        zls_ctrl: u64::from_le_bytes(zls.pack().unwrap()),
        partial_bg: BgEot {
            usc: 0x1004,
            rsrc_spec: u32::from_le_bytes(counts.pack().unwrap()),
        },
        width_px: 64,
        height_px: 64,
        ..CmdRender::default()
    };

    let bytes = render.as_bytes().to_vec();
    let received = CmdRender::read_from_bytes(&bytes).unwrap();

    let zls_back = ZlsControl::unpack(&received.zls_ctrl.to_le_bytes());
    assert!(zls_back.is_clean());
    assert_eq!(zls_back.value, zls);
    let counts_back = Counts::unpack(&received.partial_bg.rsrc_spec.to_le_bytes());
    assert!(counts_back.is_clean());
    assert_eq!(counts_back.value, counts);
    // ZLS control sits at byte 120 of the 240-byte command.
    assert_eq!(&bytes[120..128], &zls.pack().unwrap());
}
