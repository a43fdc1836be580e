//! `Documentation/formats.md` must be exactly what the format tables say.
//!
//! Run with `AGX_BLESS=1` to rewrite the file after changing the spec.

use std::path::Path;

#[test]
fn formats_md_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Documentation/formats.md");
    let generated = agx_hw::doc::formats_markdown();
    if std::env::var_os("AGX_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "Documentation/formats.md is out of date: run `AGX_BLESS=1 cargo test -p agx-hw --test formats_doc`"
    );
}
