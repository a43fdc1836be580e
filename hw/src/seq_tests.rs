//! Tests of the generated sequences and lists.
//!
//! Round trips are checked from random values (build, then walk); the
//! layouts are checked against byte arrays written out by hand from the
//! hardware documentation, not from the generator; and walking random
//! bytes must never panic.

use proptest::prelude::*;

use crate::formats::*;
use crate::seq::{List, Selector, SeqError, Sequence, SequenceBody, Slot, Walked};
use crate::spec::{decode, read_stored, write_stored, Format, PackError, UnpackIssue};

// ---- Random values.

/// Deterministic random bytes (xorshift64*), for record values.
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Self {
        Gen(seed | 1)
    }

    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
    }

    /// Any value of a format: the decoding of random bytes, which always
    /// packs (the formats' own round-trip tests show that).
    fn format<T: Format>(&mut self) -> T {
        let bytes: Vec<u8> = (0..T::SIZE_BYTES).map(|_| self.byte()).collect();
        T::unpack_from(&bytes).unwrap().value
    }

    fn formats<T: Format>(&mut self, n: usize) -> Vec<T> {
        (0..n).map(|_| self.format()).collect()
    }
}

fn bit(mask: u32, i: u32) -> bool {
    mask >> i & 1 != 0
}

fn ppp_records(mask: u32, viewports: usize, g: &mut Gen) -> PppRecords {
    PppRecords {
        fragment_control: bit(mask, 0).then(|| g.format()),
        fragment_control_2: bit(mask, 1).then(|| g.format()),
        fragment_front_face: bit(mask, 2).then(|| g.format()),
        fragment_front_face_2: bit(mask, 3).then(|| g.format()),
        fragment_front_stencil: bit(mask, 4).then(|| g.format()),
        fragment_back_face: bit(mask, 5).then(|| g.format()),
        fragment_back_face_2: bit(mask, 6).then(|| g.format()),
        fragment_back_stencil: bit(mask, 7).then(|| g.format()),
        depth_bias_scissor: bit(mask, 8).then(|| g.format()),
        region_clip: bit(mask, 9).then(|| g.formats(viewports)),
        viewport: bit(mask, 10).then(|| PppRecordsViewport {
            control: g.format(),
            viewports: g.formats(viewports),
        }),
        w_clamp: bit(mask, 11).then(|| g.format()),
        output_select: bit(mask, 12).then(|| g.format()),
        varying_counts_32: bit(mask, 13).then(|| g.format()),
        varying_counts_16: bit(mask, 14).then(|| g.format()),
        cull: bit(mask, 15).then(|| g.format()),
        cull_2: bit(mask, 16).then(|| g.format()),
        fragment_shader: bit(mask, 17).then(|| PppRecordsFragmentShader {
            word0: g.format(),
            word1: g.format(),
            word2: g.format(),
            word3: g.format(),
        }),
        occlusion_query: bit(mask, 18).then(|| g.format()),
        occlusion_query_2: bit(mask, 19).then(|| g.format()),
        output_unknown: bit(mask, 20).then(|| g.format()),
        output_size: bit(mask, 21).then(|| g.format()),
        varying_word_2: bit(mask, 22).then(|| g.format()),
    }
}

fn vdm_state_words(mask: u32, g: &mut Gen) -> VdmStateWords {
    VdmStateWords {
        restart_index: bit(mask, 0).then(|| g.format()),
        vertex_shader_word_0: bit(mask, 1).then(|| g.format()),
        vertex_shader_word_1: bit(mask, 2).then(|| g.format()),
        vertex_outputs: bit(mask, 3).then(|| g.format()),
        tessellation: bit(mask, 4).then(|| g.format()),
        vertex_unknown: bit(mask, 5).then(|| g.format()),
        tessellation_scale: bit(mask, 6).then(|| g.format()),
    }
}

fn index_list_block(mask: u32, g: &mut Gen) -> IndexListBlock {
    IndexListBlock {
        header: g.format(),
        buffer_lo: bit(mask, 0).then(|| g.format()),
        count: bit(mask, 1).then(|| g.format()),
        instances: bit(mask, 2).then(|| g.format()),
        start: bit(mask, 3).then(|| g.format()),
        unk_1: bit(mask, 4).then(|| g.format()),
        indirect: bit(mask, 5).then(|| g.format()),
        unk_2: bit(mask, 6).then(|| g.format()),
        buffer_size: bit(mask, 7).then(|| g.format()),
    }
}

/// A launch whose optional members match its (known) mode.
fn cdm_launch(mode: CdmMode, g: &mut Gen) -> CdmLaunch {
    CdmLaunch {
        header: CdmLaunchWord0 { mode, ..g.format() },
        word1: g.format(),
        global: (mode == CdmMode::Direct).then(|| g.format()),
        indirect: (mode != CdmMode::Direct).then(|| g.format()),
        local: (mode != CdmMode::IndirectLocal).then(|| g.format()),
    }
}

fn vdm_block(kind: usize, mask: u32, g: &mut Gen) -> VdmBlock {
    match kind % 6 {
        0 => VdmBlock::PppStateUpdate(g.format()),
        1 => VdmBlock::Barrier(g.format()),
        2 => VdmBlock::VdmStateUpdate(vdm_state_words(mask, g)),
        3 => VdmBlock::IndexList(index_list_block(mask, g)),
        4 => VdmBlock::StreamLink(g.format()),
        _ => VdmBlock::StreamTerminate(g.format()),
    }
}

fn cdm_block(kind: usize, g: &mut Gen) -> CdmBlock {
    match kind % 4 {
        0 => {
            let mode = CdmMode::KNOWN[kind / 4 % CdmMode::KNOWN.len()];
            CdmBlock::Launch(cdm_launch(mode, g))
        }
        1 => CdmBlock::StreamLink(g.format()),
        2 => CdmBlock::StreamTerminate(g.format()),
        _ => CdmBlock::Barrier(g.format()),
    }
}

fn usc_word(kind: usize, g: &mut Gen) -> UscWord {
    match kind % 10 {
        0 => UscWord::Uniform(g.format()),
        1 => UscWord::UniformHigh(g.format()),
        2 => UscWord::Texture(g.format()),
        3 => UscWord::Sampler(g.format()),
        4 => UscWord::Shared(g.format()),
        5 => UscWord::Shader(g.format()),
        6 => UscWord::Registers(g.format()),
        7 => UscWord::FragmentProperties(g.format()),
        8 => UscWord::NoPreshader(g.format()),
        _ => UscWord::Preshader(g.format()),
    }
}

// ---- Round trips.

/// Values compared through `Debug`: viewports and w clamps hold random
/// floats, and a NaN is not `==` itself.
fn same<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// The end of the last slot of a layout.
fn layout_end(slots: &[Slot]) -> usize {
    slots.last().map_or(0, Slot::end_bytes)
}

/// build -> walk gives back `expected` (the value with its header as build
/// derives it); the consumed length, `len_bytes` and the layout agree;
/// `decode` gives what `walk` gives; rebuilding gives the same bytes.
fn sequence_round_trip<S: Sequence>(value: &S, expected: &S) -> Result<(), TestCaseError> {
    let name = S::INFO.name;
    let mut bytes = vec![0xa5; 3]; // build appends
    let len = value
        .build(&mut bytes)
        .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    let bytes = &bytes[3..];
    prop_assert_eq!(len, bytes.len());
    let header = value.encoded_header().unwrap();
    prop_assert_eq!(S::len_bytes(&header).unwrap(), len, "{}: len_bytes", name);
    let layout = S::layout(&header).unwrap();
    prop_assert_eq!(layout_end(&layout), len, "{}: layout end", name);
    for pair in layout.windows(2) {
        prop_assert_eq!(pair[0].end_bytes(), pair[1].offset_bytes, "{}: gap", name);
    }

    // Trailing bytes belong to the next item, not to this one.
    let mut input = bytes.to_vec();
    input.extend_from_slice(&[0xff; 8]);
    let walked = S::walk(&input).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(walked.len_bytes, len, "{}: consumed", name);
    prop_assert!(walked.is_clean(), "{}: {:?}", name, walked.issues);
    prop_assert!(
        same(&walked.value, expected),
        "{}: walked {:?}\nexpected {:?}",
        name,
        walked.value,
        expected
    );
    let decoded = S::decode(&input).unwrap();
    prop_assert_eq!(decoded.len_bytes, len);
    prop_assert!(decoded.issues.is_empty());
    prop_assert!(
        same(&decoded.value, &walked.value),
        "{}: decode != walk",
        name
    );

    let mut again = Vec::new();
    walked.value.build(&mut again).unwrap();
    prop_assert_eq!(&again[..], bytes, "{}: rebuilt bytes differ", name);
    Ok(())
}

fn list_round_trip<L: List>(value: &L) -> Result<(), TestCaseError>
where
    L::Tag: PartialEq + std::fmt::Debug,
{
    let name = L::INFO.name;
    let mut bytes = Vec::new();
    let len = value
        .build(&mut bytes)
        .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(len, bytes.len());
    prop_assert!(len >= L::PEEK_BYTES);
    let first = &bytes[..L::PEEK_BYTES];
    prop_assert_eq!(L::len_bytes(first).unwrap(), len, "{}: len_bytes", name);
    prop_assert_eq!(L::peek_tag(first).unwrap(), value.tag());
    prop_assert_eq!(layout_end(&L::layout(first).unwrap()), len);
    bytes.extend_from_slice(&[0x5a; 8]);
    let walked = L::walk(&bytes).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(walked.len_bytes, len);
    prop_assert!(walked.is_clean(), "{}: {:?}", name, walked.issues);
    prop_assert!(
        same(&walked.value, value),
        "{}: {:?} != {:?}",
        name,
        walked.value,
        value
    );
    prop_assert_eq!(walked.value.is_end(), value.is_end());
    let decoded = L::decode(&bytes).unwrap();
    prop_assert!(same(&decoded.value, value));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ppp_records_round_trip(mask in any::<u32>(), viewports in 1usize..=16, seed in any::<u64>()) {
        let value = ppp_records(mask, viewports, &mut Gen::new(seed));
        sequence_round_trip(&value, &value)?;
    }

    #[test]
    fn vdm_state_words_round_trip(mask in any::<u32>(), seed in any::<u64>()) {
        let value = vdm_state_words(mask, &mut Gen::new(seed));
        sequence_round_trip(&value, &value)?;
    }

    #[test]
    fn index_list_block_round_trip(mask in any::<u32>(), seed in any::<u64>()) {
        let value = index_list_block(mask, &mut Gen::new(seed));
        // The random header's present bits are whatever they were; walk
        // returns the ones build derived.
        let expected = IndexListBlock { header: value.encoded_header().unwrap(), ..value.clone() };
        sequence_round_trip(&value, &expected)?;
    }

    #[test]
    fn cdm_launch_round_trip(mode in 0usize..3, seed in any::<u64>()) {
        let value = cdm_launch(CdmMode::KNOWN[mode], &mut Gen::new(seed));
        sequence_round_trip(&value, &value)?;
    }

    /// Random option-ness: build succeeds exactly when the members match
    /// the mode, and names the first member that does not.
    #[test]
    fn cdm_launch_members_must_match_the_mode(mode in 0usize..3, mask in 0u32..8, seed in any::<u64>()) {
        let g = &mut Gen::new(seed);
        let mode = CdmMode::KNOWN[mode];
        let value = CdmLaunch {
            header: CdmLaunchWord0 { mode, ..CdmLaunchWord0::default() },
            word1: g.format(),
            global: bit(mask, 0).then(|| g.format()),
            indirect: bit(mask, 1).then(|| g.format()),
            local: bit(mask, 2).then(|| g.format()),
        };
        let wants = [mode == CdmMode::Direct, mode != CdmMode::Direct, mode != CdmMode::IndirectLocal];
        let has = [value.global.is_some(), value.indirect.is_some(), value.local.is_some()];
        let mut out = vec![1, 2, 3];
        match wants.iter().zip(has).position(|(w, h)| *w != h) {
            None => sequence_round_trip(&value, &value)?,
            Some(i) => {
                let member = ["global", "indirect", "local"][i];
                let err = value.build(&mut out).unwrap_err();
                let named = match err {
                    SeqError::Missing { member: m, .. } => wants[i] && m == member,
                    SeqError::Inactive { member: m, .. } => !wants[i] && m == member,
                    _ => false,
                };
                prop_assert!(named, "{:?} for {:?}", err, value);
                prop_assert_eq!(out, vec![1, 2, 3], "build left bytes behind");
            }
        }
    }

    #[test]
    fn vdm_blocks_round_trip(kind in 0usize..6, mask in any::<u32>(), seed in any::<u64>()) {
        let block = vdm_block(kind, mask, &mut Gen::new(seed));
        // The index list's header comes back with derived present bits.
        let block = match block {
            VdmBlock::IndexList(draw) => VdmBlock::IndexList(IndexListBlock {
                header: draw.encoded_header().unwrap(),
                ..draw
            }),
            other => other,
        };
        list_round_trip(&block)?;
    }

    #[test]
    fn cdm_blocks_round_trip(kind in 0usize..12, seed in any::<u64>()) {
        list_round_trip(&cdm_block(kind, &mut Gen::new(seed)))?;
    }

    #[test]
    fn usc_words_round_trip(kind in 0usize..10, seed in any::<u64>()) {
        list_round_trip(&usc_word(kind, &mut Gen::new(seed)))?;
    }
}

// ---- Never panic on any input.

/// Walks `bytes` as `S`; whatever happens, nothing panics, `decode` agrees
/// with `walk`, and a successful walk agrees with `len_bytes` and `layout`.
fn fuzz_sequence<S: Sequence>(bytes: &[u8]) -> Result<(), TestCaseError> {
    let walked = S::walk(bytes);
    let decoded = S::decode(bytes);
    match (&walked, &decoded) {
        (Ok(w), Ok(d)) => {
            prop_assert_eq!(w.len_bytes, d.len_bytes);
            prop_assert!(same(&w.value, &d.value));
            prop_assert!(w.len_bytes <= bytes.len());
            let header = S::Header::unpack_from(bytes).unwrap().value;
            prop_assert_eq!(S::len_bytes(&header), Ok(w.len_bytes));
            prop_assert_eq!(layout_end(&S::layout(&header).unwrap()), w.len_bytes);
            for issue in &w.issues {
                prop_assert!(issue.offset_bytes < w.len_bytes);
            }
        }
        (Err(a), Err(b)) => prop_assert_eq!(a, b),
        _ => prop_assert!(false, "walk {:?} but decode {:?}", walked, decoded),
    }
    Ok(())
}

fn fuzz_list<L: List>(bytes: &[u8]) -> Result<(), TestCaseError> {
    let walked: Result<Walked<L>, SeqError> = L::walk(bytes);
    let decoded = L::decode(bytes);
    let len = L::len_bytes(bytes);
    let layout = L::layout(bytes);
    match (&walked, &decoded) {
        (Ok(w), Ok(d)) => {
            prop_assert_eq!(w.len_bytes, d.len_bytes);
            prop_assert!(same(&w.value, &d.value));
            prop_assert!(w.len_bytes <= bytes.len());
            prop_assert_eq!(len, Ok(w.len_bytes));
            prop_assert_eq!(layout_end(&layout.unwrap()), w.len_bytes);
        }
        (Err(a), Err(b)) => {
            prop_assert_eq!(a, b);
            // Too short to walk, or the same error as sizing the item.
            if !matches!(a, SeqError::Short { .. }) {
                prop_assert_eq!(len, Err(a.clone()));
            }
        }
        _ => prop_assert!(false, "walk {:?} but decode {:?}", walked, decoded),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn walking_random_bytes_never_panics(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..320),
        known_tag in any::<bool>(),
        pick in any::<usize>(),
        sparse in any::<bool>(),
    ) {
        // Mostly-zero inputs reach the deeper records more often.
        if sparse {
            for b in bytes.iter_mut().skip(4) {
                *b &= 0x01;
            }
        }
        macro_rules! seq {
            ($t:ident) => {
                fuzz_sequence::<$t>(&bytes)?;
            };
        }
        crate::formats::for_each_sequence!(seq);
        macro_rules! list {
            ($t:ident) => {
                fuzz_list::<$t>(&bytes)?;
            };
        }
        crate::formats::for_each_list!(list);
        // Again with a tag the lists know, to get past the dispatch.
        if known_tag && bytes.len() >= 4 {
            let usc = UscControl::KNOWN[pick % UscControl::KNOWN.len()].to_raw();
            bytes[0] = u8::try_from(usc).unwrap();
            fuzz_list::<UscWord>(&bytes)?;
            let vdm = VdmBlockType::KNOWN[pick % VdmBlockType::KNOWN.len()].to_raw();
            bytes[3] = bytes[3] & 0x1f | u8::try_from(vdm << 5).unwrap();
            fuzz_list::<VdmBlock>(&bytes)?;
            let cdm = CdmBlockType::KNOWN[pick % CdmBlockType::KNOWN.len()].to_raw();
            bytes[3] = bytes[3] & 0x1f | u8::try_from(cdm << 5).unwrap();
            fuzz_list::<CdmBlock>(&bytes)?;
        }
    }
}

// ---- Present bits.

/// Each present bit alone brings exactly its entry's records, in order
/// and at the offsets after the header; padding comes on top.
#[test]
fn each_present_bit_adds_exactly_its_records() {
    fn check<S: Sequence>() {
        let SequenceBody::Records(info) = S::INFO.body else {
            panic!("{} is not a sequence", S::INFO.name)
        };
        let name = S::INFO.name;
        let default_bytes = S::Header::default().pack_to_vec().unwrap();
        let header_bytes = info.header.size_bytes;
        let aligned = |len: usize, bit: &str| match info.align {
            Some(a) if a.unless != Some(bit) => len.next_multiple_of(a.bytes),
            _ => len,
        };
        let empty = S::Header::unpack_from(&default_bytes).unwrap().value;
        if info.entries.iter().all(|e| e.selector != Selector::Always) {
            assert_eq!(
                S::len_bytes(&empty),
                Ok(aligned(header_bytes, "")),
                "{name}: no bits"
            );
        }
        for entry in info.entries {
            let Selector::Present(bit) = entry.selector else {
                continue;
            };
            let field = info.header.fields.iter().find(|f| f.name == bit).unwrap();
            let mut bytes = default_bytes.clone();
            write_stored(&mut bytes, field, 1);
            let header = S::Header::unpack_from(&bytes).unwrap().value;
            let mut expected = Vec::new();
            let mut at = header_bytes;
            for item in entry.items {
                let count = item.count.map_or(1, |c| {
                    let f = info.header.fields.iter().find(|f| f.name == c).unwrap();
                    usize::try_from(decode(f, read_stored(&bytes, f))).unwrap()
                });
                for _ in 0..count {
                    expected.push((at, item.format.name));
                    at += item.format.size_bytes;
                }
            }
            let len = S::len_bytes(&header).unwrap();
            assert_eq!(len, aligned(at, bit), "{name}.{bit}");
            let layout = S::layout(&header).unwrap();
            let records: Vec<(usize, &str)> = layout
                .iter()
                .skip(1)
                .filter_map(|s| s.format.map(|f| (s.offset_bytes, f.name)))
                .collect();
            assert_eq!(records, expected, "{name}.{bit}");
            assert_eq!(layout_end(&layout), len, "{name}.{bit}");
        }
    }
    macro_rules! each {
        ($t:ident) => {
            check::<$t>();
        };
    }
    crate::formats::for_each_sequence!(each);
}

// ---- Known encodings, written out by hand.

fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn built<S: Sequence>(value: &S) -> Vec<u8> {
    let mut out = Vec::new();
    let len = value.build(&mut out).unwrap();
    assert_eq!(len, out.len());
    out
}

#[test]
fn index_list_buffer_size_comes_last() {
    let draw = IndexListBlock {
        header: IndexList {
            index_buffer_hi: 0x12,
            primitive: Primitive::Triangles,
            index_size: IndexSize::U32,
            ..IndexList::default()
        },
        buffer_lo: Some(IndexListBufferLo {
            buffer_lo: 0x3456_7800,
        }),
        count: Some(IndexListCount { count: 36 }),
        instances: Some(IndexListInstances { count: 2 }),
        start: Some(IndexListStart { start: 5 }),
        buffer_size: Some(IndexListBufferSize { size_bytes: 144 }),
        ..IndexListBlock::default()
    };
    // Present bits 20 (size), 21 (buffer), 22 (count), 23 (instances),
    // 24 (start); block type 3 in bits 29..31.
    let header = 0x12 | 6 << 8 | 2 << 17 | 0b1_1111 << 20 | 3 << 29;
    let expected = words(&[header, 0x3456_7800, 36, 2, 5, 144 >> 2]);
    assert_eq!(built(&draw), expected);
    let walked = IndexListBlock::walk(&expected).unwrap();
    // walk returns the header as read, present bits included.
    let header = draw.encoded_header().unwrap();
    assert!(header.index_buffer_size_present && !header.unk_2_present);
    assert_eq!(
        walked.value,
        IndexListBlock {
            header,
            ..draw.clone()
        }
    );
    assert_eq!(walked.len_bytes, 24);
    let last = *IndexListBlock::layout(&walked.value.header)
        .unwrap()
        .last()
        .unwrap();
    assert_eq!((last.offset_bytes, last.member), (20, "buffer_size"));

    // The header the caller wrote is overwritten where build derives it.
    let stale = IndexListBlock {
        header: IndexList {
            unk_2_present: true,
            index_count_present: false,
            ..draw.header
        },
        ..draw
    };
    assert_eq!(built(&stale), expected);

    // A non-indexed draw, as the umd writes it: count, instances, start.
    let plain = IndexListBlock {
        header: IndexList {
            primitive: Primitive::TriangleStrip,
            ..IndexList::default()
        },
        count: Some(IndexListCount { count: 4 }),
        instances: Some(IndexListInstances { count: 1 }),
        start: Some(IndexListStart { start: 0 }),
        ..IndexListBlock::default()
    };
    assert_eq!(
        built(&plain),
        words(&[9 << 8 | 0b111 << 22 | 3 << 29, 4, 1, 0])
    );
}

fn f32_words(values: [f32; 6]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn ppp_region_clips_and_viewports_follow_the_viewport_count() {
    let clip = |x: u32| RegionClip {
        max_x: x + 10,
        min_x: x,
        enable: true,
        max_y: 8,
        min_y: 1,
    };
    let vp = |s: f32| Viewport {
        translate_x: s,
        scale_x: 2.0 * s,
        translate_y: 3.0 * s,
        scale_y: 4.0 * s,
        translate_z: 0.0,
        scale_z: 1.0,
    };
    let records = PppRecords {
        region_clip: Some(vec![clip(0), clip(4)]),
        viewport: Some(PppRecordsViewport {
            control: ViewportControl::default(),
            viewports: vec![vp(1.0), vp(5.0)],
        }),
        cull: Some(Cull {
            cull_back: true,
            ..Cull::default()
        }),
        ..PppRecords::default()
    };
    // Header: region_clip (bit 10), viewport (11), viewport_count 2 stored
    // minus one in 12..15, cull (21).
    let mut expected = vec![1 << 10 | 1 << 11 | 1 << 12 | 1 << 21];
    // Region clips: max_x - 1 | min_x << 16 | enable << 31, then the same for y.
    expected.extend([9 | 1 << 31, 7 | 1 << 16]);
    expected.extend([13 | 4 << 16 | 1 << 31, 7 | 1 << 16]);
    // The viewport control word comes after the region clips.
    expected.push(0);
    expected.extend(f32_words([1.0, 2.0, 3.0, 4.0, 0.0, 1.0]));
    expected.extend(f32_words([5.0, 10.0, 15.0, 20.0, 0.0, 1.0]));
    // Cull: cull_back (bit 1), provoking vertex 0 stored as 1 in bits 7..8.
    expected.push(1 << 1 | 1 << 7);
    let expected = words(&expected);
    assert_eq!(expected.len(), 4 + 2 * 8 + 4 + 2 * 24 + 4);
    assert_eq!(built(&records), expected);
    assert_eq!(PppRecords::walk(&expected).unwrap().value, records);

    let layout = PppRecords::layout(&records.encoded_header().unwrap()).unwrap();
    let members: Vec<(usize, &str, Option<usize>)> = layout
        .iter()
        .map(|s| (s.offset_bytes, s.member, s.index))
        .collect();
    assert_eq!(
        members,
        [
            (0, "header", None),
            (4, "region_clip", Some(0)),
            (12, "region_clip", Some(1)),
            (20, "viewport.control", None),
            (24, "viewport.viewports", Some(0)),
            (48, "viewport.viewports", Some(1)),
            (72, "cull", None),
        ]
    );
}

#[test]
fn ppp_counts_must_agree_and_fit() {
    let two = PppRecords {
        region_clip: Some(vec![RegionClip::default(); 2]),
        viewport: Some(PppRecordsViewport {
            viewports: vec![Viewport::default(); 3],
            ..PppRecordsViewport::default()
        }),
        ..PppRecords::default()
    };
    let mut out = Vec::new();
    assert_eq!(
        two.build(&mut out),
        Err(SeqError::CountMismatch {
            sequence: "PppRecords",
            count_field: "viewport_count",
            member: "viewport.viewports",
            len_items: 3,
            expected_items: 2,
        })
    );
    assert!(out.is_empty());
    // Zero viewports cannot be encoded (stored minus one).
    let none = PppRecords {
        region_clip: Some(Vec::new()),
        ..PppRecords::default()
    };
    assert!(matches!(
        none.build(&mut out),
        Err(SeqError::Pack(PackError::OutOfRange {
            field: "viewport_count",
            ..
        }))
    ));
    let many = PppRecords {
        region_clip: Some(vec![RegionClip::default(); 17]),
        ..PppRecords::default()
    };
    assert!(matches!(
        many.build(&mut out),
        Err(SeqError::Pack(PackError::OutOfRange { max: 16, .. }))
    ));
    assert!(out.is_empty());
}

#[test]
fn cdm_launch_length_depends_on_the_mode() {
    // Word 0 with the default counts: one group each of uniforms (bits
    // 1..3), texture states (4..8) and preshader registers (12..15).
    let word0 = |mode: u32| 1 << 1 | 1 << 4 | 1 << 12 | mode << 27;
    let word1 = CdmLaunchWord1 { pipeline: 0x1_0040 };
    let global = CdmGlobalSize { x: 64, y: 2, z: 1 };
    let local = CdmLocalSize { x: 32, y: 1, z: 1 };
    let indirect = CdmIndirect {
        address: 0x12_8000_0004,
    };
    let launch = |mode| CdmLaunch {
        header: CdmLaunchWord0 {
            mode,
            ..CdmLaunchWord0::default()
        },
        word1,
        ..CdmLaunch::default()
    };

    let direct = CdmLaunch {
        global: Some(global),
        local: Some(local),
        ..launch(CdmMode::Direct)
    };
    let bytes = words(&[word0(0), 0x1_0040, 64, 2, 1, 32, 1, 1]);
    assert_eq!(bytes.len(), 32);
    assert_eq!(built(&direct), bytes);

    let indirect_global = CdmLaunch {
        indirect: Some(indirect),
        local: Some(local),
        ..launch(CdmMode::IndirectGlobal)
    };
    let bytes = words(&[word0(1), 0x1_0040, 0x12, 0x8000_0004, 32, 1, 1]);
    assert_eq!(bytes.len(), 28);
    assert_eq!(built(&indirect_global), bytes);

    let indirect_local = CdmLaunch {
        indirect: Some(indirect),
        ..launch(CdmMode::IndirectLocal)
    };
    let bytes = words(&[word0(2), 0x1_0040, 0x12, 0x8000_0004]);
    assert_eq!(bytes.len(), 16);
    assert_eq!(built(&indirect_local), bytes);
    // The CDM list sizes it from its first word alone.
    assert_eq!(CdmBlock::len_bytes(&bytes[..4]), Ok(16));
    assert_eq!(
        CdmBlock::walk(&bytes).unwrap().value,
        CdmBlock::Launch(indirect_local)
    );

    // An unknown mode has no known length.
    let unknown = words(&[word0(3)]);
    let err = SeqError::UnknownDiscriminant {
        sequence: "CdmLaunch",
        field: "mode",
        raw: 3,
    };
    assert_eq!(CdmBlock::len_bytes(&unknown), Err(err.clone()));
    assert_eq!(CdmLaunch::walk(&unknown), Err(err.clone()));
    assert_eq!(launch(CdmMode::Unknown(3)).build(&mut Vec::new()), Err(err));
}

#[test]
fn vdm_state_is_padded_to_eight_bytes_unless_tessellation_scale() {
    let block_type = 2 << 29;
    let outputs = VdmStateVertexOutputs {
        output_count_1: 5,
        output_count_2: 3,
    };
    let word1 = VdmStateVertexShaderWord1 {
        unk_0: 0,
        pipeline: 0x4_0000,
    };

    // No words: the header and a pad word.
    assert_eq!(built(&VdmStateWords::default()), words(&[block_type, 0]));
    // One word: 8 bytes already, no pad.
    let one = VdmStateWords {
        vertex_outputs: Some(outputs),
        ..VdmStateWords::default()
    };
    assert_eq!(built(&one), words(&[block_type | 1 << 3, 5 | 3 << 8]));
    // Two words (what the umd writes): 12 bytes, padded to 16.
    let two = VdmStateWords {
        vertex_shader_word_1: Some(word1),
        vertex_outputs: Some(outputs),
        ..VdmStateWords::default()
    };
    let padded = words(&[block_type | 1 << 2 | 1 << 3, 0x4_0000, 5 | 3 << 8, 0]);
    assert_eq!(built(&two), padded);
    assert_eq!(VdmBlock::len_bytes(&padded[..4]), Ok(16));
    let walked = VdmStateWords::walk(&padded).unwrap();
    assert_eq!((walked.value, walked.len_bytes), (two.clone(), 16));
    let layout = VdmStateWords::layout(&two.encoded_header().unwrap()).unwrap();
    assert_eq!(
        layout.last().map(|s| (s.offset_bytes, s.member, s.format)),
        Some((12, "padding", None))
    );
    // With a tessellation scale word there is no padding: 12 bytes.
    let scaled = VdmStateWords {
        vertex_outputs: Some(outputs),
        tessellation_scale: Some(VdmStateTessellationScale { scale: 0x3c00 }),
        ..VdmStateWords::default()
    };
    assert_eq!(
        built(&scaled),
        words(&[block_type | 1 << 3 | 1 << 7, 5 | 3 << 8, 0x3c00])
    );

    // Non-zero padding is reported, with its offset.
    let mut dirty = padded.clone();
    dirty[12] = 0x40;
    let walked = VdmStateWords::walk(&dirty).unwrap();
    assert_eq!(walked.value, two);
    assert_eq!(walked.issues.len(), 1);
    assert_eq!(
        (walked.issues[0].offset_bytes, walked.issues[0].member),
        (12, "padding")
    );
    assert!(VdmStateWords::decode(&dirty).unwrap().issues.is_empty());
}

#[test]
fn unknown_bits_are_reported_with_their_record() {
    let records = PppRecords {
        fragment_control: Some(FragmentControl::default()),
        output_unknown: Some(OutputUnknown::default()),
        ..PppRecords::default()
    };
    let mut bytes = built(&records);
    bytes[8] = 0x01; // the output-unknown word (seen zero) is not
    let walked = PppRecords::walk(&bytes).unwrap();
    assert_eq!(walked.issues.len(), 1);
    let issue = walked.issues[0];
    assert_eq!((issue.offset_bytes, issue.member), (8, "output_unknown"));
    assert_eq!(
        issue.issue,
        UnpackIssue::UnknownBits {
            word: 0,
            value: 1,
            mask: 1
        }
    );
    assert!(issue.to_string().starts_with("+0x8 output_unknown: XXX"));
}

// ---- Errors.

#[test]
fn short_input_reports_what_is_needed() {
    let draw = IndexListBlock {
        count: Some(IndexListCount { count: 3 }),
        instances: Some(IndexListInstances { count: 1 }),
        start: Some(IndexListStart { start: 0 }),
        ..IndexListBlock::default()
    };
    let bytes = built(&draw);
    assert_eq!(bytes.len(), 16);
    for len in 0..16 {
        let need_bytes = if len < 4 { 4 } else { 16 };
        let short = Err(SeqError::Short {
            sequence: "IndexListBlock",
            need_bytes,
            len_bytes: len,
        });
        assert_eq!(IndexListBlock::walk(&bytes[..len]), short);
        assert_eq!(IndexListBlock::decode(&bytes[..len]), short);
    }
    assert_eq!(
        VdmBlock::len_bytes(&bytes[..2]),
        Err(SeqError::Short {
            sequence: "VdmBlock",
            need_bytes: 4,
            len_bytes: 2
        })
    );
    assert_eq!(
        UscWord::walk(&[0x88]),
        Err(SeqError::Short {
            sequence: "UscWord",
            need_bytes: 2,
            len_bytes: 1
        })
    );
    assert_eq!(UscWord::len_bytes(&[0x88]), Ok(2));
}

#[test]
fn unknown_and_unsupported_tags_are_errors() {
    assert_eq!(
        VdmBlock::walk(&words(&[7 << 29, 0])),
        Err(SeqError::UnknownTag {
            list: "VdmBlock",
            raw: 7
        })
    );
    assert_eq!(
        VdmBlock::len_bytes(&words(&[5 << 29])),
        Err(SeqError::Unsupported {
            list: "VdmBlock",
            variant: "Tessellate"
        })
    );
    assert_eq!(
        CdmBlock::walk(&words(&[4 << 29, 0])),
        Err(SeqError::UnknownTag {
            list: "CdmBlock",
            raw: 4
        })
    );
    assert_eq!(
        UscWord::layout(&[0x00, 0, 0, 0]),
        Err(SeqError::UnknownTag {
            list: "UscWord",
            raw: 0
        })
    );
    let text = SeqError::Unsupported {
        list: "VdmBlock",
        variant: "Tessellate",
    }
    .to_string();
    assert_eq!(text, "VdmBlock: Tessellate items are not supported");
}

#[test]
fn a_stream_walks_item_by_item() {
    let mut stream = Vec::new();
    let blocks = [
        VdmBlock::VdmStateUpdate(VdmStateWords {
            vertex_outputs: Some(VdmStateVertexOutputs::default()),
            vertex_unknown: Some(VdmStateVertexUnknown::default()),
            ..VdmStateWords::default()
        }),
        VdmBlock::PppStateUpdate(PppState {
            pointer: 0x15_0000_0100,
            size_words: 7,
        }),
        VdmBlock::IndexList(IndexListBlock {
            header: IndexList {
                primitive: Primitive::Triangles,
                index_count_present: true,
                instance_count_present: true,
                ..IndexList::default()
            },
            count: Some(IndexListCount { count: 3 }),
            instances: Some(IndexListInstances { count: 1 }),
            ..IndexListBlock::default()
        }),
        VdmBlock::StreamTerminate(VdmStreamTerminate::default()),
    ];
    for b in &blocks {
        b.build(&mut stream).unwrap();
    }
    let mut at = 0;
    let mut seen = Vec::new();
    loop {
        let len = VdmBlock::len_bytes(&stream[at..at + VdmBlock::PEEK_BYTES]).unwrap();
        let walked = VdmBlock::walk(&stream[at..]).unwrap();
        assert_eq!(walked.len_bytes, len);
        assert!(walked.is_clean(), "{:?}", walked.issues);
        at += len;
        let end = walked.value.is_end();
        seen.push(walked.value);
        if end {
            break;
        }
    }
    assert_eq!(seen, blocks);
    assert_eq!(at, stream.len());
    assert_eq!(at, 16 + 8 + 12 + 8);
}

#[test]
fn display_names_members() {
    let records = PppRecords {
        region_clip: Some(vec![RegionClip::default()]),
        cull: Some(Cull::default()),
        ..PppRecords::default()
    };
    let text = records.to_string();
    assert!(text.starts_with("PppRecords\n"), "{text}");
    assert!(
        text.contains("  region_clip[0]: RegionClip\n    max_x: 1\n"),
        "{text}"
    );
    assert!(text.contains("  cull: Cull\n"), "{text}");
    let block = VdmBlock::StreamTerminate(VdmStreamTerminate::default());
    assert_eq!(block.to_string(), "VdmStreamTerminate\n");
}

#[test]
fn the_sequence_table_is_complete() {
    let names: Vec<&str> = crate::ALL_SEQUENCES.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "PppRecords",
            "VdmStateWords",
            "IndexListBlock",
            "CdmLaunch",
            "VdmBlock",
            "CdmBlock",
            "UscWord"
        ]
    );
    for s in crate::ALL_SEQUENCES {
        assert!(!s.doc.is_empty(), "{}", s.name);
    }
    assert_eq!(VdmBlock::PEEK_BYTES, 4);
    assert_eq!(CdmBlock::PEEK_BYTES, 4);
    assert_eq!(UscWord::PEEK_BYTES, 1);
}

#[test]
fn a_count_the_header_cannot_hold_is_refused_before_anything_is_sized() {
    for viewports in [0usize, 17] {
        let ppp = PppRecords {
            viewport: Some(PppRecordsViewport {
                control: ViewportControl::default(),
                viewports: vec![Viewport::default(); viewports],
            }),
            ..PppRecords::default()
        };
        let refused = |e: Result<_, SeqError>| {
            matches!(
                e,
                Err(SeqError::Pack(PackError::OutOfRange {
                    field: "viewport_count",
                    ..
                }))
            )
        };
        assert!(refused(ppp.encoded_header().map(|_| ())), "{viewports}");
        let mut out = vec![1, 2, 3];
        assert!(refused(ppp.build(&mut out).map(|_| ())), "{viewports}");
        assert_eq!(out, [1, 2, 3], "nothing written");
    }
}
