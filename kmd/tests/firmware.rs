//! The kmd against a scripted firmware, through the fwif contract alone:
//! what it lays out at boot, and what a firmware crash does to clients.

mod common;

use std::time::{Duration, Instant};

use agx_fwif::messages::{EventKind, EventMsg, FirmwareStatus, INIT_MAGIC, INTERFACE_VERSION};
use agx_fwif::ring::SharedMemory;
use agx_kmd::firmware::{FW_VA_END, FW_VA_START};
use agx_kmd::{DeviceConfig, Errno};
use agx_uapi::asahi::{self, VmCreate};
use agx_uapi::drm::{self, Version};
use common::*;
use zerocopy::IntoBytes;

#[test]
fn the_kmd_lays_out_the_init_block_the_firmware_boots_from() {
    let (device, coprocessor) = scripted::boot(
        RAM_BYTES,
        DeviceConfig {
            command_timeout_ms: 1234,
            ..DeviceConfig::default()
        },
    );
    let booted = coprocessor.booted();
    assert_eq!(booted.init.magic, INIT_MAGIC);
    assert_eq!(booted.init.version, INTERFACE_VERSION);
    assert_eq!(booted.init.command_timeout_ms, 1234);
    for ring in [
        &booted.init.events,
        &booted.init.log,
        &booted.init.device_control,
    ]
    .into_iter()
    .chain(booted.init.pipes.iter())
    {
        assert!((FW_VA_START..FW_VA_END).contains(&ring.state.get()));
        assert!((FW_VA_START..FW_VA_END).contains(&ring.entries.get()));
        assert!(ring.entry_count > 0);
    }
    assert_eq!(booted.status().booted, 1);
    assert!((FW_VA_START..FW_VA_END).contains(&device.firmware().init.get()));
    // The kmd works on a firmware that does nothing more.
    let file = agx_kmd::File::open(&device);
    vm_create(&file);
}

#[test]
fn a_firmware_crash_fails_driver_ioctls_with_enodev_but_not_the_core() {
    let (device, coprocessor) = scripted::boot(RAM_BYTES, DeviceConfig::default());
    let file = agx_kmd::File::open(&device);
    vm_create(&file);
    let booted = coprocessor.booted();
    let status = FirmwareStatus {
        booted: 1,
        crashed: 1,
        ..FirmwareStatus::default()
    };
    booted
        .view
        .write(booted.init.status, status.as_bytes())
        .unwrap();
    booted.post(EventMsg {
        kind: EventKind::Crash as u32,
        ..EventMsg::default()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut create = VmCreate {
        kernel_start: KERNEL_START,
        kernel_end: KERNEL_END,
        ..VmCreate::default()
    };
    loop {
        match call(&file, asahi::DRM_IOCTL_ASAHI_VM_CREATE, &mut create) {
            Err(Errno::ENODEV) => break,
            Ok(_) => assert!(Instant::now() < deadline, "the crash was not noticed"),
            Err(e) => panic!("VM_CREATE after a crash: {e:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The DRM core still answers: clients can still read their fences.
    let mut version = Version::default();
    assert_eq!(call(&file, drm::DRM_IOCTL_VERSION, &mut version), Ok(0));
}
