//! The ioctl tables in `Documentation/uapi.md` must match the code.

use std::path::Path;

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Documentation/uapi.md");
    std::fs::read_to_string(path).expect("Documentation/uapi.md")
}

fn check(doc: &str, short_name: &str, request: u32) {
    let cell = format!("| {short_name} |");
    let row = doc
        .lines()
        .find(|l| l.contains(&cell))
        .unwrap_or_else(|| panic!("uapi.md has no table row for {short_name}"));
    let expected = format!("`0x{request:08X}`");
    assert!(
        row.contains(&expected),
        "uapi.md row for {short_name} should say {expected}: {row}"
    );
}

#[test]
fn uapi_md_request_numbers_match() {
    let doc = doc();
    for &(name, request, _) in agx_uapi::asahi::IOCTLS {
        check(&doc, name.trim_start_matches("DRM_IOCTL_ASAHI_"), request);
    }
    for &(name, request) in agx_uapi::drm::IOCTLS {
        check(&doc, name.trim_start_matches("DRM_IOCTL_"), request);
    }
}
