//! One row per validation rule: raw argument bytes through the ioctl entry
//! point, and the errno Linux gives for them.

mod common;

use agx_kmd::Errno;
use agx_uapi::asahi::{
    self, BindFlags, GemBindObject, GemBindOp, GemCreate, GemFlags, GemMmapOffset, GetParams,
    GetTime, QueueCreate, QueueDestroy, VmBind, VmCreate, VmDestroy,
};
use agx_uapi::drm::{self, GemClose, GetCap, SyncobjEventfd, Version};
use common::*;
use zerocopy::IntoBytes;

const RW: u32 = BindFlags::READ.bits() | BindFlags::WRITE.bits();

fn ts_bind(handle: u32) -> GemBindObject {
    GemBindObject {
        op: 0,
        flags: 1,
        handle,
        offset: 0,
        range: PAGE,
        ..GemBindObject::default()
    }
}

struct Row {
    name: &'static str,
    request: u32,
    bytes: Vec<u8>,
    expected: Errno,
}

fn row(
    name: &'static str,
    request: u32,
    arg: impl IntoBytes + zerocopy::Immutable,
    expected: Errno,
) -> Row {
    Row {
        name,
        request,
        bytes: arg.as_bytes().to_vec(),
        expected,
    }
}

#[test_log::test]
fn every_validation_rule_gives_its_errno() {
    let system = system();
    let baseline = system.stats();
    let file = system.open();
    let vm = vm_create(&file);
    let other_vm = vm_create(&file);
    let object = gem_create(&file, 4 * PAGE, 0, 0).unwrap();
    let private = gem_create(&file, PAGE, GemFlags::VM_PRIVATE.bits(), other_vm).unwrap();
    let syncobj = {
        let mut c = drm::SyncobjCreate::default();
        call(&file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c).unwrap();
        c.handle
    };
    let mut params_out = [0u8; 592];

    let bind_with = |ops: Vec<GemBindOp>| {
        let ops = Box::leak(ops.into_boxed_slice());
        VmBind {
            vm_id: vm,
            num_binds: ops.len() as u32,
            stride: 32,
            pad: 0,
            userptr: ops.as_ptr() as u64,
        }
    };
    let good = |addr| map_op(object, addr, PAGE, 0, RW);
    let user = 0x1_0000_0000;

    let rows = vec![
        // GET_PARAMS
        row(
            "params pad",
            asahi::DRM_IOCTL_ASAHI_GET_PARAMS,
            GetParams {
                pad: 1,
                pointer: params_out.as_mut_ptr() as u64,
                size: 592,
                ..GetParams::default()
            },
            Errno::EINVAL,
        ),
        row(
            "params group",
            asahi::DRM_IOCTL_ASAHI_GET_PARAMS,
            GetParams {
                param_group: 1,
                pointer: params_out.as_mut_ptr() as u64,
                size: 592,
                ..GetParams::default()
            },
            Errno::EINVAL,
        ),
        row(
            "params bad pointer",
            asahi::DRM_IOCTL_ASAHI_GET_PARAMS,
            GetParams {
                pointer: 16,
                size: 592,
                ..GetParams::default()
            },
            Errno::EFAULT,
        ),
        // GET_TIME
        row(
            "time flags",
            asahi::DRM_IOCTL_ASAHI_GET_TIME,
            GetTime {
                flags: 1,
                gpu_timestamp: 0,
            },
            Errno::EINVAL,
        ),
        // VM_CREATE / VM_DESTROY
        row(
            "vm pad",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: KERNEL_START,
                kernel_end: KERNEL_END,
                pad: 1,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm unaligned",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: KERNEL_START + 1,
                kernel_end: KERNEL_END,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm empty",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: KERNEL_END,
                kernel_end: KERNEL_START,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm outside",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: KERNEL_START,
                kernel_end: 0x80_0000_0000,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm below start",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: 0,
                kernel_end: 0x2000_0000,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm too small",
            asahi::DRM_IOCTL_ASAHI_VM_CREATE,
            VmCreate {
                kernel_start: KERNEL_START,
                kernel_end: KERNEL_START + 0x1000_0000,
                ..VmCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "vm destroy pad",
            asahi::DRM_IOCTL_ASAHI_VM_DESTROY,
            VmDestroy { vm_id: vm, pad: 1 },
            Errno::EINVAL,
        ),
        row(
            "vm destroy unknown",
            asahi::DRM_IOCTL_ASAHI_VM_DESTROY,
            VmDestroy { vm_id: 99, pad: 0 },
            Errno::ENOENT,
        ),
        // GEM_CREATE / GEM_MMAP_OFFSET / GEM_CLOSE
        row(
            "gem pad",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate {
                size: PAGE,
                pad: 1,
                ..GemCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "gem flags",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate {
                size: PAGE,
                flags: 4,
                ..GemCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "gem size 0",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate::default(),
            Errno::EINVAL,
        ),
        row(
            "gem vm without private",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate {
                size: PAGE,
                vm_id: vm,
                ..GemCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "gem private unknown vm",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate {
                size: PAGE,
                flags: GemFlags::VM_PRIVATE.bits(),
                vm_id: 99,
                ..GemCreate::default()
            },
            Errno::ENOENT,
        ),
        row(
            "gem too big",
            asahi::DRM_IOCTL_ASAHI_GEM_CREATE,
            GemCreate {
                size: 4 << 30,
                ..GemCreate::default()
            },
            Errno::ENOMEM,
        ),
        row(
            "mmap flags",
            asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
            GemMmapOffset {
                handle: object,
                flags: 1,
                offset: 0,
            },
            Errno::EINVAL,
        ),
        row(
            "mmap unknown",
            asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET,
            GemMmapOffset {
                handle: 99,
                flags: 0,
                offset: 0,
            },
            Errno::ENOENT,
        ),
        row(
            "close pad",
            drm::DRM_IOCTL_GEM_CLOSE,
            GemClose {
                handle: object,
                pad: 1,
            },
            Errno::EINVAL,
        ),
        row(
            "close unknown",
            drm::DRM_IOCTL_GEM_CLOSE,
            GemClose { handle: 99, pad: 0 },
            Errno::EINVAL,
        ),
        // VM_BIND
        row(
            "bind stride 0",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                stride: 0,
                ..bind_with(vec![good(user)])
            },
            Errno::EINVAL,
        ),
        row(
            "bind array past kmalloc's limit",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                num_binds: u32::MAX,
                stride: u32::MAX,
                ..bind_with(vec![good(user)])
            },
            Errno::ENOMEM,
        ),
        row(
            "bind array unreadable",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                stride: 64,
                userptr: 0x1000 - 32,
                ..bind_with(vec![good(user)])
            },
            Errno::EFAULT,
        ),
        row(
            "bind pad",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                pad: 1,
                ..bind_with(vec![good(user)])
            },
            Errno::EINVAL,
        ),
        row(
            "bind unknown vm",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                vm_id: 99,
                ..bind_with(vec![good(user)])
            },
            Errno::ENOENT,
        ),
        row(
            "bind bad userptr",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            VmBind {
                userptr: 16,
                ..bind_with(vec![good(user)])
            },
            Errno::EFAULT,
        ),
        row(
            "bind unknown flags",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, user, PAGE, 0, RW | 0x100)]),
            Errno::EINVAL,
        ),
        row(
            "bind no access",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(
                object,
                user,
                PAGE,
                0,
                BindFlags::SINGLE_PAGE.bits(),
            )]),
            Errno::EINVAL,
        ),
        row(
            "bind addr unaligned",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![good(user + 4096)]),
            Errno::EINVAL,
        ),
        row(
            "bind range unaligned",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, user, 4096, 0, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind range 0",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, user, 0, 0, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind offset unaligned",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, user, PAGE, 8, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind past object",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, user, 4 * PAGE, PAGE, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind single page past object",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(
                object,
                user,
                8 * PAGE,
                4 * PAGE,
                RW | BindFlags::SINGLE_PAGE.bits(),
            )]),
            Errno::EINVAL,
        ),
        row(
            "bind page 0",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![good(0)]),
            Errno::EINVAL,
        ),
        row(
            "bind dummy page",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![good(0x7F_FFFF_8000)]),
            Errno::EINVAL,
        ),
        row(
            "bind wraps",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, u64::MAX - PAGE + 1, PAGE, 0, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind kernel range",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![good(KERNEL_START + PAGE)]),
            Errno::EINVAL,
        ),
        row(
            "bind straddles kernel range",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(object, KERNEL_START - PAGE, 2 * PAGE, 0, RW)]),
            Errno::EINVAL,
        ),
        row(
            "bind unknown handle",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(99, user, PAGE, 0, RW)]),
            Errno::ENOENT,
        ),
        row(
            "bind other vm's private object",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![map_op(private, user, PAGE, 0, RW)]),
            Errno::EINVAL,
        ),
        row(
            "unbind with handle",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![GemBindOp {
                handle: object,
                ..unmap_op(user, PAGE)
            }]),
            Errno::EINVAL,
        ),
        row(
            "unbind with offset",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![GemBindOp {
                offset: PAGE,
                ..unmap_op(user, PAGE)
            }]),
            Errno::EINVAL,
        ),
        row(
            "unbind with read",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![GemBindOp {
                flags: BindFlags::UNBIND.bits() | BindFlags::READ.bits(),
                ..unmap_op(user, PAGE)
            }]),
            Errno::EINVAL,
        ),
        row(
            "bind: a later bad op refuses the whole call",
            asahi::DRM_IOCTL_ASAHI_VM_BIND,
            bind_with(vec![good(user), good(user + 1)]),
            Errno::EINVAL,
        ),
        // GEM_BIND_OBJECT
        row(
            "bind object vm_id",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                vm_id: vm,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object pad",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                pad: 1,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object op",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                op: 2,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object flags",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                flags: 0,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object unaligned",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                offset: 64,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object range 0",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                range: 0,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object past end",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                range: 8 * PAGE,
                ..ts_bind(object)
            },
            Errno::EINVAL,
        ),
        row(
            "bind object unknown handle",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                handle: 99,
                ..ts_bind(object)
            },
            Errno::ENOENT,
        ),
        row(
            "unbind object fields",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                op: 1,
                range: PAGE,
                object_handle: 1,
                ..GemBindObject::default()
            },
            Errno::EINVAL,
        ),
        row(
            "unbind object unknown",
            asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT,
            GemBindObject {
                op: 1,
                object_handle: 99,
                ..GemBindObject::default()
            },
            Errno::ENOENT,
        ),
        // QUEUE_CREATE / QUEUE_DESTROY
        row(
            "queue flags",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            QueueCreate {
                flags: 1,
                vm_id: vm,
                ..QueueCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "queue high priority",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            QueueCreate {
                priority: 2,
                vm_id: vm,
                ..QueueCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "queue realtime priority",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            QueueCreate {
                priority: 3,
                vm_id: vm,
                ..QueueCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "queue unknown priority",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            QueueCreate {
                priority: 7,
                vm_id: vm,
                ..QueueCreate::default()
            },
            Errno::EINVAL,
        ),
        row(
            "queue unknown vm",
            asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE,
            QueueCreate {
                vm_id: 99,
                ..QueueCreate::default()
            },
            Errno::ENOENT,
        ),
        row(
            "queue destroy pad",
            asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY,
            QueueDestroy {
                queue_id: 1,
                pad: 1,
            },
            Errno::EINVAL,
        ),
        row(
            "queue destroy unknown",
            asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY,
            QueueDestroy {
                queue_id: 99,
                pad: 0,
            },
            Errno::ENOENT,
        ),
        // DRM core
        row(
            "cap kms only",
            drm::DRM_IOCTL_GET_CAP,
            GetCap {
                capability: drm::DRM_CAP_DUMB_BUFFER,
                value: 0,
            },
            Errno::EOPNOTSUPP,
        ),
        row(
            "version bad name pointer",
            drm::DRM_IOCTL_VERSION,
            Version {
                name_len: 16,
                name: 16,
                ..Version::default()
            },
            Errno::EFAULT,
        ),
        // Dispatch
        row(
            "unknown driver ioctl",
            agx_uapi::ioctl::drm_iowr::<GetCap>(0x40 + 0x20),
            GetCap::default(),
            Errno::EINVAL,
        ),
        row(
            "not a DRM ioctl",
            0xC010_7A00,
            GetCap::default(),
            Errno::ENOTTY,
        ),
        row(
            "a removed legacy ioctl (no handler in Linux's table)",
            agx_uapi::ioctl::drm_iowr::<GetCap>(0x03),
            GetCap::default(),
            Errno::EINVAL,
        ),
        row(
            "past the end of the core table",
            agx_uapi::ioctl::drm_iowr::<GetCap>(0xD8),
            GetCap::default(),
            Errno::EINVAL,
        ),
        // Render nodes (drm_ioctl_permit: no DRM_RENDER_ALLOW).
        row(
            "GET_UNIQUE",
            agx_uapi::ioctl::ioc(3, b'd', 0x01, 16),
            [0u64; 2],
            Errno::EACCES,
        ),
        row(
            "GET_MAGIC",
            agx_uapi::ioctl::ioc(2, b'd', 0x02, 4),
            0u32,
            Errno::EACCES,
        ),
        row(
            "GEM_FLINK",
            agx_uapi::ioctl::ioc(3, b'd', 0x0a, 8),
            [1u32, 0],
            Errno::EACCES,
        ),
        row(
            "GEM_OPEN",
            agx_uapi::ioctl::ioc(3, b'd', 0x0b, 16),
            [0u64; 2],
            Errno::EACCES,
        ),
        row(
            "SET_CLIENT_CAP",
            agx_uapi::ioctl::ioc(1, b'd', 0x0d, 16),
            [2u64, 1],
            Errno::EACCES,
        ),
        row(
            "AUTH_MAGIC",
            agx_uapi::ioctl::ioc(1, b'd', 0x11, 4),
            0u32,
            Errno::EACCES,
        ),
        row(
            "SET_MASTER",
            agx_uapi::ioctl::ioc(0, b'd', 0x1e, 0),
            [0u8; 0],
            Errno::EACCES,
        ),
        row(
            "DROP_MASTER",
            agx_uapi::ioctl::ioc(0, b'd', 0x1f, 0),
            [0u8; 0],
            Errno::EACCES,
        ),
        row(
            "MODE_GETRESOURCES",
            agx_uapi::ioctl::ioc(3, b'd', 0xA0, 64),
            [0u64; 8],
            Errno::EACCES,
        ),
        row(
            "MODE_CREATE_DUMB",
            agx_uapi::ioctl::ioc(3, b'd', 0xB2, 32),
            [0u64; 4],
            Errno::EACCES,
        ),
        // SYNCOBJ_EVENTFD, in drm_syncobj_eventfd_ioctl's order.
        row(
            "eventfd flags",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            SyncobjEventfd {
                handle: syncobj,
                flags: 1,
                fd: -1,
                ..SyncobjEventfd::default()
            },
            Errno::EINVAL,
        ),
        row(
            "eventfd pad",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            SyncobjEventfd {
                handle: 999,
                pad: 1,
                ..SyncobjEventfd::default()
            },
            Errno::EINVAL,
        ),
        row(
            "eventfd handle",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            SyncobjEventfd {
                handle: 999,
                fd: -1,
                ..SyncobjEventfd::default()
            },
            Errno::ENOENT,
        ),
        row(
            "eventfd descriptor",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            SyncobjEventfd {
                handle: syncobj,
                fd: -1,
                ..SyncobjEventfd::default()
            },
            Errno::EBADF,
        ),
        row(
            "eventfd not an eventfd",
            drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
            SyncobjEventfd {
                handle: syncobj,
                fd: 2,
                ..SyncobjEventfd::default()
            },
            Errno::EINVAL,
        ),
    ];

    let mut failures = Vec::new();
    for mut r in rows {
        let got = call_raw(&file, r.request, &mut r.bytes);
        if got != Err(r.expected) {
            failures.push(format!(
                "{}: expected {:?}, got {got:?}",
                r.name, r.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Nothing the refused calls did is visible.
    assert_eq!(file.vm_mappings(vm).unwrap(), []);
    assert_eq!(system.stats().vms, 2);
    drop(file);
    assert_eq!(
        system.stats(),
        baseline,
        "everything the file held is freed"
    );
}

/// ioctl(2) passes the request as an unsigned int, so the upper half of
/// a 64-bit request never reaches the driver; and a refused output-only
/// ioctl still has its (zeroed) argument copied back, as drm_ioctl does.
#[test_log::test]
fn requests_are_32_bits_and_refusals_copy_their_argument_back() {
    let system = system();
    let file = system.open();
    let mut cap = GetCap {
        capability: agx_uapi::drm::DRM_CAP_SYNCOBJ,
        value: 0,
    };
    let request = u64::from(agx_uapi::drm::DRM_IOCTL_GET_CAP) | 0xFFFF_FFFF_0000_0000;
    assert_eq!(
        file.ioctl(request, std::ptr::addr_of_mut!(cap) as u64),
        Ok(0)
    );
    assert_eq!(cap.value, 1);
    let mut magic = 0xDEAD_BEEFu32;
    let get_magic = agx_uapi::ioctl::ioc(agx_uapi::ioctl::IOC_READ, b'd', 0x02, 4);
    assert_eq!(
        file.ioctl(u64::from(get_magic), std::ptr::addr_of_mut!(magic) as u64),
        Err(Errno::EACCES)
    );
    assert_eq!(magic, 0, "the kernel's zeroed argument is copied out");
    // The argument is copied in before the refusal: a bad pointer is
    // EFAULT, not EACCES.
    let flink = agx_uapi::ioctl::ioc(3, b'd', 0x0a, 8);
    assert_eq!(file.ioctl(u64::from(flink), 16), Err(Errno::EFAULT));
}

#[test_log::test]
fn a_bad_argument_pointer_is_efault() {
    let system = system();
    let file = system.open();
    assert_eq!(
        file.ioctl(u64::from(asahi::DRM_IOCTL_ASAHI_GET_TIME), 16),
        Err(Errno::EFAULT)
    );
    assert_eq!(
        file.ioctl(u64::from(asahi::DRM_IOCTL_ASAHI_GET_TIME), 0),
        Err(Errno::EFAULT)
    );
    // Writable input but unwritable output: the handler ran, the copy-out
    // failed.
    let read_only = b"0123456789abcdef";
    assert_eq!(
        file.ioctl(
            u64::from(asahi::DRM_IOCTL_ASAHI_GET_TIME),
            read_only.as_ptr() as u64
        ),
        Err(Errno::EFAULT)
    );
}

#[test_log::test]
fn struct_sizes_from_older_and_newer_userspace() {
    let system = system();
    let file = system.open();
    // GET_PARAMS honours a smaller buffer: only `size` bytes are written.
    let mut out = [0xAAu8; 600];
    let mut p = GetParams {
        pointer: out.as_mut_ptr() as u64,
        size: 16,
        ..GetParams::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_GET_PARAMS, &mut p).unwrap();
    assert_eq!(
        u32::from_le_bytes(out[8..12].try_into().unwrap()),
        13,
        "gpu_generation"
    );
    assert!(
        out[16..].iter().all(|&b| b == 0xAA),
        "nothing past the requested size"
    );
    let mut p = GetParams {
        pointer: out.as_mut_ptr() as u64,
        size: 4096,
        ..GetParams::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_GET_PARAMS, &mut p).unwrap();
    assert!(
        out[592..].iter().all(|&b| b == 0xAA),
        "at most sizeof(params_global)"
    );

    // SYNCOBJ_WAIT before Linux 6.5 was 32 bytes (no deadline_nsec): the
    // shorter request is zero-extended and works.
    let mut c = agx_uapi::drm::SyncobjCreate {
        handle: 0,
        flags: 1,
    };
    call(&file, drm::DRM_IOCTL_SYNCOBJ_CREATE, &mut c).unwrap();
    let handles = [c.handle];
    let wait = agx_uapi::drm::SyncobjWait {
        handles: handles.as_ptr() as u64,
        count_handles: 1,
        first_signaled: 77,
        ..Default::default()
    };
    let old_request = agx_uapi::ioctl::drm_iowr::<[u8; 32]>(agx_uapi::drm::nr::SYNCOBJ_WAIT);
    let mut bytes = wait.as_bytes()[..32].to_vec();
    assert_eq!(call_raw(&file, old_request, &mut bytes), Ok(0));
    assert_eq!(
        u32::from_le_bytes(bytes[24..28].try_into().unwrap()),
        0,
        "first_signaled written back"
    );
    // A request that claims a size of 0 copies nothing in: VM_CREATE then
    // sees an all-zero (invalid) range.
    let zero_size = agx_uapi::ioctl::drm_iowr::<[u8; 0]>(
        agx_uapi::ioctl::DRM_COMMAND_BASE + asahi::nr::VM_CREATE,
    );
    let mut c = VmCreate {
        kernel_start: KERNEL_START,
        kernel_end: KERNEL_END,
        ..VmCreate::default()
    };
    assert_eq!(call(&file, zero_size, &mut c), Err(Errno::EINVAL));
    drop(file);
    assert_eq!(system.stats().syncobjs, 0);
}

#[test_log::test]
fn an_unsupported_cap_reads_back_zero() {
    let system = system();
    let file = system.open();
    let mut cap = GetCap {
        capability: drm::DRM_CAP_DUMB_BUFFER,
        value: 0xdead,
    };
    assert_eq!(
        call(&file, drm::DRM_IOCTL_GET_CAP, &mut cap),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(cap.value, 0, "Linux zeroes the value and copies it back");
}

/// Captures what the kmd logs on this thread, as text.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_refusal_is_logged_with_its_typed_error() {
    let system = system();
    let file = system.open();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut create = GemCreate {
            size: PAGE,
            flags: 0x8000_0000,
            ..GemCreate::default()
        };
        assert_eq!(
            call(&file, asahi::DRM_IOCTL_ASAHI_GEM_CREATE, &mut create),
            Err(Errno::EINVAL)
        );
        let mut close = GemClose { handle: 77, pad: 0 };
        assert_eq!(
            call(&file, drm::DRM_IOCTL_GEM_CLOSE, &mut close),
            Err(Errno::EINVAL)
        );
        assert_eq!(file.ioctl(0x1234, 0), Err(Errno::ENOTTY));
        assert!(file.mmap_object(0x7700_0000_0000, PAGE).is_err());
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "one line per refusal:\n{log}");
    for (line, wanted) in lines.iter().zip([
        [
            "ioctl=\"ASAHI_GEM_CREATE\"",
            "errno=\"EINVAL\"",
            "unknown flags 0x80000000",
        ],
        [
            "ioctl=\"GEM_CLOSE\"",
            "errno=\"EINVAL\"",
            "GEM_CLOSE of unknown handle 77",
        ],
        ["request=0x1234", "errno=\"ENOTTY\"", "is not a DRM ioctl"],
        [
            "mmap refused",
            "errno=\"EINVAL\"",
            "no object at mmap offset 0x770000000000",
        ],
    ]) {
        for needle in wanted {
            assert!(line.contains(needle), "{needle:?} not in {line:?}");
        }
        assert!(line.contains("DEBUG"), "{line}");
    }
}
