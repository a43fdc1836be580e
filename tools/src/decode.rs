//! `agx-decode`: a capture, decoded layer by layer, and linted.
//!
//! For each submission: the SUBMIT argument and syncs, then each command
//! with every field named; for render commands the four tile programs
//! (USC words, descriptors, disassembly), the ZLS control, the sampler
//! heap, and the VDM control stream followed through links (PPP state,
//! vertex and fragment programs, draws); for compute commands the CDM
//! stream. Bits no field explains are printed (`XXX`), data that does not
//! decode is hex-dumped and decoding goes on. The linter reports what
//! would break on hardware, each finding with an address and a sentence.

use std::collections::HashSet;
use std::fmt::Write as _;

use agx_capture::Submission;
use agx_hw::formats::{CdmBlock, PppHeader, PppRecords, UscWord, VdmBlock, ZlsControl};
use agx_hw::{Format, List, Slot};
use agx_uapi::asahi::{CmdCompute, CmdHeader, CmdRender, CmdType, DRM_ASAHI_BARRIER_NONE};
use zerocopy::FromBytes;

/// A finding of the linter.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lint {
    /// Short name of the rule.
    pub rule: &'static str,
    /// The GPU address it concerns (0 when it is about a field).
    pub address: u64,
    /// What is wrong, in a sentence.
    pub message: String,
}

/// Blocks a control stream may have before the decoder calls it runaway.
const MAX_BLOCKS: usize = 1 << 20;
/// Resident descriptors printed per image heap at most.
const MAX_HEAP_DESCRIPTORS: usize = 256;
use agx_umd::heap::HEAP_BASE_UNIFORM;
/// Instructions disassembled per program at most.
const MAX_INSTRUCTIONS: usize = 4096;

/// One decoded thing, for the machine-readable output: a format at an
/// address with its fields, or an instruction.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Item {
    /// The command it was found from (`None`: the submission itself).
    #[serde(skip)]
    pub command: Option<usize>,
    /// GPU address (0 for a word of the command itself).
    pub address: u64,
    /// The format's name, or `instruction`.
    pub kind: String,
    /// Field names and values, in the format's order, typed as the spec
    /// types them (an instruction has `text`; bytes no format decodes,
    /// `hex`).
    #[serde(serialize_with = "ordered_map")]
    pub fields: Vec<(String, FieldValue)>,
    /// What the decode could not explain: unknown bits, a constant that
    /// does not match.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub issues: Vec<String>,
}

/// A field's value in the machine-readable output.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum FieldValue {
    /// Numbers, addresses, masks.
    Number(u64),
    /// Single bits.
    Bool(bool),
    /// Floats and levels of detail.
    Float(f64),
    /// Enum variants (by name), instruction text, hex dumps.
    Text(String),
}

/// Serialises `(name, value)` pairs as one JSON object in their order.
fn ordered_map<S: serde::Serializer>(
    fields: &[(String, FieldValue)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(fields.iter().map(|(k, v)| (k, v)))
}

/// A decoded submission.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// Its index in the capture.
    pub index: usize,
    /// The text.
    pub text: String,
    /// The linter's findings.
    pub lints: Vec<Lint>,
    /// Everything decoded, in order.
    pub items: Vec<Item>,
}

/// What a program's USC words bind, as far as the linter cares.
#[derive(Debug, Default, Clone)]
struct ProgramInfo {
    code: Option<u64>,
    samplers_bound: bool,
    loads: bool,
    max_sampler_immediate: Option<u32>,
}

/// Decodes one submission into text, collecting lints.
pub struct Decoder<'a> {
    s: &'a Submission,
    out: String,
    depth: usize,
    /// Programs (pipeline addresses) already decoded.
    seen: HashSet<u64>,
    /// Bindless image heaps the programs load the base of, not yet
    /// printed.
    heaps: std::collections::BTreeSet<u64>,
    /// Heaps printed.
    heaps_printed: HashSet<u64>,
    /// Lints found.
    pub lints: Vec<Lint>,
    /// What was decoded, for `--json`.
    items: Vec<Item>,
    /// The command being decoded.
    command: Option<usize>,
}

/// The issues `print_by_name` printed (its `XXX:` lines).
fn printed_issues(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("XXX:"))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The fields of format `name` in `bytes` (which `print_by_name` decoded),
/// typed from the format's description: the fields that apply (constants
/// and fields whose condition does not hold are left out).
fn typed_fields(name: &str, bytes: &[u8]) -> Vec<(String, FieldValue)> {
    use agx_hw::FieldKind;
    let Some(info) = agx_hw::FormatInfo::by_name(name) else {
        return Vec::new();
    };
    let inapplicable = crate::format_cli::inapplicable_fields(info, bytes);
    info.fields
        .iter()
        .filter(|f| !matches!(f.kind, FieldKind::Const { .. }))
        .filter(|f| info.applies(f, bytes) && !inapplicable.contains(&f.name))
        .map(|f| {
            let value = f.logical(bytes);
            let typed = match f.kind {
                FieldKind::Bool => FieldValue::Bool(value != 0),
                FieldKind::Float => FieldValue::Float(f64::from(f32::from_bits(value as u32))),
                FieldKind::Lod => match agx_hw::Lod::from_raw(value as u16) {
                    Some(lod) => FieldValue::Float(f64::from(lod.to_f32())),
                    None => FieldValue::Number(value),
                },
                FieldKind::Enum(enum_name) => agx_hw::EnumInfo::by_name(enum_name)
                    .and_then(|e| e.variant_of(value))
                    .map_or(FieldValue::Number(value), |v| {
                        FieldValue::Text(v.to_owned())
                    }),
                _ => FieldValue::Number(value),
            };
            (f.name.to_owned(), typed)
        })
        .collect()
}

fn hexdump(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|c| {
            c.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl<'a> Decoder<'a> {
    /// A decoder of `s`.
    pub fn new(s: &'a Submission) -> Decoder<'a> {
        Decoder {
            s,
            out: String::new(),
            depth: 0,
            seen: HashSet::new(),
            heaps: std::collections::BTreeSet::new(),
            heaps_printed: HashSet::new(),
            lints: Vec::new(),
            items: Vec::new(),
            command: None,
        }
    }

    fn line(&mut self, text: &str) {
        for l in text.lines() {
            let _ = writeln!(self.out, "{:width$}{l}", "", width = 2 * self.depth);
        }
    }

    fn lint(&mut self, rule: &'static str, address: u64, message: String) {
        self.line(&format!("LINT {rule} at {address:#x}: {message}"));
        self.lints.push(Lint {
            rule,
            address,
            message,
        });
    }

    fn read(&self, va: u64, len: usize) -> Option<&'a [u8]> {
        self.s.read(va, len)
    }

    /// Prints format `name` decoded from the bytes at `va`; `None` if
    /// unmapped.
    fn format_at(&mut self, name: &str, va: u64, len: usize) -> Option<&'a [u8]> {
        match self.read(va, len) {
            Some(bytes) => {
                let (fields, issues) = match crate::format_cli::print_applicable(name, bytes) {
                    Some(Ok(text)) => {
                        self.line(&format!("{va:#x}: {}", text.trim_end()));
                        (typed_fields(name, bytes), printed_issues(&text))
                    }
                    _ => {
                        self.line(&format!("{va:#x}: {name}?\n{}", hexdump(bytes)));
                        let hex = hexdump(bytes).replace('\n', " ");
                        (
                            vec![("hex".to_owned(), FieldValue::Text(hex))],
                            vec![format!("not a {name}")],
                        )
                    }
                };
                self.items.push(Item {
                    command: self.command,
                    address: va,
                    kind: name.to_owned(),
                    fields,
                    issues,
                });
                Some(bytes)
            }
            None => {
                self.lint(
                    "unmapped",
                    va,
                    format!("{name} at {va:#x} is not in mapped memory"),
                );
                None
            }
        }
    }

    /// Decodes the whole submission.
    pub fn decode(mut self, index: usize) -> Decoded {
        let s = self.s;
        self.line(&format!(
            "submission {index}: queue {} (VM {}), usc_exec_base {:#x}, {} waits, {} signals, {} bytes of commands, {} mapped ranges",
            s.queue_id,
            s.vm_id,
            s.usc_exec_base,
            s.submit.in_sync_count,
            s.submit.out_sync_count,
            s.cmdbuf.len(),
            s.memory.len()
        ));
        self.depth += 1;
        for (i, sync) in s.syncs.iter().enumerate() {
            let role = if i < s.submit.in_sync_count as usize {
                "wait"
            } else {
                "signal"
            };
            self.line(&format!(
                "sync {i} ({role}): type {} handle {} point {}",
                sync.sync_type, sync.handle, sync.timeline_value
            ));
        }
        let mut at = 0usize;
        let (mut renders, mut computes) = (0u32, 0u32);
        let mut command = 0;
        while at + size_of::<CmdHeader>() <= s.cmdbuf.len() {
            let Ok(header) = CmdHeader::read_from_bytes(&s.cmdbuf[at..at + 8]) else {
                break;
            };
            let payload_at = at + 8;
            let end = (payload_at + usize::from(header.size)).min(s.cmdbuf.len());
            let payload = &s.cmdbuf[payload_at..end];
            self.command = Some(command);
            self.line(&format!(
                "command {command} ({}): vdm_barrier {}, cdm_barrier {}",
                match header.cmd_type {
                    t if t == CmdType::Render as u16 => "render",
                    t if t == CmdType::Compute as u16 => "compute",
                    _ => "other",
                },
                header.vdm_barrier,
                header.cdm_barrier
            ));
            self.depth += 1;
            for (name, barrier, earlier) in [
                ("vdm_barrier", header.vdm_barrier, renders),
                ("cdm_barrier", header.cdm_barrier, computes),
            ] {
                if barrier != DRM_ASAHI_BARRIER_NONE && u32::from(barrier) > earlier {
                    self.lint(
                        "barrier",
                        0,
                        format!(
                            "command {command}'s {name} {barrier} names a command this submission does not have before it ({earlier})"
                        ),
                    );
                }
            }
            if header.cmd_type == CmdType::Render as u16 {
                let mut bytes = [0u8; size_of::<CmdRender>()];
                let n = payload.len().min(bytes.len());
                bytes[..n].copy_from_slice(&payload[..n]);
                if let Ok(render) = CmdRender::read_from_bytes(&bytes) {
                    self.render(&render);
                }
                renders += 1;
            } else if header.cmd_type == CmdType::Compute as u16 {
                let mut bytes = [0u8; size_of::<CmdCompute>()];
                let n = payload.len().min(bytes.len());
                bytes[..n].copy_from_slice(&payload[..n]);
                if let Ok(compute) = CmdCompute::read_from_bytes(&bytes) {
                    self.compute(&compute);
                }
                computes += 1;
            } else {
                self.line(&format!("payload:\n{}", hexdump(payload)));
            }
            self.print_heaps();
            self.depth -= 1;
            at = end;
            command += 1;
        }
        self.depth -= 1;
        Decoded {
            index,
            text: self.out,
            lints: self.lints,
            items: self.items,
        }
    }

    /// Whether the command's addresses can be followed: above 2^56
    /// nothing is mapped (and arithmetic on them could overflow), so the
    /// decode stops there with a lint.
    fn addresses_plausible(&mut self, addresses: &[(&str, u64)]) -> bool {
        let mut ok = true;
        for &(name, address) in addresses {
            if address >= 1 << 56 {
                self.lint(
                    "unmapped",
                    address,
                    format!("{name} {address:#x} is outside any GPU address space"),
                );
                ok = false;
            }
        }
        ok
    }

    fn render(&mut self, r: &CmdRender) {
        self.line(&format!("{r:#x?}"));
        if !self.addresses_plausible(&[
            ("usc_exec_base", self.s.usc_exec_base),
            ("vdm_ctrl_stream_base", r.vdm_ctrl_stream_base),
            ("sampler_heap", r.sampler_heap),
        ]) {
            return;
        }
        let base = self.s.usc_exec_base;
        let mut programs = Vec::new();
        for (name, program) in [
            ("bg", r.bg),
            ("eot", r.eot),
            ("partial_bg", r.partial_bg),
            ("partial_eot", r.partial_eot),
        ] {
            self.line(&format!("{name}:"));
            self.depth += 1;
            let info = if program.usc == 0 {
                self.line("none (address 0)");
                None
            } else {
                Some(self.pipeline(base + u64::from(program.usc & !0x3f), name.ends_with("eot")))
            };
            self.depth -= 1;
            programs.push(info);
        }
        for (name, kind, bytes) in [
            (
                "isp_zls_pixels",
                "ZlsPixels",
                u64::from(r.isp_zls_pixels).to_le_bytes(),
            ),
            (
                "ppp_multisamplectl",
                "SampleLocations",
                r.ppp_multisamplectl.to_le_bytes(),
            ),
        ] {
            let len = if kind == "ZlsPixels" { 4 } else { 8 };
            if let Some(Ok(text)) = agx_hw::formats::print_by_name(kind, &bytes[..len]) {
                self.line(&format!("{name}:"));
                self.depth += 1;
                self.line(text.trim_end());
                self.depth -= 1;
                self.items.push(Item {
                    command: self.command,
                    address: 0,
                    kind: kind.into(),
                    fields: typed_fields(kind, &bytes[..len]),
                    issues: printed_issues(&text),
                });
            }
        }
        let zls = ZlsControl::unpack(&r.zls_ctrl.to_le_bytes()).value;
        self.line("zls_ctrl:");
        self.depth += 1;
        if let Some(Ok(text)) =
            agx_hw::formats::print_by_name("ZlsControl", &r.zls_ctrl.to_le_bytes())
        {
            self.line(text.trim_end());
            // A command field, not memory: address 0.
            self.items.push(Item {
                command: self.command,
                address: 0,
                kind: "ZlsControl".into(),
                fields: typed_fields("ZlsControl", &r.zls_ctrl.to_le_bytes()),
                issues: printed_issues(&text),
            });
        }
        self.depth -= 1;
        if r.sampler_heap != 0 {
            self.line(&format!(
                "sampler heap at {:#x}, {} samplers:",
                r.sampler_heap, r.sampler_count
            ));
            self.depth += 1;
            for i in 0..u64::from(r.sampler_count) {
                self.format_at("Sampler", r.sampler_heap + 8 * i, 8);
            }
            self.depth -= 1;
        }
        self.line(&format!("VDM stream at {:#x}:", r.vdm_ctrl_stream_base));
        self.depth += 1;
        let (draws, fragment_programs) = self.vdm(r.vdm_ctrl_stream_base);
        self.depth -= 1;
        // Lints about partial renders: any pass with draws can overflow.
        if draws > 0 {
            for (name, info) in [("partial_bg", &programs[2]), ("partial_eot", &programs[3])] {
                if info.is_none() {
                    self.lint(
                        "partial-missing",
                        0,
                        format!("the pass draws but has no {name}: a partial render faults at address 0"),
                    );
                }
            }
            if let Some(Some(partial_bg)) = programs.get(2) {
                if !partial_bg.loads {
                    self.lint(
                        "partial-bg-no-load",
                        partial_bg.code.unwrap_or(0),
                        "partial_bg does not load the render targets: a partial render loses what was drawn before it".into(),
                    );
                }
            }
            if r.depth.base != 0 && !zls.z_store_enable {
                self.lint(
                    "zls-partial",
                    r.depth.base,
                    "depth is in use but zls_ctrl does not store it: a partial render loses depth (the reload reads what was stored)".into(),
                );
            }
        }
        for info in fragment_programs.iter().chain(programs.iter().flatten()) {
            if let (false, Some(index)) = (info.samplers_bound, info.max_sampler_immediate) {
                if index >= u32::from(r.sampler_count) {
                    self.lint(
                        "sampler-index",
                        info.code.unwrap_or(0),
                        format!(
                            "the program samples with sampler {index} but the heap has {}",
                            r.sampler_count
                        ),
                    );
                }
            }
        }
    }

    /// The resident (non-null) descriptors of the image heaps the
    /// command's programs use, each heap once per submission.
    fn print_heaps(&mut self) {
        let heaps: Vec<u64> = std::mem::take(&mut self.heaps).into_iter().collect();
        for base in heaps {
            if !self.heaps_printed.insert(base) {
                continue;
            }
            if self.s.tail(base).is_none() {
                self.lint(
                    "unmapped",
                    base,
                    "the image heap's base is not in mapped memory".into(),
                );
                continue;
            }
            // The heap's memory: the ranges mapped back to back from its
            // base (the umd binds it chunk by chunk).
            let mut bytes = Vec::new();
            while let Some(tail) = self.s.tail(base.wrapping_add(bytes.len() as u64)) {
                bytes.extend_from_slice(tail);
            }
            self.line(&format!("image heap at {base:#x} (resident descriptors):"));
            self.depth += 1;
            let mut shown = 0;
            for (index, d) in bytes.chunks_exact(24).enumerate() {
                let d: [u8; 24] = d.try_into().unwrap_or_default();
                let texture = agx_hw::formats::Texture::decode_fields(&d);
                if is_null_descriptor(&texture) || d == [0; 24] {
                    continue;
                }
                if shown == MAX_HEAP_DESCRIPTORS {
                    self.line("(more not shown)");
                    break;
                }
                self.line(&format!("slot {index} (byte offset {:#x}):", 24 * index));
                self.format_at("Texture", base + 24 * index as u64, 24);
                shown += 1;
            }
            self.depth -= 1;
        }
    }

    /// Prints every record of a layout (the generated description of a
    /// record sequence) whose bytes start at `base`.
    fn print_layout(&mut self, base: u64, slots: &[Slot]) {
        for slot in slots {
            let at = base + slot.offset_bytes as u64;
            match slot.format {
                Some(format) => {
                    self.format_at(format.name, at, slot.size_bytes);
                }
                None => {
                    if let Some(pad) = self.read(at, slot.size_bytes) {
                        if pad.iter().any(|&b| b != 0) {
                            self.line(&format!("{at:#x}: padding (not zero)\n{}", hexdump(pad)));
                        }
                    }
                }
            }
        }
    }

    /// Prints and parses the item of control stream `stream` at `pc` (a
    /// block of a VDM or CDM stream, a USC control word); returns it and
    /// its length, or `None` when the stream cannot be followed: it loops
    /// back to an item already walked, runs into unmapped memory, or holds
    /// an item the hardware description does not know (all linted).
    fn list_item<L: List>(
        &mut self,
        stream: &str,
        pc: u64,
        visited: &mut HashSet<u64>,
    ) -> Option<(L, usize)> {
        if !visited.insert(pc) {
            self.lint(
                "unterminated",
                pc,
                format!("the {stream} stream loops back to a block it already walked"),
            );
            return None;
        }
        let unmapped = |d: &mut Self| {
            d.lint(
                "unterminated",
                pc,
                format!("the {stream} stream runs into unmapped memory without a terminate"),
            );
        };
        let Some(first) = self.read(pc, L::PEEK_BYTES) else {
            unmapped(self);
            return None;
        };
        // The layout ends where the item does (padding included).
        let (len, slots) = match L::layout(first) {
            Ok(slots) => (
                slots
                    .iter()
                    .map(|slot| slot.offset_bytes + slot.size_bytes)
                    .max()
                    .unwrap_or(0),
                slots,
            ),
            Err(e) => {
                self.line(&format!("{pc:#x}: {e}\n{}", hexdump(first)));
                self.lint(
                    "unterminated",
                    pc,
                    format!("the {stream} stream cannot be followed: {e}"),
                );
                return None;
            }
        };
        self.print_layout(pc, &slots);
        let Some(bytes) = self.read(pc, len) else {
            unmapped(self);
            return None;
        };
        // The records were printed (with their unknown bits) above.
        match L::decode(bytes) {
            Ok(walked) => Some((walked.value, len)),
            Err(e) => {
                self.lint("unterminated", pc, format!("the {stream} stream: {e}"));
                None
            }
        }
    }

    fn compute(&mut self, c: &CmdCompute) {
        self.line(&format!("{c:#x?}"));
        if !self.addresses_plausible(&[
            ("usc_exec_base", self.s.usc_exec_base),
            ("cdm_ctrl_stream_base", c.cdm_ctrl_stream_base),
        ]) {
            return;
        }
        let mut pc = c.cdm_ctrl_stream_base;
        self.line(&format!("CDM stream at {pc:#x}:"));
        self.depth += 1;
        let mut visited = HashSet::new();
        for _ in 0..MAX_BLOCKS {
            let Some((block, len)) = self.list_item::<CdmBlock>("CDM", pc, &mut visited) else {
                break;
            };
            match block {
                CdmBlock::Launch(launch) => {
                    self.depth += 1;
                    let info = self.pipeline(self.s.usc_exec_base + launch.word1.pipeline, false);
                    self.depth -= 1;
                    if let (false, Some(index)) = (info.samplers_bound, info.max_sampler_immediate)
                    {
                        if index >= c.sampler_count {
                            self.lint(
                                "sampler-index",
                                info.code.unwrap_or(0),
                                format!(
                                    "the kernel samples with sampler {index} but the heap has {}",
                                    c.sampler_count
                                ),
                            );
                        }
                    }
                    pc += len as u64;
                }
                CdmBlock::StreamLink(link) => pc = link.target,
                CdmBlock::StreamTerminate(_) => break,
                CdmBlock::Barrier(_) => pc += len as u64,
            }
        }
        self.depth -= 1;
    }

    /// Walks a VDM stream; returns the number of draws and what the
    /// fragment programs it names bind.
    fn vdm(&mut self, start: u64) -> (usize, Vec<ProgramInfo>) {
        let mut pc = start;
        let mut draws = 0;
        let mut fragment = Vec::new();
        let mut visited = HashSet::new();
        for _ in 0..MAX_BLOCKS {
            let Some((block, len)) = self.list_item::<VdmBlock>("VDM", pc, &mut visited) else {
                break;
            };
            match block {
                VdmBlock::StreamTerminate(_) => break,
                VdmBlock::StreamLink(link) => {
                    pc = link.target;
                    continue;
                }
                VdmBlock::Barrier(_) => {}
                VdmBlock::PppStateUpdate(ppp) => {
                    self.depth += 1;
                    if let Some(info) = self.ppp(ppp.pointer, ppp.size_words) {
                        fragment.push(info);
                    }
                    self.depth -= 1;
                }
                VdmBlock::VdmStateUpdate(words) => {
                    if let Some(word1) = words.vertex_shader_word_1 {
                        self.depth += 1;
                        self.pipeline(self.s.usc_exec_base + word1.pipeline, false);
                        self.depth -= 1;
                    }
                }
                VdmBlock::IndexList(_) => draws += 1,
            }
            pc += len as u64;
        }
        (draws, fragment)
    }

    /// A PPP state of `size_words` words (as its VDM block says);
    /// returns what its fragment program binds.
    fn ppp(&mut self, va: u64, size_words: u32) -> Option<ProgramInfo> {
        let header = PppHeader::decode_from(self.read(va, 4)?).ok()?;
        let (len, slots) = match PppRecords::len_bytes(&header)
            .and_then(|len| Ok((len, PppRecords::layout(&header)?)))
        {
            Ok(sized) => sized,
            Err(e) => {
                self.line(&format!("{va:#x}: PPP state: {e}"));
                return None;
            }
        };
        if len != 4 * size_words as usize {
            self.lint(
                "ppp-size",
                va,
                format!(
                    "the PPP state block says {} bytes, its header {len}",
                    4 * size_words
                ),
            );
        }
        self.print_layout(va, &slots);
        let records = PppRecords::decode(self.read(va, len)?).ok()?.value;
        let shader = records.fragment_shader?;
        self.depth += 1;
        if shader.word0.cf_binding_count == 0 {
            // A shader that reads no varyings has no table (Mesa gives
            // its address as 0), and the hardware reads none.
            self.line("no coefficient bindings");
        } else {
            let table = self.s.usc_exec_base + shader.word2.cf_bindings;
            self.line(&format!("coefficient bindings at {table:#x}:"));
            self.depth += 1;
            self.format_at("CfBindingHeader", table, 4);
            for i in 0..u64::from(shader.word0.cf_binding_count) {
                self.format_at("CfBinding", table + 4 + 4 * i, 4);
            }
            self.depth -= 1;
        }
        let info = self.pipeline(self.s.usc_exec_base + shader.word1.pipeline, false);
        self.depth -= 1;
        Some(info)
    }

    /// USC control words at `va` and what they bind; `pbe` when the
    /// texture words bind PBE descriptors (end-of-tile programs).
    fn pipeline(&mut self, va: u64, pbe: bool) -> ProgramInfo {
        let mut info = ProgramInfo::default();
        self.line(&format!("USC words at {va:#x}:"));
        if !self.seen.insert(va) {
            self.line("  (decoded above)");
            // Still learn what it binds, quietly.
            let saved = std::mem::take(&mut self.out);
            let lints = self.lints.len();
            self.seen.remove(&va);
            let info = self.pipeline(va, pbe);
            self.seen.insert(va);
            self.out = saved;
            self.lints.truncate(lints);
            return info;
        }
        self.depth += 1;
        let mut at = va;
        let mut visited = HashSet::new();
        for _ in 0..64 {
            let Some((word, len)) = self.list_item::<UscWord>("USC word", at, &mut visited) else {
                break;
            };
            at += len as u64;
            match word {
                UscWord::Uniform(w) => {
                    // The bindless image heap's base lives in u60_u61
                    // (halves 120-123) by the umd's convention.
                    let first = 2 * HEAP_BASE_UNIFORM;
                    if w.start_halfs <= first && first + 4 <= w.start_halfs + w.size_halfs {
                        let at = w.buffer + 2 * u64::from(first - w.start_halfs);
                        if let Some(base) = self.read(at, 8) {
                            let base = u64::from_le_bytes(base.try_into().unwrap_or_default());
                            self.line(&format!("  image heap base (u60_u61): {base:#x}"));
                            self.heaps.insert(base);
                        }
                    }
                }
                UscWord::Texture(w) => {
                    self.depth += 1;
                    for i in 0..u64::from(w.count) {
                        self.format_at(if pbe { "Pbe" } else { "Texture" }, w.buffer + 24 * i, 24);
                    }
                    self.depth -= 1;
                }
                UscWord::Sampler(w) => {
                    info.samplers_bound = true;
                    self.depth += 1;
                    for i in 0..u64::from(w.count) {
                        self.format_at("Sampler", w.buffer + 8 * i, 8);
                    }
                    self.depth -= 1;
                }
                UscWord::Shader(w) => {
                    let code = self.s.usc_exec_base + w.code;
                    info.code = Some(code);
                    self.depth += 1;
                    self.disassemble(code, &mut info);
                    self.depth -= 1;
                }
                UscWord::NoPreshader(_) => break,
                UscWord::Preshader(w) => {
                    // Run once per bind before the shader; what it computes
                    // is uniforms, not what the shader samples or loads.
                    self.line("preshader:");
                    self.depth += 1;
                    self.disassemble(self.s.usc_exec_base + w.code, &mut ProgramInfo::default());
                    self.depth -= 1;
                    break;
                }
                UscWord::UniformHigh(_)
                | UscWord::Shared(_)
                | UscWord::Registers(_)
                | UscWord::FragmentProperties(_) => {}
            }
        }
        self.depth -= 1;
        info
    }

    fn disassemble(&mut self, code: u64, info: &mut ProgramInfo) {
        self.line(&format!("code at {code:#x}:"));
        let Some(bytes) = self.s.tail(code) else {
            self.lint("unmapped", code, "program code in unmapped memory".into());
            return;
        };
        let mut at = 0usize;
        for _ in 0..MAX_INSTRUCTIONS {
            if at >= bytes.len() {
                break;
            }
            match agx_hw::isa::decode(&bytes[at..]) {
                Ok(d) => {
                    let text = agx_hw::isa::text::print(&d.instr, code + at as u64);
                    let unknown = if d.unknown_bits != 0 {
                        format!("    XXX: unknown bits {:#x}", d.unknown_bits)
                    } else {
                        String::new()
                    };
                    self.line(&format!("{:#x}: {text}{unknown}", code + at as u64));
                    let issues = if d.unknown_bits != 0 {
                        vec![format!("unknown bits {:#x}", d.unknown_bits)]
                    } else {
                        Vec::new()
                    };
                    self.items.push(Item {
                        command: self.command,
                        address: code + at as u64,
                        kind: "instruction".to_owned(),
                        fields: vec![("text".to_owned(), FieldValue::Text(text.clone()))],
                        issues,
                    });
                    let mnemonic = text.split_whitespace().next().unwrap_or("");
                    if matches!(mnemonic, "texture_load" | "device_load" | "ld_tile") {
                        info.loads = true;
                    }
                    if matches!(mnemonic, "texture_sample" | "texture_load") {
                        // The sampler operand: `ssN` for an immediate.
                        if let Some(n) = text.split(", ").find_map(|op| {
                            op.strip_prefix("ss").and_then(|n| n.parse::<u32>().ok())
                        }) {
                            if mnemonic == "texture_sample" {
                                info.max_sampler_immediate =
                                    Some(info.max_sampler_immediate.unwrap_or(0).max(n));
                            }
                        }
                    }
                    at += d.length_bytes;
                    if d.instr.op == agx_hw::isa::Op::Stop {
                        break;
                    }
                }
                Err(e) => {
                    let end = (at + 16).min(bytes.len());
                    self.line(&format!(
                        "{:#x}: undecodable ({e})\n{}",
                        code + at as u64,
                        hexdump(&bytes[at..end])
                    ));
                    break;
                }
            }
        }
    }
}

/// Reads the capture at `path` (for the command-line tools).
pub fn open_capture(
    path: &std::path::Path,
) -> Result<agx_capture::Capture, agx_capture::CaptureError> {
    agx_capture::read(std::fs::File::open(path)?)
}

/// Decodes every submission of `capture` (or only `only`).
pub fn decode_all(capture: &agx_capture::Capture, only: Option<usize>) -> Vec<Decoded> {
    capture
        .submissions
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o == *i))
        .map(|(i, s)| Decoder::new(s).decode(i))
        .collect()
}

/// [`decode_all`] as (index, text, lints).
pub fn decode_capture(
    capture: &agx_capture::Capture,
    only: Option<usize>,
) -> Vec<(usize, String, Vec<Lint>)> {
    decode_all(capture, only)
        .into_iter()
        .map(|d| (d.index, d.text, d.lints))
        .collect()
}

/// One submission of `agx-decode --json`.
#[derive(serde::Serialize)]
struct JsonSubmission<'a> {
    submission: usize,
    queue_id: u32,
    vm_id: u32,
    usc_exec_base: u64,
    /// The items found from each command, in order.
    commands: Vec<JsonCommand<'a>>,
    /// The items of the submission itself.
    items: Vec<&'a Item>,
    lints: &'a [Lint],
    /// The text output, a line per entry.
    text: Vec<&'a str>,
}

/// The items decoded from one command.
#[derive(serde::Serialize)]
struct JsonCommand<'a> {
    command: usize,
    items: Vec<&'a Item>,
}

/// The decoded submissions as JSON: an array of
/// `{submission, queue_id, vm_id, usc_exec_base, commands: [{command, items}],
/// items (the submission's own), lints: [{rule, address, message}], text: [lines]}`,
/// each item `{address, kind, fields: {name: value}, issues: [..]}` with
/// numbers as numbers, bits as booleans and enum values by variant name.
pub fn to_json(capture: &agx_capture::Capture, decoded: &[Decoded]) -> String {
    let submissions: Vec<JsonSubmission<'_>> = decoded
        .iter()
        .map(|d| {
            let s = &capture.submissions[d.index];
            let mut commands: Vec<JsonCommand<'_>> = Vec::new();
            let mut own = Vec::new();
            for item in &d.items {
                match item.command {
                    Some(c) => match commands.last_mut() {
                        Some(last) if last.command == c => last.items.push(item),
                        _ => commands.push(JsonCommand {
                            command: c,
                            items: vec![item],
                        }),
                    },
                    None => own.push(item),
                }
            }
            JsonSubmission {
                submission: d.index,
                queue_id: s.queue_id,
                vm_id: s.vm_id,
                usc_exec_base: s.usc_exec_base,
                commands,
                items: own,
                lints: &d.lints,
                text: d.text.lines().collect(),
            }
        })
        .collect();
    // Serialising plain data to a string cannot fail.
    let mut out = serde_json::to_string_pretty(&submissions).unwrap_or_default();
    out.push('\n');
    out
}

/// Whether a heap slot holds a null descriptor, the shape Mesa and our umd
/// give unbound slots: a 1x1 R8 twiddled image (a null PBE decodes as one
/// too).
fn is_null_descriptor(t: &agx_hw::formats::Texture) -> bool {
    use agx_hw::formats::{Channels, Layout};
    t.layout == Layout::Twiddled && t.channels == Channels::R8 && t.width == 1 && t.height == 1
}
