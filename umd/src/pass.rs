//! Render passes: attachments with load and store operations, and what the
//! driver generates from them.
//!
//! A tile-based GPU renders a pass tile by tile in on-chip tilebuffer
//! memory. Each tile starts with the *background* program (`bg`), which
//! fills the tilebuffer (a clear colour from uniforms, or the attachment's
//! contents through `texture_load`), and ends with the *end-of-tile*
//! program (`eot`), which writes it out through PBE descriptors with
//! `image_write_block`. When the parameter buffer overflows the firmware
//! renders what it has (a partial render): the tile ends with
//! `partial_eot`, which must store every attachment, and the next pass over
//! it starts with `partial_bg`, which must load them back, whatever the
//! pass's own load and store operations are. Depth goes through the
//! depth/stencil load/store unit (ZLS) under `zls_ctrl`.
//!
//! The asahi UAPI has one `zls_ctrl` for the first pass over a tile and
//! for the reload after a partial render; the GPU reloads what that word
//! stores when it resumes after a partial render, so the driver submits
//! the pass's own load (only for `LoadOp::Load`) with the store forced on,
//! and clears depth and stencil through the pass's background values
//! (`isp_bgobjdepth`, `isp_bgobjvals`), as Mesa does: then depth is right
//! however many partial renders happen.

use agx_hw::formats::ZlsControl;

use crate::error::Error;
use crate::image::{DepthImage, Format, Image};

/// Deliberate mistakes in the generated render-pass configuration, for
/// reproducing what goes wrong on hardware when a driver gets partial
/// renders wrong (the regression suite uses them). Also read from the
/// environment: `AGX_UMD_DEBUG=no_partial_bg,clearing_partial_bg,no_partial_zls`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassDebug {
    /// Leave `partial_bg` at address 0: a partial render then faults there.
    pub no_partial_bg: bool,
    /// Make `partial_bg` the pass's own `bg` (a clear, when the pass
    /// clears) instead of a load: what was drawn before the partial render
    /// is lost.
    pub clearing_partial_bg: bool,
    /// Submit a ZLS control that neither stores nor loads depth and
    /// stencil: nothing is stored for the reload after a partial render,
    /// so depth is lost at each one.
    pub no_partial_zls: bool,
}

impl PassDebug {
    /// The options named in `AGX_UMD_DEBUG` (comma-separated); unknown
    /// names are reported and ignored.
    pub fn from_env() -> PassDebug {
        let mut debug = PassDebug::default();
        if let Ok(value) = std::env::var("AGX_UMD_DEBUG") {
            for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match name {
                    "no_partial_bg" => debug.no_partial_bg = true,
                    "clearing_partial_bg" => debug.clearing_partial_bg = true,
                    "no_partial_zls" => debug.no_partial_zls = true,
                    other => tracing::warn!(option = other, "unknown AGX_UMD_DEBUG option"),
                }
            }
        }
        debug
    }
}

/// How an attachment starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadOp<T> {
    /// Every pixel gets this value.
    Clear(T),
    /// The attachment's contents.
    Load,
    /// Undefined (the driver clears to zero, cheaper than loading).
    DontCare,
}

/// What happens to an attachment at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// Written back to memory.
    Store,
    /// Discarded.
    DontCare,
}

/// A colour attachment.
#[derive(Debug, Clone, Copy)]
pub struct ColourAttachment<'a> {
    /// The image.
    pub image: &'a Image,
    /// Load operation.
    pub load: LoadOp<[f32; 4]>,
    /// Store operation.
    pub store: StoreOp,
}

/// The depth attachment.
#[derive(Debug, Clone, Copy)]
pub struct DepthAttachment<'a> {
    /// The depth buffer.
    pub image: &'a DepthImage,
    /// Load operation.
    pub load: LoadOp<f32>,
    /// Store operation.
    pub store: StoreOp,
    /// The stencil plane, if the pass has one.
    pub stencil: Option<StencilPlane<'a>>,
}

/// The stencil plane of a depth/stencil attachment.
#[derive(Debug, Clone, Copy)]
pub struct StencilPlane<'a> {
    /// The stencil buffer.
    pub image: &'a crate::image::StencilImage,
    /// Load operation.
    pub load: LoadOp<u8>,
    /// Store operation.
    pub store: StoreOp,
}

/// A render pass.
#[derive(Debug, Clone)]
pub struct RenderPassDesc<'a> {
    /// Colour attachments, render targets 0, 1, ...
    pub colour: Vec<ColourAttachment<'a>>,
    /// Depth attachment.
    pub depth: Option<DepthAttachment<'a>>,
}

/// Where a render target lives in a pixel's tilebuffer record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileSlot {
    /// Byte offset in the record.
    pub offset_bytes: u32,
    /// Element format (assembler notation).
    pub format: &'static str,
}

/// The tilebuffer layout of a set of colour formats: each target aligned
/// to its size, the record a multiple of 4 bytes.
pub fn tile_layout(formats: &[Format]) -> Result<(Vec<TileSlot>, u32), Error> {
    let mut offset = 0u32;
    let mut slots = Vec::new();
    for &format in formats {
        let tile_format = format
            .tile_format()
            .ok_or_else(|| Error::Unsupported(format!("rendering to {format:?}")))?;
        let bytes = format.element_bytes();
        offset = offset.next_multiple_of(bytes.min(8));
        slots.push(TileSlot {
            offset_bytes: offset,
            format: tile_format,
        });
        offset += bytes;
    }
    Ok((slots, offset.max(4).next_multiple_of(4)))
}

/// The value registers of a render target in generated programs: 32-bit
/// values, converted to the element format by the tilebuffer access.
const VALUES: &str = "r4_r5_r6_r7";

/// What a background program does with one render target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BgAction {
    /// Clear to the four 32-bit float values in uniforms
    /// `u(4i)..u(4i+3)`.
    Clear,
    /// Load from the image bound at texture state register `i`.
    Load,
}

/// Generates a background program: for each render target, its action.
/// Clear values are read from uniforms (four 32-bit words per target:
/// `u(4i)..u(4i+3)`), loads use `texture_load` at the pixel's
/// window coordinates (`sr80`, `sr81`) from texture state register `i`.
pub fn bg_source(slots: &[TileSlot], actions: &[BgAction]) -> String {
    let mut s = String::from("; generated background program\n");
    let loads = actions.contains(&BgAction::Load);
    if loads {
        s.push_str("    get_sr r8, sr80\n    get_sr r9, sr81\n    mov_imm r10l, 0\n");
    }
    for (i, (slot, action)) in slots.iter().zip(actions).enumerate() {
        let values = VALUES;
        match action {
            BgAction::Clear => {
                let dst = ["r4", "r5", "r6", "r7"];
                for (c, d) in dst.iter().enumerate() {
                    s.push_str(&format!("    mov {d}, u{}\n", 4 * i + c));
                }
            }
            BgAction::Load => {
                s.push_str(&format!(
                    "    texture_load 0, 0b1100, 0, none, xyzw, 0b00, {values}, None, ts{i}, ss0, tex_2d, r8_r9, lod_min, r10l, 0, r0\n    wait 0\n"
                ));
            }
        }
        s.push_str(&format!(
            "    st_tile {values}, {}, 0, xyzw, {}, 255, r0, 0\n",
            slot.format, slot.offset_bytes
        ));
    }
    s.push_str("    stop\n");
    s
}

/// Generates an end-of-tile program storing the render targets in
/// `store` through the PBE descriptors at texture state registers
/// `0..n` (one per render target).
pub fn eot_source(slots: &[TileSlot], store: &[bool]) -> String {
    let mut s = String::from("; generated end-of-tile program\n    mov_imm r4, 0\n");
    for (i, (slot, store)) in slots.iter().zip(store).enumerate() {
        if *store {
            s.push_str(&format!(
                "    mov_imm r2, {}\n    image_write_block r2, r4, 0, None, ts{i}, tex_2d, rte, {}, 0, 9, 1\n",
                slot.offset_bytes, slot.format
            ));
        }
    }
    s.push_str("    stop\n");
    s
}

/// The ZLS controls of a depth attachment: the pass's own (load if the
/// load operation is `Load`, store if the store operation is `Store`)
/// and the word the driver submits, whose store is forced on so that a
/// partial render keeps the depth and stencil the resumed segment
/// reloads. The asahi UAPI has one `zls_ctrl` for the first pass over a
/// tile and for the reload after a partial render; the GPU reloads what
/// the word stores after a partial render (what Mesa relies on), so the
/// first pass need not load: a clear is `isp_bgobjdepth` and
/// `isp_bgobjvals`, as in Mesa.
pub fn zls_controls(depth: Option<&DepthAttachment<'_>>) -> (ZlsControl, ZlsControl) {
    let Some(depth) = depth else {
        return (ZlsControl::default(), ZlsControl::default());
    };
    let normal = ZlsControl {
        z_load_enable: depth.load == LoadOp::Load,
        z_store_enable: depth.store == StoreOp::Store,
        s_load_enable: depth.stencil.is_some_and(|s| s.load == LoadOp::Load),
        s_store_enable: depth.stencil.is_some_and(|s| s.store == StoreOp::Store),
        ..ZlsControl::default()
    };
    let submitted = ZlsControl {
        z_store_enable: true,
        s_store_enable: depth.stencil.is_some(),
        ..normal
    };
    (normal, submitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_packed_in_the_tilebuffer_record() {
        let (slots, bytes) =
            tile_layout(&[Format::Rgba8Unorm, Format::Rgba16Float, Format::Rgba8Unorm]).unwrap();
        let offsets: Vec<u32> = slots.iter().map(|s| s.offset_bytes).collect();
        assert_eq!(offsets, [0, 8, 16]);
        assert_eq!(bytes, 20);
        assert!(tile_layout(&[Format::Rgba8Srgb]).is_err());
    }

    #[test]
    fn generated_programs_assemble() {
        let (slots, _) = tile_layout(&[Format::Rgba8Unorm, Format::Rgba16Float]).unwrap();
        for actions in [
            [BgAction::Clear, BgAction::Clear],
            [BgAction::Load, BgAction::Clear],
            [BgAction::Load, BgAction::Load],
        ] {
            let source = bg_source(&slots, &actions);
            agx_hw::isa::text::assemble(&source, 0x1_0000_0000)
                .unwrap_or_else(|e| panic!("{e}\n{source}"));
        }
        let source = eot_source(&slots, &[true, false]);
        agx_hw::isa::text::assemble(&source, 0x1_0000_0000)
            .unwrap_or_else(|e| panic!("{e}\n{source}"));
    }
}
