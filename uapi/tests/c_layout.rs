//! Checks the DRM core definitions against the system's C `drm.h`.
//!
//! The test writes a C program that prints `sizeof`, `offsetof` and the
//! request and constant values the C header defines, compiles it with the
//! system C compiler against libdrm's `drm.h` (Debian: `libdrm-dev`) and
//! compares every number with ours.
//!
//! Structs that Linux extended by appending fields are accepted from an older
//! header only in the way DRM core accepts them: the C struct must be exactly
//! the prefix of ours that ends where the newer fields start, and its request
//! number must be ours with the smaller size. Newer fields are compiled only
//! when the header defines the macro that was introduced with them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use agx_uapi::drm::{self, *};
use agx_uapi::field_size_bytes;
use agx_uapi::ioctl::{ioc, ioc_dir, ioc_nr, ioc_type};

struct FieldSpec {
    name: &'static str,
    offset: usize,
    size: usize,
    /// C macro that exists exactly when the header has this field.
    since: Option<&'static str>,
}

struct StructSpec {
    c_name: &'static str,
    size: usize,
    fields: Vec<FieldSpec>,
}

macro_rules! struct_spec {
    ($t:ty, $c:literal, [ $( $f:ident $( since $g:literal )? ),* $(,)? ]) => {
        StructSpec {
            c_name: $c,
            size: core::mem::size_of::<$t>(),
            fields: vec![ $( FieldSpec {
                name: stringify!($f),
                offset: core::mem::offset_of!($t, $f),
                size: field_size_bytes(|s: &$t| &s.$f),
                since: None $( .or(Some($g)) )?,
            } ),* ],
        }
    };
}

fn structs() -> Vec<StructSpec> {
    vec![
        struct_spec!(
            Version,
            "drm_version",
            [
                version_major,
                version_minor,
                version_patchlevel,
                name_len,
                name,
                date_len,
                date,
                desc_len,
                desc,
            ]
        ),
        struct_spec!(GetCap, "drm_get_cap", [capability, value]),
        struct_spec!(
            SyncFileInfo,
            "sync_file_info",
            [name, status, flags, num_fences, pad, sync_fence_info]
        ),
        struct_spec!(DmaBufSync, "dma_buf_sync", [flags]),
        struct_spec!(DmaBufSyncFile, "dma_buf_export_sync_file", [flags, fd]),
        struct_spec!(DmaBufSyncFile, "dma_buf_import_sync_file", [flags, fd]),
        struct_spec!(GemClose, "drm_gem_close", [handle, pad]),
        struct_spec!(Unique, "drm_unique", [unique_len, unique]),
        struct_spec!(Auth, "drm_auth", [magic]),
        struct_spec!(Client, "drm_client", [idx, auth, pid, uid, magic, iocs]),
        struct_spec!(Stats, "drm_stats", [count, data]),
        struct_spec!(
            SetVersion,
            "drm_set_version",
            [drm_di_major, drm_di_minor, drm_dd_major, drm_dd_minor]
        ),
        struct_spec!(GemFlink, "drm_gem_flink", [handle, name]),
        struct_spec!(GemOpen, "drm_gem_open", [name, handle, size]),
        struct_spec!(SetClientCap, "drm_set_client_cap", [capability, value]),
        struct_spec!(PrimeHandle, "drm_prime_handle", [handle, flags, fd]),
        struct_spec!(SyncobjCreate, "drm_syncobj_create", [handle, flags]),
        struct_spec!(SyncobjDestroy, "drm_syncobj_destroy", [handle, pad]),
        struct_spec!(
            SyncobjHandle,
            "drm_syncobj_handle",
            [handle, flags, fd, pad]
        ),
        struct_spec!(SyncobjWait, "drm_syncobj_wait", [
            handles, timeout_nsec, count_handles, flags, first_signaled, pad,
            deadline_nsec since "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE",
        ]),
        struct_spec!(SyncobjTimelineWait, "drm_syncobj_timeline_wait", [
            handles, points, timeout_nsec, count_handles, flags, first_signaled, pad,
            deadline_nsec since "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE",
        ]),
        struct_spec!(
            SyncobjArray,
            "drm_syncobj_array",
            [handles, count_handles, pad]
        ),
        struct_spec!(
            SyncobjTimelineArray,
            "drm_syncobj_timeline_array",
            [handles, points, count_handles, flags,]
        ),
        struct_spec!(
            SyncobjTransfer,
            "drm_syncobj_transfer",
            [src_handle, dst_handle, src_point, dst_point, flags, pad,]
        ),
    ]
}

/// Which struct each ioctl takes.
const IOCTL_ARGS: &[(&str, &str)] = &[
    ("DRM_IOCTL_VERSION", "drm_version"),
    ("DRM_IOCTL_GET_UNIQUE", "drm_unique"),
    ("DRM_IOCTL_GET_MAGIC", "drm_auth"),
    ("DRM_IOCTL_GET_CLIENT", "drm_client"),
    ("DRM_IOCTL_GET_STATS", "drm_stats"),
    ("DRM_IOCTL_SET_VERSION", "drm_set_version"),
    ("DRM_IOCTL_GEM_CLOSE", "drm_gem_close"),
    ("DRM_IOCTL_GEM_FLINK", "drm_gem_flink"),
    ("DRM_IOCTL_GEM_OPEN", "drm_gem_open"),
    ("DRM_IOCTL_GET_CAP", "drm_get_cap"),
    ("DRM_IOCTL_SET_CLIENT_CAP", "drm_set_client_cap"),
    ("DRM_IOCTL_SET_UNIQUE", "drm_unique"),
    ("DRM_IOCTL_AUTH_MAGIC", "drm_auth"),
    ("DRM_IOCTL_PRIME_HANDLE_TO_FD", "drm_prime_handle"),
    ("DRM_IOCTL_PRIME_FD_TO_HANDLE", "drm_prime_handle"),
    ("DRM_IOCTL_SYNCOBJ_CREATE", "drm_syncobj_create"),
    ("DRM_IOCTL_SYNCOBJ_DESTROY", "drm_syncobj_destroy"),
    ("DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD", "drm_syncobj_handle"),
    ("DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE", "drm_syncobj_handle"),
    ("DRM_IOCTL_SYNCOBJ_WAIT", "drm_syncobj_wait"),
    ("DRM_IOCTL_SYNCOBJ_RESET", "drm_syncobj_array"),
    ("DRM_IOCTL_SYNCOBJ_SIGNAL", "drm_syncobj_array"),
    (
        "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
        "drm_syncobj_timeline_wait",
    ),
    ("DRM_IOCTL_SYNCOBJ_QUERY", "drm_syncobj_timeline_array"),
    ("DRM_IOCTL_SYNCOBJ_TRANSFER", "drm_syncobj_transfer"),
    (
        "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL",
        "drm_syncobj_timeline_array",
    ),
];

/// (C macro, our value, macro that must exist for it to be checked).
fn constants() -> Vec<(&'static str, u64, Option<&'static str>)> {
    let flag = |f: u32| u64::from(f);
    vec![
        ("SYNC_IOC_FILE_INFO", u64::from(SYNC_IOC_FILE_INFO), None),
        ("DMA_BUF_IOCTL_SYNC", u64::from(DMA_BUF_IOCTL_SYNC), None),
        (
            "DMA_BUF_IOCTL_EXPORT_SYNC_FILE",
            u64::from(DMA_BUF_IOCTL_EXPORT_SYNC_FILE),
            None,
        ),
        (
            "DMA_BUF_IOCTL_IMPORT_SYNC_FILE",
            u64::from(DMA_BUF_IOCTL_IMPORT_SYNC_FILE),
            None,
        ),
        ("DMA_BUF_SYNC_READ", DMA_BUF_SYNC_READ, None),
        ("DMA_BUF_SYNC_WRITE", DMA_BUF_SYNC_WRITE, None),
        ("DMA_BUF_SYNC_END", DMA_BUF_SYNC_END, None),
        ("DRM_CAP_DUMB_BUFFER", DRM_CAP_DUMB_BUFFER, None),
        ("DRM_CAP_VBLANK_HIGH_CRTC", DRM_CAP_VBLANK_HIGH_CRTC, None),
        (
            "DRM_CAP_DUMB_PREFERRED_DEPTH",
            DRM_CAP_DUMB_PREFERRED_DEPTH,
            None,
        ),
        (
            "DRM_CAP_DUMB_PREFER_SHADOW",
            DRM_CAP_DUMB_PREFER_SHADOW,
            None,
        ),
        ("DRM_CAP_PRIME", DRM_CAP_PRIME, None),
        (
            "DRM_CAP_TIMESTAMP_MONOTONIC",
            DRM_CAP_TIMESTAMP_MONOTONIC,
            None,
        ),
        ("DRM_CAP_ASYNC_PAGE_FLIP", DRM_CAP_ASYNC_PAGE_FLIP, None),
        ("DRM_CAP_CURSOR_WIDTH", DRM_CAP_CURSOR_WIDTH, None),
        ("DRM_CAP_CURSOR_HEIGHT", DRM_CAP_CURSOR_HEIGHT, None),
        ("DRM_CAP_ADDFB2_MODIFIERS", DRM_CAP_ADDFB2_MODIFIERS, None),
        ("DRM_CAP_PAGE_FLIP_TARGET", DRM_CAP_PAGE_FLIP_TARGET, None),
        (
            "DRM_CAP_CRTC_IN_VBLANK_EVENT",
            DRM_CAP_CRTC_IN_VBLANK_EVENT,
            None,
        ),
        ("DRM_CAP_SYNCOBJ", DRM_CAP_SYNCOBJ, None),
        ("DRM_CAP_SYNCOBJ_TIMELINE", DRM_CAP_SYNCOBJ_TIMELINE, None),
        ("DRM_PRIME_CAP_IMPORT", DRM_PRIME_CAP_IMPORT, None),
        ("DRM_PRIME_CAP_EXPORT", DRM_PRIME_CAP_EXPORT, None),
        ("DRM_RDWR", flag(DRM_RDWR), None),
        ("DRM_CLOEXEC", flag(DRM_CLOEXEC), None),
        (
            "DRM_SYNCOBJ_CREATE_SIGNALED",
            flag(SyncobjCreateFlags::SIGNALED.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE",
            flag(SyncobjFdToHandleFlags::IMPORT_SYNC_FILE.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE",
            flag(SyncobjHandleToFdFlags::EXPORT_SYNC_FILE.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL",
            flag(SyncobjWaitFlags::WAIT_ALL.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT",
            flag(SyncobjWaitFlags::WAIT_FOR_SUBMIT.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE",
            flag(SyncobjWaitFlags::WAIT_AVAILABLE.bits()),
            None,
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE",
            flag(SyncobjWaitFlags::WAIT_DEADLINE.bits()),
            Some("DRM_SYNCOBJ_WAIT_FLAGS_WAIT_DEADLINE"),
        ),
        (
            "DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED",
            flag(SyncobjQueryFlags::LAST_SUBMITTED.bits()),
            None,
        ),
    ]
}

fn c_program(structs: &[StructSpec]) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <fcntl.h>\n#include <drm.h>\n#include <linux/sync_file.h>\n#include <linux/dma-buf.h>\n\
         #define FIELD(s, f) printf(\"F %s %s %zu %zu\\n\", #s, #f, \
         offsetof(struct s, f), sizeof(((struct s *)0)->f))\n\
         int main(void) {\n",
    );
    for s in structs {
        writeln!(
            c,
            "  printf(\"S {0} %zu\\n\", sizeof(struct {0}));",
            s.c_name
        )
        .unwrap();
        for f in &s.fields {
            if let Some(guard) = f.since {
                writeln!(c, "#ifdef {guard}").unwrap();
            }
            writeln!(c, "  FIELD({}, {});", s.c_name, f.name).unwrap();
            if f.since.is_some() {
                c.push_str("#endif\n");
            }
        }
    }
    for (name, _) in drm::IOCTLS {
        writeln!(c, "  printf(\"I {name} %lu\\n\", (unsigned long){name});").unwrap();
    }
    for (name, _, guard) in constants() {
        if let Some(guard) = guard {
            writeln!(c, "#ifdef {guard}").unwrap();
        }
        writeln!(
            c,
            "  printf(\"C {name} %llu\\n\", (unsigned long long)({name}));"
        )
        .unwrap();
        if guard.is_some() {
            c.push_str("#endif\n");
        }
    }
    c.push_str("  return 0;\n}\n");
    c
}

/// Compiler flags for libdrm's headers: pkg-config if it knows libdrm, the
/// Debian location otherwise.
fn drm_cflags() -> Vec<String> {
    if let Ok(out) = Command::new("pkg-config")
        .args(["--cflags", "libdrm"])
        .output()
    {
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(String::from)
                .collect();
        }
    }
    vec!["-I/usr/include/libdrm".to_owned()]
}

#[derive(Default)]
struct COutput {
    sizes: BTreeMap<String, usize>,
    fields: BTreeMap<(String, String), (usize, usize)>,
    ioctls: BTreeMap<String, u64>,
    constants: BTreeMap<String, u64>,
}

fn run_c(structs: &[StructSpec]) -> COutput {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program(structs)).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_owned());
    let compile = Command::new(&cc)
        .args(drm_cflags())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        compile.status.success(),
        "compiling against drm.h failed (install gcc and libdrm-dev):\n{}",
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());

    let mut out = COutput::default();
    for line in String::from_utf8(run.stdout).unwrap().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "S" => {
                out.sizes.insert(w[1].to_owned(), w[2].parse().unwrap());
            }
            "F" => {
                out.fields.insert(
                    (w[1].to_owned(), w[2].to_owned()),
                    (w[3].parse().unwrap(), w[4].parse().unwrap()),
                );
            }
            "I" => {
                out.ioctls.insert(w[1].to_owned(), w[2].parse().unwrap());
            }
            "C" => {
                out.constants.insert(w[1].to_owned(), w[2].parse().unwrap());
            }
            other => panic!("unexpected line kind {other}"),
        }
    }
    out
}

#[test]
fn drm_core_matches_system_header() {
    let structs = structs();
    let c = run_c(&structs);

    for s in &structs {
        let c_size = c.sizes[s.c_name];
        let mut prefix_end = s.size;
        for f in &s.fields {
            match c.fields.get(&(s.c_name.to_owned(), f.name.to_owned())) {
                Some(&(offset, size)) => {
                    assert_eq!(
                        (offset, size),
                        (f.offset, f.size),
                        "{}.{}: C (offset, size) differs from ours",
                        s.c_name,
                        f.name
                    );
                }
                None => {
                    assert!(
                        f.since.is_some(),
                        "{}.{} missing from drm.h",
                        s.c_name,
                        f.name
                    );
                    prefix_end = prefix_end.min(f.offset);
                }
            }
        }
        assert_eq!(
            c_size, prefix_end,
            "sizeof(struct {}) in drm.h is neither ours nor the documented older prefix",
            s.c_name
        );
    }

    for &(name, ours) in drm::IOCTLS {
        let theirs = c.ioctls[name];
        // An ioctl without an argument (SET_MASTER, DROP_MASTER).
        let Some(&(_, arg)) = IOCTL_ARGS.iter().find(|(n, _)| *n == name) else {
            assert_eq!(theirs, u64::from(ours), "{name}");
            continue;
        };
        let c_size = c.sizes[arg];
        let expected = ioc(ioc_dir(ours), ioc_type(ours), ioc_nr(ours), c_size);
        assert_eq!(theirs, u64::from(expected), "{name}: C {theirs:#x}");
        if c_size == structs.iter().find(|s| s.c_name == arg).unwrap().size {
            assert_eq!(theirs, u64::from(ours), "{name}");
        }
    }

    for (name, ours, since) in constants() {
        match c.constants.get(name) {
            Some(&theirs) => assert_eq!(theirs, ours, "{name}"),
            None => assert!(since.is_some(), "{name} missing from drm.h"),
        }
    }

    // Every struct and every ioctl was really compared.
    assert_eq!(c.sizes.len(), structs.len());
    assert_eq!(c.ioctls.len(), drm::IOCTLS.len());
}
