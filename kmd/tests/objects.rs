//! GEM objects cost memory, not host descriptors: a device that hands CPU
//! mappings out as descriptors (as the device process does) cuts a file's
//! small private objects from slabs, one memfd each, so one client's
//! 100,000 live objects need about 200 descriptors and mappings of the
//! device, not 100,000 (the device's descriptor limit bounded every
//! client's objects together). Each test binary is its own process, so
//! the descriptor and mapping counts here are this test's.

mod common;

use std::os::fd::AsRawFd;

use agx_kmd::Errno;
use agx_uapi::asahi::GemFlags;
use agx_uapi::drm::{self, GemClose};
use common::*;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

#[test_log::test]
fn a_hundred_thousand_private_objects_cost_no_descriptor_each() {
    const OBJECTS: u32 = 100_000;
    const OBJECT_BYTES: u64 = 16 << 10;
    let config = DeviceConfig {
        keep_object_descriptors: true,
        ..DeviceConfig::default()
    };
    let device = TestDevice(common::scripted::boot(4 << 30, config).0);
    let (file, other) = (device.open(), device.open());
    let (vm, other_vm) = (vm_create(&file), vm_create(&other));
    let (descriptors, maps) = (open_descriptors(), mappings());
    let private = GemFlags::VM_PRIVATE.bits();
    let handles: Vec<u32> = (0..OBJECTS)
        .map(|_| gem_create(&file, OBJECT_BYTES, private, vm).expect("GEM_CREATE"))
        .collect();
    assert_eq!(device.stats().gem_objects, u64::from(OBJECTS));
    let added = open_descriptors() - descriptors;
    assert!(added < 1_024, "{added} descriptors for {OBJECTS} objects");
    let added = mappings() - maps;
    assert!(added < 1_024, "{added} mappings for {OBJECTS} objects");

    // Each object's CPU mapping reaches its own bytes, through its slab's
    // memfd at its offset; another file's objects are in another memfd.
    let mut inodes = std::collections::BTreeSet::new();
    for (n, &handle) in [0, 1, OBJECTS / 2, OBJECTS - 1]
        .iter()
        .map(|&i| (i, &handles[i as usize]))
    {
        let object = file.object(handle).unwrap();
        object.memory().write(100, &n.to_le_bytes()).unwrap();
        let (fd, at) = file
            .mmap_descriptor(object.mmap_offset(), OBJECT_BYTES)
            .unwrap();
        let mut word = [0u8; 4];
        rustix::io::pread(&fd, &mut word, at + 100).unwrap();
        assert_eq!(u32::from_le_bytes(word), n, "object {n}");
        inodes.insert(rustix::fs::fstat(&fd).unwrap().st_ino);
    }
    assert!(inodes.len() >= 2, "100,000 objects span several slabs");
    let theirs = gem_create(&other, OBJECT_BYTES, private, other_vm).unwrap();
    let object = other.object(theirs).unwrap();
    let (fd, _) = other
        .mmap_descriptor(object.mmap_offset(), OBJECT_BYTES)
        .unwrap();
    let inode = rustix::fs::fstat(&fd).unwrap().st_ino;
    assert!(!inodes.contains(&inode), "a file's slabs are its own");
    assert!(fd.as_raw_fd() >= 0);
    drop(fd);

    for handle in handles {
        let mut close = GemClose { handle, pad: 0 };
        call(&file, drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    }
    assert_eq!(device.stats().gem_objects, 1);
    assert!(
        open_descriptors() <= descriptors + 2,
        "no more than each file's current slab is left"
    );
    drop((object, file, other));
    assert_eq!(device.stats().gem_objects, 0);
    assert!(
        open_descriptors() <= descriptors,
        "the slabs went with their files"
    );
}

/// All clients together may hold only so many objects whose memfd the
/// device keeps (`DeviceConfig::device_descriptor_limit`), so that
/// clients at their own caps cannot take every descriptor the device
/// needs for its files and channels: past it GEM_CREATE fails with
/// ENOMEM in any client, private objects go on, and a descriptor one
/// client gives back is another's to take.
#[test_log::test]
fn all_clients_device_descriptors_are_capped_with_enomem() {
    let config = DeviceConfig {
        keep_object_descriptors: true,
        client_descriptor_limit: 40,
        device_descriptor_limit: 100,
        ..DeviceConfig::default()
    };
    let device = TestDevice(common::scripted::boot(1 << 30, config).0);
    let pid = std::process::id();
    let clients: Vec<_> = (1..=3).map(|n| device.open_for_process(pid + n)).collect();
    let mut held: Vec<Vec<u32>> = clients
        .iter()
        .map(|file| {
            (0..40)
                .map_while(|_| gem_create(file, 16 << 10, 0, 0).ok())
                .collect()
        })
        .collect();
    let counts: Vec<usize> = held.iter().map(Vec::len).collect();
    assert_eq!(
        counts,
        [40, 40, 20],
        "the third client stops at the device's cap"
    );
    assert_eq!(gem_create(&clients[2], 16 << 10, 0, 0), Err(Errno::ENOMEM));
    let vm = vm_create(&clients[2]);
    assert!(
        gem_create(&clients[2], 16 << 10, GemFlags::VM_PRIVATE.bits(), vm).is_ok(),
        "slab objects go on"
    );
    let mut close = GemClose {
        handle: held[0].pop().unwrap(),
        pad: 0,
    };
    call(&clients[0], drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    assert!(
        gem_create(&clients[2], 16 << 10, 0, 0).is_ok(),
        "the first client's freed descriptor is the third's"
    );
    assert_eq!(
        gem_create(&clients[0], 16 << 10, 0, 0),
        Err(Errno::ENOMEM),
        "under its own cap, the first client meets the device's"
    );
}

/// One client process may hold only so many objects whose memfd the
/// device keeps (`DeviceConfig::client_descriptor_limit`), whichever of
/// its files made them: past it GEM_CREATE (and the import of another
/// device's buffer) fail with ENOMEM, the errno Linux gives a GEM_CREATE
/// it cannot back, in every file the process opened (a second file is no
/// way round the cap, as it was when the cap was per file), while private
/// objects (in slabs) and other processes' files go on.
#[test_log::test]
fn a_clients_device_descriptors_are_capped_with_enomem_across_its_files() {
    let config = DeviceConfig {
        keep_object_descriptors: true,
        client_descriptor_limit: 100,
        ..DeviceConfig::default()
    };
    let device = TestDevice(common::scripted::boot(1 << 30, config).0);
    let (file, second) = (device.open(), device.open());
    let other = device.open_for_process(std::process::id() + 1);
    let vm = vm_create(&file);
    let mut shared: Vec<u32> = (0..60)
        .map(|_| gem_create(&file, 16 << 10, 0, 0).unwrap())
        .collect();
    let theirs_too: Vec<u32> = (0..40)
        .map(|_| gem_create(&second, 16 << 10, 0, 0).unwrap())
        .collect();
    assert_eq!(gem_create(&file, 16 << 10, 0, 0), Err(Errno::ENOMEM));
    assert_eq!(gem_create(&second, 16 << 10, 0, 0), Err(Errno::ENOMEM));
    assert_eq!(file.memory().account().descriptors(), 100);
    shared.extend(theirs_too);
    let private = GemFlags::VM_PRIVATE.bits();
    assert!(
        gem_create(&file, 16 << 10, private, vm).is_ok(),
        "slab objects go on"
    );
    let theirs = gem_create(&other, 16 << 10, 0, 0).unwrap();
    // Importing another client's object of this device makes no new
    // memfd: the descriptor stays charged to the client that created it.
    let mut export = agx_uapi::drm::PrimeHandle {
        handle: theirs,
        flags: 0,
        fd: -1,
    };
    call(&other, drm::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut export).unwrap();
    let mut import = agx_uapi::drm::PrimeHandle {
        handle: 0,
        flags: 0,
        fd: export.fd,
    };
    assert!(call(&file, drm::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut import).is_ok());
    let mut close = GemClose {
        handle: shared[0],
        pad: 0,
    };
    call(&file, drm::DRM_IOCTL_GEM_CLOSE, &mut close).unwrap();
    assert!(
        gem_create(&file, 16 << 10, 0, 0).is_ok(),
        "a closed object's descriptor is free"
    );
    // SAFETY: the export above handed this descriptor to the test.
    drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(export.fd) });
}
