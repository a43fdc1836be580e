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
    ("fault", 1),
    ("memory", 2),
    ("command", 3),
    ("bind", 4),
    ("shader", 4),
    ("texture", 5),
    ("tiler", 5),
    ("raster", 6),
    ("compute", 7),
    ("render", 7),
    ("vertex", 8),
    ("engine", 9),
    ("firmware", 10),
];

fn references(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        let name: String = rest[at + 7..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
        rest = &rest[at + 7..];
    }
    out
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
        if path.is_dir() {
            for file in std::fs::read_dir(&path).unwrap() {
                sources.push(std::fs::read_to_string(file.unwrap().path()).unwrap());
            }
        } else {
            sources.push(std::fs::read_to_string(&path).unwrap());
        }
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
fn the_reference_finder_sees_paths() {
    assert_eq!(
        references("use crate::memory::{GpuVm};\nlet x = crate::fault::unsupported(1);"),
        ["memory", "fault"]
    );
}
