//! Apple AGX hardware formats, described once.
//!
//! The GPU reads many small binary structures that the driver writes into
//! memory: texture, PBE (render-target store) and sampler descriptors, the
//! USC control words that tell a shader core what to load before running a
//! program, the VDM (vertex), PPP (primitive setup) and CDM (compute) control
//! streams, and the depth/stencil load/store control. Every one of them is
//! described exactly once, in `hw/spec/formats.spec`; the build script turns
//! that description into the types in [`formats`], each with:
//!
//! - a struct with typed fields (enums, bools, counts in the units a driver
//!   thinks in) and a `Default` holding the hardware defaults;
//! - `pack`, which checks every field's range and encoding (an out-of-range
//!   value is a [`PackError`], never silently truncated);
//! - `unpack`, which never fails and reports every set bit that no field
//!   explains ([`UnpackIssue`]);
//! - `Display`, which names enum values and prints unknown ones as such;
//! - a static [`FormatInfo`] table, from which `Documentation/formats.md` is
//!   generated and checked.
//!
//! The same file describes the record sequences (a header whose bits say
//! which records follow: a PPP state, a VDM state update, a draw, a compute
//! launch) and the control-stream lists (VDM and CDM blocks, USC control
//! words), generated with `len_bytes`, `layout`, `walk`, `decode` and
//! `build` ([`seq`]).
//!
//! The umd packs and builds with these types, the firmware-sim decodes with
//! them and the tools print and walk with them, so the three cannot
//! disagree about a bit or about which record comes where.
//!
//! ```
//! use agx_hw::formats::{Filter, Sampler, Wrap};
//! use agx_hw::PackError;
//!
//! let sampler = Sampler { magnify: Filter::Linear, wrap_s: Wrap::Repeat, ..Sampler::default() };
//! let bytes = sampler.pack()?;
//! let decoded = Sampler::unpack(&bytes);
//! assert!(decoded.is_clean());
//! assert_eq!(decoded.value, sampler);
//! assert!(decoded.value.to_string().contains("wrap_s: Repeat"));
//!
//! // Out-of-range values are errors, not truncations.
//! let bad = Sampler { max_anisotropy: 3, ..Sampler::default() };
//! assert!(matches!(bad.pack(), Err(PackError::NotPowerOfTwo { .. })));
//! # Ok::<(), PackError>(())
//! ```
//!
//! Field layouts come from the public reverse-engineering work on AGX (Mesa's
//! `cmdbuf.xml` and Asahi Linux documentation); unknown fields are named by
//! their bit offset (`unk_52`) rather than by a guess.
// (One module, `host`, declares an unsafe constructor: whoever makes a
// host window vouches for its memory.)
#![deny(unsafe_code)]

pub mod addr;
pub mod block;
pub mod doc;
pub mod host;
pub mod isa;
pub mod layout;
mod lod;
pub mod seq;
pub mod spec;
pub mod uat;

pub use lod::Lod;
pub use seq::{List, SeqError, SeqIssue, Sequence, SequenceInfo, Slot, Walked};
pub use spec::{
    EnumInfo, FieldInfo, FieldKind, Format, FormatInfo, PackError, ShortInput, UnpackIssue,
    Unpacked,
};

/// The generated formats, enums, sequences and lists (see the crate
/// documentation and [`seq`]).
pub mod formats {
    use std::fmt;

    use crate::seq::{
        aligned_len, array_len, build_item, check_when, count_of, note_count, pad_out, peek_header,
        push_padding, push_slot, write_item, Align, EntryInfo, ItemInfo, List, ListInfo,
        ListTarget, ListVariantInfo, Reader, RecordsInfo, Selector, SeqError, SeqIssue, Sequence,
        SequenceBody, SequenceInfo, Slot, Walked,
    };
    use crate::spec::{
        decode, encode, extract_bits, mark_covered, read_stored, unknown_bits, write_stored,
        Condition, EnumInfo, FieldInfo, FieldKind, Format, FormatInfo, Modifier, PackError,
        ShortInput, UnpackIssue, Unpacked,
    };
    use crate::Lod;

    include!(concat!(env!("OUT_DIR"), "/formats.rs"));
}

pub use formats::{ALL_ENUMS, ALL_FORMATS, ALL_SEQUENCES};

#[cfg(test)]
mod seq_tests;
#[cfg(test)]
mod tests;
