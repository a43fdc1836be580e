//! Record sequences: a header word whose bits say which records follow.
//!
//! Much of what the driver writes for the GPU is not one fixed-size format
//! but a run of them. A PPP state record starts with a [`PppHeader`] whose
//! present bits say which of 23 records follow (in header-bit order, with
//! one region clip and one viewport per viewport); a VDM state update is a
//! [`VdmState`] header and the words its bits select, padded with zeros to a
//! multiple of 8 bytes unless a tessellation scale word is present; an
//! index list (a draw) is an [`IndexList`] header
//! and the words its bits select, in an order that is *not* bit order; a
//! compute launch has a different tail for each [`CdmMode`]. The VDM and
//! CDM control streams and the USC control words are in turn *lists*: items
//! one after another, each told apart by a tag in its first bits
//! ([`VdmBlockType`], [`CdmBlockType`], [`UscControl`]).
//!
//! `hw/spec/formats.spec` describes each sequence and list once, next to
//! the formats it is made of, and the build script generates for each a
//! typed value (an `Option` per optional record, a `Vec` per counted array,
//! an enum per list) with:
//!
//! - `len_bytes`: how many bytes the header (or, for a list, the first
//!   [`List::PEEK_BYTES`] bytes) implies, padding included;
//! - `layout`: the offset, size and format of every record (a [`Slot`]),
//!   for decoders that print records one by one;
//! - `walk`: parses a sequence at the start of a byte slice and reports
//!   every bit no format explains, with its offset (for the decoder);
//! - `decode`: the same parse without that bookkeeping, through each
//!   format's `decode_fields` (for the simulator, which walks every draw);
//! - `build`: appends the encoding, *deriving* present bits and counts from
//!   which members are `Some` and how long the arrays are.
//!
//! Present bits and counts belong to the sequence: `walk` reads them,
//! `build` computes them and overwrites whatever the value's header held.
//! `walk` and `decode` never panic and never allocate more than the input
//! can hold: too-short input, an unknown tag or an unknown value of a field
//! that decides the layout is a [`SeqError`].
//!
//! ```
//! use agx_hw::formats::{Cull, PppRecords, PppRecordsViewport, Viewport};
//!
//! let records = PppRecords {
//!     cull: Some(Cull { cull_back: true, ..Cull::default() }),
//!     viewport: Some(PppRecordsViewport {
//!         viewports: vec![Viewport { scale_x: 320.0, ..Viewport::default() }],
//!         ..PppRecordsViewport::default()
//!     }),
//!     ..PppRecords::default()
//! };
//! let mut bytes = Vec::new();
//! let len = records.build(&mut bytes)?;
//! assert_eq!(len, 4 + 4 + 24 + 4); // header, viewport control, viewport, cull
//! let header = records.encoded_header()?;
//! assert!(header.viewport && header.cull && header.viewport_count == 1);
//! assert_eq!(PppRecords::len_bytes(&header)?, len);
//!
//! let walked = PppRecords::walk(&bytes)?;
//! assert_eq!(walked.value, records);
//! assert_eq!(walked.len_bytes, len);
//! assert!(walked.is_clean());
//! # Ok::<(), agx_hw::SeqError>(())
//! ```
//!
//! A control stream is read one list item at a time: the first
//! `PEEK_BYTES` give the item's length, then `decode` (or `walk`) parses
//! it. Following links is the caller's business.
//!
//! ```
//! use agx_hw::formats::{
//!     IndexList, IndexListBlock, IndexListCount, IndexListInstances, IndexListStart, Primitive,
//!     VdmBlock, VdmStateVertexOutputs, VdmStateWords, VdmStreamTerminate,
//! };
//!
//! let mut stream = Vec::new();
//! let state = VdmStateWords {
//!     vertex_outputs: Some(VdmStateVertexOutputs { output_count_1: 4, output_count_2: 0 }),
//!     ..VdmStateWords::default()
//! };
//! VdmBlock::VdmStateUpdate(state).build(&mut stream)?;
//! let draw = IndexListBlock {
//!     header: IndexList { primitive: Primitive::Triangles, ..IndexList::default() },
//!     count: Some(IndexListCount { count: 3 }),
//!     instances: Some(IndexListInstances { count: 1 }),
//!     start: Some(IndexListStart { start: 0 }),
//!     ..IndexListBlock::default()
//! };
//! VdmBlock::IndexList(draw).build(&mut stream)?;
//! VdmBlock::StreamTerminate(VdmStreamTerminate::default()).build(&mut stream)?;
//!
//! let mut pc = 0;
//! let mut vertices = 0;
//! loop {
//!     let len = VdmBlock::len_bytes(&stream[pc..pc + VdmBlock::PEEK_BYTES])?;
//!     let block = VdmBlock::decode(&stream[pc..pc + len])?.value;
//!     pc += len;
//!     match block {
//!         VdmBlock::IndexList(draw) => vertices += draw.count.map_or(0, |c| c.count),
//!         block if block.is_end() => break,
//!         _ => {}
//!     }
//! }
//! assert_eq!((pc, vertices), (8 + 16 + 8, 3));
//! # Ok::<(), agx_hw::SeqError>(())
//! ```
//!
//! [`PppHeader`]: crate::formats::PppHeader
//! [`VdmState`]: crate::formats::VdmState
//! [`IndexList`]: crate::formats::IndexList
//! [`CdmMode`]: crate::formats::CdmMode
//! [`VdmBlockType`]: crate::formats::VdmBlockType
//! [`CdmBlockType`]: crate::formats::CdmBlockType
//! [`UscControl`]: crate::formats::UscControl

use std::fmt;

use crate::spec::{Condition, EnumInfo, Format, FormatInfo, PackError, UnpackIssue};

/// Why a sequence or list item cannot be walked or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeqError {
    /// The input ends before the sequence does.
    #[error("{sequence} needs {need_bytes} bytes, got {len_bytes}")]
    Short {
        /// Sequence or list name.
        sequence: &'static str,
        /// Bytes the sequence needs (as far as it could be read).
        need_bytes: usize,
        /// Bytes available.
        len_bytes: usize,
    },
    /// A record does not pack.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// Two arrays counted by the same header field differ in length.
    #[error("{sequence}.{member} has {len_items} items, but {count_field} is {expected_items} from an earlier array")]
    CountMismatch {
        /// Sequence name.
        sequence: &'static str,
        /// The header field counting both arrays.
        count_field: &'static str,
        /// The array (as a member path) that disagrees.
        member: &'static str,
        /// Its length.
        len_items: usize,
        /// The length of the earlier array.
        expected_items: usize,
    },
    /// A member required by the header's condition is `None`.
    #[error("{sequence}.{member} is required when {condition}")]
    Missing {
        /// Sequence name.
        sequence: &'static str,
        /// The missing member.
        member: &'static str,
        /// When it is required.
        condition: Condition,
    },
    /// A member is `Some` although the header's condition excludes it.
    #[error("{sequence}.{member} must be None unless {condition}")]
    Inactive {
        /// Sequence name.
        sequence: &'static str,
        /// The member that must be `None`.
        member: &'static str,
        /// When it would be allowed.
        condition: Condition,
    },
    /// A header field that decides which records follow holds a value the
    /// spec does not name, so the sequence's length is unknown.
    #[error("{sequence}: {field} is {raw:#x}, a value with no known layout")]
    UnknownDiscriminant {
        /// Sequence name.
        sequence: &'static str,
        /// The header field.
        field: &'static str,
        /// Its raw value.
        raw: u32,
    },
    /// A list item's tag is not a value the spec names.
    #[error("{list}: unknown tag {raw:#x}")]
    UnknownTag {
        /// List name.
        list: &'static str,
        /// The raw tag.
        raw: u32,
    },
    /// A list item whose tag is known but whose layout the spec does not
    /// describe (`unsupported` in the spec).
    #[error("{list}: {variant} items are not supported")]
    Unsupported {
        /// List name.
        list: &'static str,
        /// The tag's variant name.
        variant: &'static str,
    },
}

/// Something a format in a sequence could not explain, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqIssue {
    /// Offset of the record from the start of the sequence.
    pub offset_bytes: usize,
    /// Member path of the record (`header`, `viewport.viewports`,
    /// `padding`); for a list item that is a single format, the variant's
    /// name (`Barrier`).
    pub member: &'static str,
    /// Index in its array, for counted records.
    pub index: Option<usize>,
    /// What the record's format could not explain. For `padding`, an
    /// `UnknownBits` with the word index from the padding's start.
    pub issue: UnpackIssue,
}

impl fmt::Display for SeqIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:#x} {}", self.offset_bytes, self.member)?;
        if let Some(i) = self.index {
            write!(f, "[{i}]")?;
        }
        write!(f, ": {}", self.issue)
    }
}

/// A parsed sequence or list item.
#[derive(Debug, Clone, PartialEq)]
pub struct Walked<T> {
    /// The value.
    pub value: T,
    /// Bytes consumed, padding included (equal to `len_bytes` of the header).
    pub len_bytes: usize,
    /// Bits no format explains and constants that did not match, with
    /// their offsets. Always empty from `decode`, which does not look.
    pub issues: Vec<SeqIssue>,
}

impl<T> Walked<T> {
    /// Whether every set bit was explained and every constant matched.
    pub fn is_clean(&self) -> bool {
        self.issues.is_empty()
    }
}

/// One record of a sequence as laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Offset from the start of the sequence.
    pub offset_bytes: usize,
    /// Size of the record.
    pub size_bytes: usize,
    /// Member path (`header`, `cull`, `viewport.viewports`, `padding`);
    /// for a list item that is a single format, the variant's name
    /// (`Barrier`).
    pub member: &'static str,
    /// Index in its array, for counted records.
    pub index: Option<usize>,
    /// The record's format; `None` for zero padding.
    pub format: Option<&'static FormatInfo>,
}

impl Slot {
    /// Offset just past the record.
    pub fn end_bytes(&self) -> usize {
        self.offset_bytes + self.size_bytes
    }
}

/// Static description of a generated sequence or list (for documentation
/// and generic code).
#[derive(Debug, Clone, Copy)]
pub struct SequenceInfo {
    /// Rust type name.
    pub name: &'static str,
    /// What it is.
    pub doc: &'static str,
    /// Its shape.
    pub body: SequenceBody,
}

/// The two shapes a [`SequenceInfo`] describes.
#[derive(Debug, Clone, Copy)]
pub enum SequenceBody {
    /// A header and the records it selects.
    Records(RecordsInfo),
    /// Items told apart by a tag.
    List(ListInfo),
}

/// A header and the records it selects, in stream order.
#[derive(Debug, Clone, Copy)]
pub struct RecordsInfo {
    /// The header format.
    pub header: &'static FormatInfo,
    /// Zero padding at the end, if any.
    pub align: Option<Align>,
    /// The optional (or unconditional) parts, in stream order.
    pub entries: &'static [EntryInfo],
}

/// Zero padding at the end of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Align {
    /// The sequence is padded to a multiple of this many bytes...
    pub bytes: usize,
    /// ...unless this header bit is set.
    pub unless: Option<&'static str>,
}

/// What decides whether an entry's records are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// Always present.
    Always,
    /// Present when this 1-bit header field is set.
    Present(&'static str),
    /// Present when a header enum field has (or has not) a value.
    When(Condition),
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Always => f.write_str("always"),
            Selector::Present(bit) => f.write_str(bit),
            Selector::When(c) => write!(f, "{c}"),
        }
    }
}

/// One line of a sequence: a selector and the records it brings.
#[derive(Debug, Clone, Copy)]
pub struct EntryInfo {
    /// When the records are present.
    pub selector: Selector,
    /// The member of the generated struct holding them.
    pub member: &'static str,
    /// The records, in stream order. Several records form a group struct.
    pub items: &'static [ItemInfo],
    /// What the entry is (empty: see the formats).
    pub doc: &'static str,
}

/// One record (or counted array of records) of an entry.
#[derive(Debug, Clone, Copy)]
pub struct ItemInfo {
    /// Field name (in the group struct, or the entry's member).
    pub member: &'static str,
    /// The record's format.
    pub format: &'static FormatInfo,
    /// The header field counting the records; `None` for a single record.
    pub count: Option<&'static str>,
}

/// Items told apart by a tag in their first bits.
#[derive(Debug, Clone, Copy)]
pub struct ListInfo {
    /// Lowest bit of the tag.
    pub tag_lo_bit: u32,
    /// Width of the tag.
    pub tag_width_bits: u32,
    /// The tag's enum.
    pub tag_enum: &'static EnumInfo,
    /// One per tag value.
    pub variants: &'static [ListVariantInfo],
}

/// One kind of list item.
#[derive(Debug, Clone, Copy)]
pub struct ListVariantInfo {
    /// The tag enum's variant (also the list enum's variant).
    pub variant: &'static str,
    /// The tag value.
    pub value: u32,
    /// What follows the tag.
    pub target: ListTarget,
    /// The item ends the list (a terminator).
    pub end: bool,
}

/// What a list item is.
#[derive(Debug, Clone, Copy)]
pub enum ListTarget {
    /// A single format.
    Format(&'static FormatInfo),
    /// A sequence.
    Sequence(&'static SequenceInfo),
    /// Known tag, layout not described: walking it is an error.
    Unsupported,
}

/// What every generated sequence offers, for generic code. The same
/// functions exist as inherent ones, so callers need not import this.
pub trait Sequence: Sized + Clone + fmt::Debug + fmt::Display + PartialEq {
    /// The header format.
    type Header: Format;
    /// Static description.
    const INFO: &'static SequenceInfo;

    /// The header this value is encoded with: present bits and counts
    /// derived from the members, everything else from the value's header.
    ///
    /// # Errors
    /// [`SeqError::CountMismatch`], [`SeqError::Missing`],
    /// [`SeqError::Inactive`] or [`SeqError::UnknownDiscriminant`].
    fn encoded_header(&self) -> Result<Self::Header, SeqError>;

    /// Bytes the header implies, header and padding included.
    ///
    /// # Errors
    /// [`SeqError::UnknownDiscriminant`] if a field deciding the layout
    /// holds an unknown value.
    fn len_bytes(header: &Self::Header) -> Result<usize, SeqError>;

    /// Every record the header implies, header first, padding last.
    ///
    /// # Errors
    /// As [`Sequence::len_bytes`].
    fn layout(header: &Self::Header) -> Result<Vec<Slot>, SeqError>;

    /// Parses the sequence at the start of `bytes`, reporting unknown bits.
    ///
    /// # Errors
    /// [`SeqError::Short`] or [`SeqError::UnknownDiscriminant`]; never panics.
    fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError>;

    /// Parses like [`Sequence::walk`] without looking for unknown bits.
    ///
    /// # Errors
    /// As [`Sequence::walk`].
    fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError>;

    /// Appends the encoding to `out` and returns its length; on error `out`
    /// is left as it was.
    ///
    /// # Errors
    /// Those of [`Sequence::encoded_header`], and [`SeqError::Pack`].
    fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError>;
}

/// What every generated list offers, for generic code. Lists are read one
/// item at a time: following links stays with the caller, which owns the
/// memory access.
pub trait List: Sized + Clone + fmt::Debug + fmt::Display + PartialEq {
    /// The tag enum.
    type Tag;
    /// Static description.
    const INFO: &'static SequenceInfo;
    /// Bytes [`List::len_bytes`] needs: enough for the tag and for every
    /// item's header.
    const PEEK_BYTES: usize;

    /// The tag of the item starting at `first`.
    ///
    /// # Errors
    /// [`SeqError::Short`] if `first` does not hold the tag.
    fn peek_tag(first: &[u8]) -> Result<Self::Tag, SeqError>;

    /// Length of the item starting at `first` (which needs at least
    /// [`List::PEEK_BYTES`] bytes).
    ///
    /// # Errors
    /// [`SeqError::Short`], [`SeqError::UnknownTag`],
    /// [`SeqError::Unsupported`] or [`SeqError::UnknownDiscriminant`].
    fn len_bytes(first: &[u8]) -> Result<usize, SeqError>;

    /// The records of the item starting at `first`.
    ///
    /// # Errors
    /// As [`List::len_bytes`].
    fn layout(first: &[u8]) -> Result<Vec<Slot>, SeqError>;

    /// Parses the item at the start of `bytes`, reporting unknown bits.
    ///
    /// # Errors
    /// As [`List::len_bytes`]; never panics.
    fn walk(bytes: &[u8]) -> Result<Walked<Self>, SeqError>;

    /// Parses like [`List::walk`] without looking for unknown bits.
    ///
    /// # Errors
    /// As [`List::walk`].
    fn decode(bytes: &[u8]) -> Result<Walked<Self>, SeqError>;

    /// Appends the encoding and returns its length.
    ///
    /// # Errors
    /// As [`Sequence::build`].
    fn build(&self, out: &mut Vec<u8>) -> Result<usize, SeqError>;

    /// The item's tag.
    fn tag(&self) -> Self::Tag;

    /// Whether the item ends the list.
    fn is_end(&self) -> bool;
}

// ---- Helpers for the generated code.

/// Reads records one after another, with or without issue bookkeeping.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    sequence: &'static str,
    issues: Option<&'a mut Vec<SeqIssue>>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        bytes: &'a [u8],
        sequence: &'static str,
        issues: Option<&'a mut Vec<SeqIssue>>,
    ) -> Self {
        Reader {
            bytes,
            at: 0,
            sequence,
            issues,
        }
    }

    /// Bytes consumed so far.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    fn short(&self, need_bytes: usize) -> SeqError {
        SeqError::Short {
            sequence: self.sequence,
            need_bytes,
            len_bytes: self.bytes.len(),
        }
    }

    /// Fails unless the whole sequence (`len_bytes` from its start) is
    /// there, so that a short input is reported with its full length.
    pub(crate) fn expect_len(&self, len_bytes: usize) -> Result<(), SeqError> {
        if self.bytes.len() < len_bytes {
            return Err(self.short(len_bytes));
        }
        Ok(())
    }

    /// Reads one record.
    pub(crate) fn item<T: Format>(
        &mut self,
        member: &'static str,
        index: Option<usize>,
    ) -> Result<T, SeqError> {
        let (at, end) = (self.at, self.at.saturating_add(T::SIZE_BYTES));
        let short = self.short(end);
        let Some(bytes) = self.bytes.get(at..end) else {
            return Err(short);
        };
        let value = match self.issues.as_deref_mut() {
            Some(issues) => {
                let unpacked = T::unpack_from(bytes).map_err(|_| short)?;
                issues.extend(unpacked.issues.into_iter().map(|issue| SeqIssue {
                    offset_bytes: at,
                    member,
                    index,
                    issue,
                }));
                unpacked.value
            }
            None => T::decode_from(bytes).map_err(|_| short)?,
        };
        self.at = end;
        Ok(value)
    }

    /// Reads `count` records. Allocates only after checking that the input
    /// holds them all.
    pub(crate) fn items<T: Format>(
        &mut self,
        member: &'static str,
        count: usize,
    ) -> Result<Vec<T>, SeqError> {
        let end = self.at.saturating_add(count.saturating_mul(T::SIZE_BYTES));
        if self.bytes.len() < end {
            return Err(self.short(end));
        }
        let mut items = Vec::with_capacity(count);
        for index in 0..count {
            items.push(self.item(member, Some(index))?);
        }
        Ok(items)
    }

    /// Skips zero padding up to a multiple of `align_bytes` from the start,
    /// reporting any non-zero padding word.
    pub(crate) fn padding(&mut self, align_bytes: usize) -> Result<(), SeqError> {
        let end = aligned_len(self.at, align_bytes);
        let Some(pad) = self.bytes.get(self.at..end) else {
            return Err(self.short(end));
        };
        if let Some(issues) = self.issues.as_deref_mut() {
            for (word, chunk) in pad.chunks(4).enumerate() {
                let mut value = [0u8; 4];
                value[..chunk.len()].copy_from_slice(chunk);
                let value = u32::from_le_bytes(value);
                if value != 0 {
                    issues.push(SeqIssue {
                        offset_bytes: self.at,
                        member: "padding",
                        index: None,
                        issue: UnpackIssue::UnknownBits {
                            word,
                            value,
                            mask: value,
                        },
                    });
                }
            }
        }
        self.at = end;
        Ok(())
    }
}

/// Decodes a header from the first bytes of a list item.
pub(crate) fn peek_header<T: Format>(first: &[u8], list: &'static str) -> Result<T, SeqError> {
    T::decode_from(first).map_err(|_| SeqError::Short {
        sequence: list,
        need_bytes: T::SIZE_BYTES,
        len_bytes: first.len(),
    })
}

/// `len` rounded up to a multiple of `align_bytes` (a power of two),
/// saturating instead of overflowing.
pub(crate) fn aligned_len(len: usize, align_bytes: usize) -> usize {
    len.checked_next_multiple_of(align_bytes)
        .unwrap_or(usize::MAX)
}

/// Bytes of `count` records of `size_bytes`, saturating.
pub(crate) fn array_len(count: usize, size_bytes: usize) -> usize {
    count.saturating_mul(size_bytes)
}

/// A header count as a `usize` (saturating on 32-bit hosts).
pub(crate) fn count_of<C>(count: C) -> usize
where
    usize: TryFrom<C>,
{
    usize::try_from(count).unwrap_or(usize::MAX)
}

/// Records the length of an array counted by `count_field`; fails if an
/// earlier array with the same count had another length.
pub(crate) fn note_count(
    sequence: &'static str,
    count_field: &'static str,
    member: &'static str,
    seen: &mut Option<usize>,
    len_items: usize,
) -> Result<(), SeqError> {
    match *seen {
        Some(expected_items) if expected_items != len_items => Err(SeqError::CountMismatch {
            sequence,
            count_field,
            member,
            len_items,
            expected_items,
        }),
        _ => {
            *seen = Some(len_items);
            Ok(())
        }
    }
}

/// Checks that a conditional member is `Some` exactly when its condition
/// holds.
pub(crate) fn check_when(
    sequence: &'static str,
    member: &'static str,
    condition: Condition,
    active: bool,
    present: bool,
) -> Result<(), SeqError> {
    match (active, present) {
        (true, false) => Err(SeqError::Missing {
            sequence,
            member,
            condition,
        }),
        (false, true) => Err(SeqError::Inactive {
            sequence,
            member,
            condition,
        }),
        _ => Ok(()),
    }
}

/// Appends one record; returns its size.
pub(crate) fn build_item<T: Format>(out: &mut Vec<u8>, value: &T) -> Result<usize, SeqError> {
    let start = out.len();
    out.resize(start + T::SIZE_BYTES, 0);
    if let Err(e) = value.pack_into(&mut out[start..]) {
        out.truncate(start);
        return Err(e.into());
    }
    Ok(T::SIZE_BYTES)
}

/// Appends zeros until the sequence started at `start` is a multiple of
/// `align_bytes` long.
pub(crate) fn pad_out(out: &mut Vec<u8>, start: usize, align_bytes: usize) {
    let len = out.len() - start;
    out.resize(start + aligned_len(len, align_bytes), 0);
}

/// Appends the slot of one record to a layout.
pub(crate) fn push_slot(
    slots: &mut Vec<Slot>,
    at: &mut usize,
    member: &'static str,
    index: Option<usize>,
    format: &'static FormatInfo,
) {
    slots.push(Slot {
        offset_bytes: *at,
        size_bytes: format.size_bytes,
        member,
        index,
        format: Some(format),
    });
    *at = at.saturating_add(format.size_bytes);
}

/// Appends a padding slot (if any padding is needed) to a layout.
pub(crate) fn push_padding(slots: &mut Vec<Slot>, at: &mut usize, align_bytes: usize) {
    let end = aligned_len(*at, align_bytes);
    if end > *at {
        slots.push(Slot {
            offset_bytes: *at,
            size_bytes: end - *at,
            member: "padding",
            index: None,
            format: None,
        });
        *at = end;
    }
}

/// Prints one record of a sequence, indented under the sequence's name.
pub(crate) fn write_item<T: Format>(
    f: &mut fmt::Formatter<'_>,
    member: &str,
    index: Option<usize>,
    value: &T,
) -> fmt::Result {
    match index {
        Some(i) => writeln!(f, "  {member}[{i}]: {}", T::INFO.name)?,
        None => writeln!(f, "  {member}: {}", T::INFO.name)?,
    }
    value.write_fields(f, 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_saturate_instead_of_overflowing() {
        assert_eq!(aligned_len(12, 8), 16);
        assert_eq!(aligned_len(16, 8), 16);
        assert_eq!(aligned_len(usize::MAX - 2, 8), usize::MAX);
        assert_eq!(array_len(usize::MAX / 2, 24), usize::MAX);
        assert_eq!(count_of(7u32), 7);
    }

    #[test]
    fn counts_must_agree() {
        let mut seen = None;
        assert_eq!(note_count("S", "n", "a", &mut seen, 2), Ok(()));
        assert_eq!(note_count("S", "n", "b", &mut seen, 2), Ok(()));
        assert_eq!(
            note_count("S", "n", "c", &mut seen, 3),
            Err(SeqError::CountMismatch {
                sequence: "S",
                count_field: "n",
                member: "c",
                len_items: 3,
                expected_items: 2
            })
        );
    }

    #[test]
    fn padding_slots_only_when_needed() {
        let mut slots = Vec::new();
        let mut at = 8;
        push_padding(&mut slots, &mut at, 8);
        assert!(slots.is_empty());
        at = 12;
        push_padding(&mut slots, &mut at, 8);
        assert_eq!(slots.len(), 1);
        assert_eq!((slots[0].offset_bytes, slots[0].end_bytes()), (12, 16));
        assert_eq!(at, 16);
    }
}
