//! VMs and their page tables, checked by walking the tables the kmd wrote
//! in simulated RAM; object lifetimes; leak checks.

mod common;

use std::collections::HashMap;

use agx_hw::addr::PhysAddr;
use agx_hw::formats::UatFaultReason;
use agx_hw::uat::{translate, Access, PhysicalMemory, DUMMY_PAGE_VA};
use agx_kmd::{Device, File};
use agx_uapi::asahi::{self, BindFlags, VmDestroy};
use agx_uapi::drm::{self, GemClose};
use common::*;
use proptest::prelude::*;

const R: u32 = BindFlags::READ.bits();
const W: u32 = BindFlags::WRITE.bits();
const RW: u32 = R | W;
const SINGLE: u32 = BindFlags::SINGLE_PAGE.bits();

fn object_pa(file: &File, handle: u32) -> u64 {
    file.object(handle).unwrap().memory().pa().get()
}

fn gpu_read(system: &Device, file: &File, vm: u32, va: u64) -> Result<u64, UatFaultReason> {
    translate(
        system.ram(),
        file.vm_root_pa(vm).unwrap(),
        va,
        Access::GpuRead,
    )
    .map(|t| t.pa.get())
    .map_err(|f| f.reason)
}

fn gpu_write(system: &Device, file: &File, vm: u32, va: u64) -> Result<u64, UatFaultReason> {
    translate(
        system.ram(),
        file.vm_root_pa(vm).unwrap(),
        va,
        Access::GpuWrite,
    )
    .map(|t| t.pa.get())
    .map_err(|f| f.reason)
}

#[test_log::test]
fn bind_patterns_show_up_in_the_page_tables() {
    let system = system();
    let file = system.open();
    let vm = vm_create(&file);
    let bo = gem_create(&file, 8 * PAGE, 0, 0).unwrap();
    let pa = object_pa(&file, bo);
    let base = 0x20_0000_0000 - 2 * PAGE; // straddles a 64 GiB root entry
    bind(&file, vm, &[map_op(bo, base, 8 * PAGE, 0, RW)]).unwrap();
    for i in 0..8 {
        assert_eq!(
            gpu_read(&system, &file, vm, base + i * PAGE + 12),
            Ok(pa + i * PAGE + 12)
        );
    }
    // Unbind the middle: a hole, the rest intact.
    bind(&file, vm, &[unmap_op(base + 2 * PAGE, 3 * PAGE)]).unwrap();
    for i in 0..8 {
        let expect = if (2..5).contains(&i) {
            Err(UatFaultReason::Unmapped)
        } else {
            Ok(pa + i * PAGE)
        };
        assert_eq!(
            gpu_read(&system, &file, vm, base + i * PAGE),
            expect,
            "page {i}"
        );
    }
    let mappings = file.vm_mappings(vm).unwrap();
    assert_eq!(mappings.len(), 2);
    assert_eq!(
        (mappings[1].va, mappings[1].offset, mappings[1].len_bytes),
        (base + 5 * PAGE, 5 * PAGE, 3 * PAGE)
    );

    // Permissions.
    bind(
        &file,
        vm,
        &[
            map_op(bo, base, PAGE, 0, R),
            map_op(bo, base + PAGE, PAGE, PAGE, W),
        ],
    )
    .unwrap();
    assert_eq!(
        gpu_write(&system, &file, vm, base),
        Err(UatFaultReason::ReadOnly)
    );
    assert_eq!(
        gpu_read(&system, &file, vm, base + PAGE),
        Err(UatFaultReason::WriteOnly)
    );
    assert_eq!(gpu_write(&system, &file, vm, base + PAGE), Ok(pa + PAGE));

    // SINGLE_PAGE repeats one page of the object.
    let sparse = 0x3000_0000;
    bind(
        &file,
        vm,
        &[map_op(bo, sparse, 16 * PAGE, 3 * PAGE, RW | SINGLE)],
    )
    .unwrap();
    for i in 0..16 {
        assert_eq!(
            gpu_read(&system, &file, vm, sparse + i * PAGE),
            Ok(pa + 3 * PAGE)
        );
    }
    // The dummy page is there, its guard page is not.
    assert!(gpu_write(&system, &file, vm, DUMMY_PAGE_VA).is_ok());
    assert_eq!(
        gpu_read(&system, &file, vm, DUMMY_PAGE_VA + PAGE),
        Err(UatFaultReason::Unmapped)
    );
}

#[test_log::test]
fn cpu_mappings_reach_the_object_through_its_mmap_offset() {
    let system = system();
    let file = system.open();
    let bo = gem_create(&file, 2 * PAGE, 0, 0).unwrap();
    let mut m = agx_uapi::asahi::GemMmapOffset {
        handle: bo,
        ..Default::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_GEM_MMAP_OFFSET, &mut m).unwrap();
    let (object, within) = file.mmap_object(m.offset + PAGE, PAGE).unwrap();
    assert_eq!(within, PAGE);
    object.memory().write(within, b"cpu").unwrap();
    let mut buf = [0u8; 3];
    system
        .ram()
        .read(PhysAddr(object_pa(&file, bo) + PAGE), &mut buf)
        .unwrap();
    assert_eq!(&buf, b"cpu");
    assert_eq!(
        file.mmap_object(m.offset, 3 * PAGE).unwrap_err(),
        agx_kmd::Errno::EINVAL
    );
    assert_eq!(
        file.mmap_object(m.offset + (1 << 40), PAGE).unwrap_err(),
        agx_kmd::Errno::EINVAL
    );
    let other = system.open();
    assert_eq!(
        other.mmap_object(m.offset, PAGE).unwrap_err(),
        agx_kmd::Errno::EACCES
    );
}

#[test_log::test]
fn timestamp_buffers_bind_and_unbind() {
    let system = system();
    let file = system.open();
    let bo = gem_create(&file, 4 * PAGE, 0, 0).unwrap();
    let mut b = asahi::GemBindObject {
        op: 0,
        flags: 1,
        handle: bo,
        offset: PAGE,
        range: 2 * PAGE,
        ..Default::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT, &mut b).unwrap();
    assert_eq!(b.object_handle, 1);
    let bound = file.bound_object(1).unwrap();
    assert_eq!((bound.offset, bound.range), (PAGE, 2 * PAGE));
    drop(bound);
    call(
        &file,
        drm::DRM_IOCTL_GEM_CLOSE,
        &mut GemClose { handle: bo, pad: 0 },
    )
    .unwrap();
    assert_eq!(
        system.stats().gem_objects,
        1,
        "the binding keeps the object"
    );
    let mut u = asahi::GemBindObject {
        op: 1,
        object_handle: 1,
        ..Default::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_GEM_BIND_OBJECT, &mut u).unwrap();
    assert_eq!(system.stats().gem_objects, 0);
}

#[test_log::test]
fn queues_keep_their_vm_alive() {
    let system = system();
    let file = system.open();
    let vm = vm_create(&file);
    let mut q = asahi::QueueCreate {
        vm_id: vm,
        priority: 1,
        usc_exec_base: 0x10_0000_0000,
        ..Default::default()
    };
    call(&file, asahi::DRM_IOCTL_ASAHI_QUEUE_CREATE, &mut q).unwrap();
    assert_eq!(q.queue_id, 1);
    let queue = file.queue(1).unwrap();
    assert_eq!(queue.usc_exec_base(), 0x10_0000_0000);
    assert_eq!(queue.tvb_stats().blocks, agx_kmd::tvb::INITIAL_BLOCKS);
    drop(queue);
    call(
        &file,
        asahi::DRM_IOCTL_ASAHI_VM_DESTROY,
        &mut VmDestroy { vm_id: vm, pad: 0 },
    )
    .unwrap();
    assert_eq!(system.stats().vms, 1, "the queue keeps the VM");
    call(
        &file,
        asahi::DRM_IOCTL_ASAHI_QUEUE_DESTROY,
        &mut asahi::QueueDestroy {
            queue_id: 1,
            pad: 0,
        },
    )
    .unwrap();
    // The firmware forgets the queue's work queues first, then the VM goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while system.stats().vms != 0 {
        assert!(std::time::Instant::now() < deadline, "the VM is released");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The dummy page is writable by the GPU, so it must not be shared:
/// each VM has its own, zeroed (as drm/asahi allocates one per VM).
#[test_log::test]
fn each_vm_has_its_own_zeroed_dummy_page() {
    let system = system();
    let (first, second) = (system.open(), system.open());
    let (a, b) = (vm_create(&first), vm_create(&first));
    let c = vm_create(&second);
    let dummy = |file: &File, vm| PhysAddr(gpu_write(&system, file, vm, DUMMY_PAGE_VA).unwrap());
    let (pa_a, pa_b, pa_c) = (dummy(&first, a), dummy(&first, b), dummy(&second, c));
    assert_ne!(pa_a, pa_b, "two VMs of one file");
    assert_ne!(pa_a, pa_c, "VMs of two files");
    // What one client's shader stores there, another does not see.
    system.ram().write(pa_a, b"secret").unwrap();
    let mut seen = [0u8; 6];
    system.ram().read(pa_c, &mut seen).unwrap();
    assert_eq!(seen, [0; 6]);
    // A VM made after the page was written still gets a zeroed one.
    drop(first);
    let d = vm_create(&second);
    system.ram().read(dummy(&second, d), &mut seen).unwrap();
    assert_eq!(seen, [0; 6]);
}

#[test_log::test]
fn vms_are_isolated() {
    let system = system();
    let file = system.open();
    let (a, b) = (vm_create(&file), vm_create(&file));
    let bo = gem_create(&file, PAGE, 0, 0).unwrap();
    bind(&file, a, &[map_op(bo, 0x10_0000, PAGE, 0, RW)]).unwrap();
    assert!(gpu_read(&system, &file, a, 0x10_0000).is_ok());
    assert_eq!(
        gpu_read(&system, &file, b, 0x10_0000),
        Err(UatFaultReason::Unmapped)
    );
    assert_ne!(file.vm_root_pa(a), file.vm_root_pa(b));
    // Another file's VM with the same id sees nothing either.
    let other = system.open();
    let c = vm_create(&other);
    assert_eq!(c, 1);
    assert_eq!(
        gpu_read(&system, &other, c, 0x10_0000),
        Err(UatFaultReason::Unmapped)
    );
}

#[test_log::test]
fn objects_live_while_mapped_and_nothing_leaks() {
    let system = system();
    let baseline = system.stats();
    {
        let file = system.open();
        let vm = vm_create(&file);
        let bo = gem_create(&file, 2 * PAGE, 0, 0).unwrap();
        let pa = object_pa(&file, bo);
        system.ram().write(PhysAddr(pa + 100), b"kept").unwrap();
        bind(&file, vm, &[map_op(bo, 0x40_0000, 2 * PAGE, 0, RW)]).unwrap();
        call(
            &file,
            drm::DRM_IOCTL_GEM_CLOSE,
            &mut GemClose { handle: bo, pad: 0 },
        )
        .unwrap();
        assert_eq!(
            system.stats().gem_objects,
            1,
            "the mapping keeps the object"
        );
        let t = gpu_read(&system, &file, vm, 0x40_0000 + 100).unwrap();
        let mut buf = [0u8; 4];
        system.ram().read(PhysAddr(t), &mut buf).unwrap();
        assert_eq!(&buf, b"kept");
        // Unbinding the last mapping frees it.
        bind(&file, vm, &[unmap_op(0x40_0000, 2 * PAGE)]).unwrap();
        assert_eq!(system.stats().gem_objects, 0);
        // Destroying a VM releases its mappings and tables.
        let bo = gem_create(&file, PAGE, 0, 0).unwrap();
        bind(&file, vm, &[map_op(bo, 0x40_0000, PAGE, 0, RW)]).unwrap();
        call(
            &file,
            drm::DRM_IOCTL_GEM_CLOSE,
            &mut GemClose { handle: bo, pad: 0 },
        )
        .unwrap();
        call(
            &file,
            asahi::DRM_IOCTL_ASAHI_VM_DESTROY,
            &mut VmDestroy { vm_id: vm, pad: 0 },
        )
        .unwrap();
        assert_eq!(system.stats().gem_objects, 0);
        assert_eq!(system.stats().vms, 0);
        // Closing the file frees everything else it holds.
        let vm = vm_create(&file);
        let bo = gem_create(&file, 64 * PAGE, 0, 0).unwrap();
        bind(&file, vm, &[map_op(bo, 0x80_0000, 64 * PAGE, 0, RW)]).unwrap();
        assert!(system.stats().kernel_pages > 0);
    }
    assert_eq!(system.stats(), baseline);
}

#[test_log::test]
fn binding_over_a_mapping_replaces_it() {
    let system = system();
    let file = system.open();
    let vm = vm_create(&file);
    let (a, b) = (
        gem_create(&file, 4 * PAGE, 0, 0).unwrap(),
        gem_create(&file, 4 * PAGE, 0, 0).unwrap(),
    );
    bind(&file, vm, &[map_op(a, 0x100_0000, 4 * PAGE, 0, RW)]).unwrap();
    bind(&file, vm, &[map_op(b, 0x100_0000 + PAGE, 2 * PAGE, 0, R)]).unwrap();
    let expect = [
        object_pa(&file, a),
        object_pa(&file, b),
        object_pa(&file, b) + PAGE,
        object_pa(&file, a) + 3 * PAGE,
    ];
    for (i, pa) in expect.iter().enumerate() {
        assert_eq!(
            gpu_read(&system, &file, vm, 0x100_0000 + i as u64 * PAGE),
            Ok(*pa)
        );
    }
    assert_eq!(file.vm_mappings(vm).unwrap().len(), 3);
}

/// A bind or unbind within a 64-page window.
#[derive(Debug, Clone)]
enum Op {
    Map {
        object: usize,
        page: u64,
        pages: u64,
        offset_page: u64,
        flags: u32,
    },
    Unmap {
        page: u64,
        pages: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0..3usize,
            0..64u64,
            1..16u64,
            0..8u64,
            prop_oneof![Just(R), Just(W), Just(RW), Just(RW | SINGLE)]
        )
            .prop_map(|(object, page, pages, offset_page, flags)| Op::Map {
                object,
                page,
                pages,
                offset_page,
                flags
            }),
        (0..64u64, 1..24u64).prop_map(|(page, pages)| Op::Unmap { page, pages }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any sequence of binds leaves the tables translating exactly as a
    /// map of pages says.
    #[test]
    fn vm_bind_matches_a_page_map_model(ops in proptest::collection::vec(op_strategy(), 1..24)) {
        let system = system();
        let file = system.open();
        let vm = vm_create(&file);
        let objects: Vec<u32> = (0..3).map(|_| gem_create(&file, 24 * PAGE, 0, 0).unwrap()).collect();
        let base = 0x1_FFF0_0000u64; // crosses a 64 GiB boundary at page 4
        let mut model: HashMap<u64, (u64, u32)> = HashMap::new();
        for op in &ops {
            match *op {
                Op::Map { object, page, pages, offset_page, flags } => {
                    let handle = objects[object];
                    let fits = offset_page + if flags & SINGLE != 0 { 1 } else { pages } <= 24;
                    let result = bind(&file, vm, &[map_op(handle, base + page * PAGE, pages * PAGE, offset_page * PAGE, flags)]);
                    prop_assert_eq!(result.is_ok(), fits);
                    if fits {
                        let pa = object_pa(&file, handle);
                        for i in 0..pages {
                            let src = if flags & SINGLE != 0 { offset_page } else { offset_page + i };
                            model.insert(page + i, (pa + src * PAGE, flags & RW));
                        }
                    }
                }
                Op::Unmap { page, pages } => {
                    bind(&file, vm, &[unmap_op(base + page * PAGE, pages * PAGE)]).unwrap();
                    for i in 0..pages {
                        model.remove(&(page + i));
                    }
                }
            }
        }
        for page in 0..90u64 {
            let va = base + page * PAGE;
            let read = gpu_read(&system, &file, vm, va);
            let write = gpu_write(&system, &file, vm, va);
            match model.get(&page) {
                None => {
                    prop_assert_eq!(read, Err(UatFaultReason::Unmapped));
                }
                Some(&(pa, flags)) => {
                    prop_assert_eq!(read.is_ok(), flags & R != 0, "page {}", page);
                    prop_assert_eq!(write.is_ok(), flags & W != 0, "page {}", page);
                    prop_assert_eq!(read.or(write).unwrap(), pa);
                }
            }
        }
        let mapped: u64 = file.vm_mappings(vm).unwrap().iter().map(|m| m.len_bytes / PAGE).sum();
        prop_assert_eq!(mapped, model.len() as u64);
    }
}

/// One client cannot take all of RAM: past its limit GEM_CREATE is
/// ENOMEM, another client's file still gets memory, and the charge goes
/// with the object (not the handle: an object another client imported
/// stays charged).
#[test]
fn each_client_has_a_memory_limit_and_objects_give_their_charge_back() {
    const MIB: u64 = 1 << 20;
    let device = TestDevice(
        scripted::boot(
            RAM_BYTES,
            DeviceConfig {
                client_memory_limit_bytes: 64 * MIB,
                ..DeviceConfig::default()
            },
        )
        .0,
    );
    let greedy = device.open();
    let other = device.open_for_process(std::process::id() + 1);
    assert_eq!(
        gem_create(&greedy, RAM_BYTES, 0, 0),
        Err(agx_kmd::Errno::ENOMEM)
    );
    let first = gem_create(&greedy, 48 * MIB, 0, 0).unwrap();
    assert_eq!(greedy.memory().account().used_bytes(), 48 * MIB);
    // 16 KiB rounding counts: 16 MiB + 1 byte is 16 MiB + one page.
    assert_eq!(
        gem_create(&greedy, 16 * MIB + 1, 0, 0),
        Err(agx_kmd::Errno::ENOMEM)
    );
    let second = gem_create(&greedy, 16 * MIB, 0, 0).unwrap();
    assert_eq!(greedy.memory().account().used_bytes(), 64 * MIB);
    assert_eq!(gem_create(&greedy, 1, 0, 0), Err(agx_kmd::Errno::ENOMEM));
    // Another client is not starved.
    gem_create(&other, 64 * MIB, 0, 0).unwrap();
    // Shared with `other`, the second object stays charged to its creator
    // until its last holder lets go.
    let mut export = agx_uapi::drm::PrimeHandle {
        handle: second,
        ..Default::default()
    };
    call(&greedy, drm::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut export).unwrap();
    let mut import = agx_uapi::drm::PrimeHandle {
        fd: export.fd,
        ..Default::default()
    };
    call(&other, drm::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut import).unwrap();
    // SAFETY: closing the PRIME fd this test was given.
    unsafe { libc::close(export.fd) };
    for handle in [first, second] {
        let mut close = GemClose {
            handle,
            ..Default::default()
        };
        call(&greedy, drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    }
    assert_eq!(greedy.memory().account().used_bytes(), 16 * MIB);
    drop(other);
    assert_eq!(greedy.memory().account().used_bytes(), 0);
    gem_create(&greedy, 64 * MIB, 0, 0).unwrap();
}

/// A CPU mapping holds its object's own pages: after the object is freed
/// and another file's object takes its physical range, the old mapping
/// still shows the old bytes, and the new object starts zeroed.
#[test]
fn a_stale_cpu_mapping_never_reaches_the_next_owner_of_the_pages() {
    use agx_kmd::mem::Placement;
    let device = system();
    let first = device.open();
    let vm = vm_create(&first);
    let handle = gem_create(&first, 2 * PAGE, asahi::GemFlags::VM_PRIVATE.bits(), vm).unwrap();
    let object = first.object(handle).unwrap();
    let pa = object.memory().pa();
    let mapping = object
        .memory()
        .map_for_cpu(
            0,
            2 * PAGE as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            Placement::Anywhere,
        )
        .unwrap();
    // SAFETY: `mapping` maps two pages, readable and writable, that only
    // this test uses.
    let old = unsafe { std::slice::from_raw_parts_mut(mapping.as_ptr(), 2 * PAGE as usize) };
    old[..3].copy_from_slice(b"old");
    drop(object);
    let mut close = GemClose {
        handle,
        ..Default::default()
    };
    call(&first, drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    // The object was cut from its file's slab, whose range goes back to
    // RAM with the file.
    drop(first);
    let second = device.open();
    let reused = gem_create(&second, 2 * PAGE, 0, 0).unwrap();
    let reused = second.object(reused).unwrap();
    assert_eq!(reused.memory().pa(), pa, "first fit reuses the range");
    let mut fresh = [0xffu8; 3];
    reused.memory().read(0, &mut fresh).unwrap();
    assert_eq!(fresh, [0; 3], "the new object starts zeroed");
    reused.memory().write(0, b"new").unwrap();
    assert_eq!(&old[..3], b"old", "the stale mapping keeps its own pages");
    old[3..6].copy_from_slice(b"bad");
    let mut after = [0u8; 6];
    reused.memory().read(0, &mut after).unwrap();
    assert_eq!(&after, b"new\0\0\0");
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(mapping.as_ptr().cast(), 2 * PAGE as usize) };
}
