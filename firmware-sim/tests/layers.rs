//! The simulator is a layered graph, as the hardware is: each module
//! reaches only the modules of lower layers (the shader core at the
//! bottom, the firmware at the top). This test reads the sources and fails
//! on any reference to a module of the same or a higher layer, so an
//! import circle cannot come back unnoticed.

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module and its layer.
const LAYERS: &[(&str, u32)] = &[
    ("usc", 0),
    // The firmware's context switch, which the watchdog's checks serve.
    ("preempt", 0),
    ("bptc", 0),
    ("etc", 0),
    // ASTC's HDR values reach the shader core's f16 conversion.
    ("astc", 1),
    // Block decoding reaches the shader core's f16 conversion, BPTC, ETC
    // and ASTC.
    ("bc", 2),
    ("fault", 1),
    // The debugger's probe sees the shader core's SIMD-groups and traces;
    // the watchdog carries it to every stage.
    ("probe", 1),
    ("memory", 2),
    ("command", 3),
    ("workers", 3),
    ("shader", 4),
    // A preshader reaches the texture unit.
    ("texture", 5),
    ("bind", 6),
    ("helper", 5),
    ("imageblock", 7),
    // The tiler runs vertex shaders, which reach the texture unit and
    // write images through the image block's texel stores.
    ("tiler", 8),
    ("raster", 9),
    ("compute", 9),
    ("fragment", 10),
    ("vertex", 11),
    ("engine", 12),
    ("firmware", 13),
];

/// The parts of the fragment module and their layers, for the same rule
/// one level down (`super::` paths between its files).
const FRAGMENT_LAYERS: &[(&str, u32)] = &[
    ("tilebuffer", 0),
    ("depth", 1),
    ("zls", 1),
    ("scene", 1),
    ("io", 2),
    ("program", 3),
    ("pass", 4),
    ("mod", 5),
];

/// The module names that follow `prefix` (e.g. `crate::`) in `source`.
fn paths_after(source: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(prefix) {
        let name: String = rest[at + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
        rest = &rest[at + prefix.len()..];
    }
    out
}

fn references(source: &str) -> Vec<String> {
    paths_after(source, "crate::")
}

/// Every source file of a module: the file, or all files under its
/// directory.
fn read_sources(path: &Path, out: &mut Vec<String>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            read_sources(&entry.unwrap().path(), out);
        }
    } else {
        out.push(std::fs::read_to_string(path).unwrap());
    }
}

#[test]
fn every_module_reaches_only_lower_layers() {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let mut sources = Vec::new();
        read_sources(&path, &mut sources);
        modules.push((name, sources));
    }
    let mut violations = Vec::new();
    for (name, sources) in &modules {
        let Some(&own) = layer.get(name.as_str()) else {
            violations.push(format!("{name}: not in the layer table"));
            continue;
        };
        for source in sources {
            for target in references(source) {
                if target == *name {
                    continue;
                }
                match layer.get(target.as_str()) {
                    Some(&other) if other < own => {}
                    Some(&other) => violations.push(format!(
                        "{name} (layer {own}) reaches {target} (layer {other})"
                    )),
                    None => violations.push(format!("{name} reaches unknown crate::{target}")),
                }
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(modules.len() >= LAYERS.len(), "every module was read");
}

#[test]
fn the_fragment_parts_reach_only_lower_parts() {
    let layer: BTreeMap<&str, u32> = FRAGMENT_LAYERS.iter().copied().collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fragment");
    let mut violations = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        seen += 1;
        let Some(&own) = layer.get(name.as_str()) else {
            violations.push(format!("fragment/{name}: not in the layer table"));
            continue;
        };
        // mod.rs names its parts with `self::`, the parts each other with
        // `super::`.
        let prefix = if name == "mod" { "self::" } else { "super::" };
        for target in paths_after(&source, prefix) {
            match layer.get(target.as_str()) {
                Some(&other) if other < own => {}
                Some(&other) => violations.push(format!(
                    "fragment/{name} (layer {own}) reaches {target} (layer {other})"
                )),
                None => violations.push(format!("fragment/{name} reaches unknown {target}")),
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(seen, FRAGMENT_LAYERS.len(), "every part was read");
}

#[test]
fn the_reference_finder_sees_paths() {
    assert_eq!(
        references("use crate::memory::{GpuVm};\nlet x = crate::fault::unsupported(1);"),
        ["memory", "fault"]
    );
}
